// Redis Cluster (three primaries, real, on loopback): a prefix without a {hash tag} is refused naming the field; the
// worker (two hosts), `enqueue` and `fleet` run with every key in the prefix's one slot.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { openDatabase } from '../../src/store/sqlite.js';
import { toCanonical } from '../../src/time/instants.js';
import { hashTag } from '../../src/queue/config.js';
import { cli } from '../helpers/cli.js';
import { startClusterSet, type ClusterSet } from '../helpers/redis-servers.js';
import { assertBuilt, killAll, makeStore, spawnWorker, tempDir, type SpawnedWorker } from './fixtures.js';

describe('Redis Cluster', { timeout: 180_000 }, () => {
  let cluster: ClusterSet;
  const workers: SpawnedWorker[] = [];

  beforeAll(async () => {
    assertBuilt();
    cluster = await startClusterSet();
  });
  afterEach(async () => killAll(workers.splice(0)));
  afterAll(async () => {
    await cluster?.stop();
  });

  function fleetConfig(prefix: string) {
    const dir = tempDir('redis-cluster');
    const stores: Record<string, { db: string; host: string }> = {};
    for (const h of ['a', 'b']) {
      mkdirSync(join(dir, h));
      const db = makeStore(join(dir, h, `${h}1.db`), { expired: 3, live: 2 });
      const conn = openDatabase(db);
      const hourAgo = toCanonical(Date.now() - 3_600_000);
      conn.prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at) VALUES (?, 'fleet', 'new here', 'message', ?, ?)`).run(`new_on_${h}`, hourAgo, hourAgo);
      conn.close();
      stores[`${h}1`] = { db, host: h };
    }
    const off = { enabled: false };
    const file = join(dir, 'fleet.yaml');
    writeFileSync(file, JSON.stringify({
      stateDb: '${STATE_DIR}/state.db',
      redis: { ...cluster.config, prefix },
      worker: { http: { port: 0 }, concurrency: 1, heartbeatMs: 200, schedules: { prune: off, integrity: off, snapshot: off, digest: off, drift: off } },
      stores,
    }));
    mkdirSync(join(dir, 'ops'));
    return { dir, file, env: (h: string) => ({ STATE_DIR: join(dir, h), REDIS_URL: '' }) };
  }

  const refused = ['memory-warden', '{}memory-warden', 'mw{', 'mw}{', 'mw-{}-x'];
  for (const prefix of refused) {
    it(`refuses prefix "${prefix}" on a cluster: exit 2, one line naming redis.prefix`, () => {
      expect(hashTag(prefix)).toBeUndefined();
      const f = fleetConfig('{unused}');
      const file = join(f.dir, 'bad.yaml');
      writeFileSync(file, JSON.stringify({ stateDb: join(f.dir, 'state.db'), redis: { ...cluster.config, prefix }, stores: {} }));
      for (const command of [['config'], ['fleet'], ['enqueue', 'prune']]) {
        const r = cli([...command, '--config', file]);
        expect(r.code, r.stderr).toBe(2);
        expect(r.stderr.trim().split('\n'), r.stderr).toHaveLength(1);
        expect(r.stderr).toMatch(/redis\.prefix.*no \{hash tag\}/);
      }
    });
  }

  it('runs the worker, enqueue and fleet with every key in one slot', async () => {
    const prefix = `{mw-${randomBytes(3).toString('hex')}}`;
    const f = fleetConfig(prefix);
    const [a, b] = ['a', 'b'].map((h) => {
      const w = spawnWorker(f.file, ['worker', '--host', h], f.env(h));
      workers.push(w);
      return w;
    }) as [SpawnedWorker, SpawnedWorker];
    await Promise.all([a.ready, b.ready]);

    const enq = cli(['enqueue', 'prune', '--store', 'b1', '--config', f.file], f.env('ops'));
    expect(enq.code, enq.stderr).toBe(0);
    await b.waitFor('prune of b1 on host b', (l) => l.msg === 'job done' && l.job === 'prune' && l.store === 'b1', 60_000);

    const fleet = cli(['fleet', '--json', '--config', f.file], f.env('ops'));
    expect(fleet.stderr).toBe('');
    expect(fleet.json().hosts.map((h: { host: string; lastSeen?: string }) => [h.host, Boolean(h.lastSeen)])).toEqual([['a', true], ['b', true]]);

    // Every key the fleet wrote is on the one node that owns the prefix's slot.
    const holders: number[] = [];
    for (const n of cluster.nodes) {
      const node = new Redis({ host: '127.0.0.1', port: n.port, maxRetriesPerRequest: 1 });
      const [, keys] = await node.scan('0', 'MATCH', `${prefix}:*`, 'COUNT', 10_000);
      node.disconnect();
      if (keys.length > 0) holders.push(n.port);
    }
    expect(holders).toHaveLength(1);
  });
});
