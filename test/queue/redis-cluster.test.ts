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
import { cli, cliAsync } from '../helpers/cli.js';
import { startClusterSet, type ClusterSet } from '../helpers/redis-servers.js';
import { startSmtp, type TestSmtp } from '../helpers/smtp.js';
import { assertBuilt, killAll, makeStore, spawnWorker, tempDir, until, type LogLine, type SpawnedWorker } from './fixtures.js';

describe('Redis Cluster', { timeout: 180_000 }, () => {
  let cluster: ClusterSet;
  let smtp: TestSmtp;
  const workers: SpawnedWorker[] = [];

  beforeAll(async () => {
    assertBuilt();
    cluster = await startClusterSet();
    smtp = await startSmtp();
  });
  afterEach(async () => killAll(workers.splice(0)));
  afterAll(async () => {
    await smtp?.close();
    await cluster?.stop();
  });

  /** Every key on every node of the cluster, by node port. */
  async function keysByNode(): Promise<Map<number, string[]>> {
    const out = new Map<number, string[]>();
    for (const n of cluster.nodes) {
      const node = new Redis({ host: '127.0.0.1', port: n.port, maxRetriesPerRequest: 1 });
      const [, keys] = await node.scan('0', 'MATCH', '*', 'COUNT', 100_000);
      node.disconnect();
      out.set(n.port, keys);
    }
    return out;
  }

  /**
   * The nodes holding a key under `prefix` (one, when they all are in the prefix's slot), after checking that no key
   * anywhere is outside every test's prefix: a key written without the hash tag would land on any node.
   */
  async function nodesHolding(prefix: string): Promise<number[]> {
    const byNode = await keysByNode();
    expect([...byNode.values()].flat().filter((k) => !/^\{mw-[0-9a-f]{6}\}:/.test(k))).toEqual([]);
    return [...byNode].filter(([, keys]) => keys.some((k) => k.startsWith(`${prefix}:`))).map(([port]) => port);
  }

  function fleetConfig(prefix: string, extra: Record<string, unknown> = {}, schedules: Record<string, unknown> = {}) {
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
      worker: { http: { port: 0 }, concurrency: 1, heartbeatMs: 200, schedules: { prune: off, integrity: off, snapshot: off, digest: off, drift: off, ...schedules } },
      stores,
      ...extra,
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
    expect(await nodesHolding(prefix)).toHaveLength(1);
  });

  // The digest of a fleet on the cluster: the job on the shared queue, one digest-sections task per host on that
  // host's task queue, the day's delivery record; sent by a real SMTP server on loopback. Enqueued by the CLI, and
  // fired by the cron scheduler the workers keep on the shared queue (each run after the first finds it sent).
  const digestRuns = [
    { how: 'enqueued', schedule: { enabled: false } },
    { how: 'scheduled by cron', schedule: { enabled: true, pattern: '* * * * * *' } },
  ];
  for (const { how, schedule } of digestRuns) {
    it(`sends the fleet digest ${how} once, with both hosts' sections, every key in one slot`, async () => {
      const prefix = `{mw-${randomBytes(3).toString('hex')}}`;
      const f = fleetConfig(prefix, {
        smtp: smtp.config(),
        digest: { to: ['owner@example.org'], from: 'warden <warden@example.org>', hostTimeoutSeconds: 20 },
      }, { digest: schedule });
      smtp.received.length = 0;
      const [a, b] = ['a', 'b'].map((h) => {
        const w = spawnWorker(f.file, ['worker', '--host', h], f.env(h));
        workers.push(w);
        return w;
      }) as [SpawnedWorker, SpawnedWorker];
      await Promise.all([a.ready, b.ready]);

      if (!schedule.enabled) {
        // Not cli(): spawnSync would hold this process, and the SMTP server in it, for as long as enqueue waits.
        const enq = await cliAsync(['enqueue', 'digest', '--config', f.file], f.env('ops'));
        expect(enq.code, enq.stderr).toBe(0);
      }
      const mails = () => smtp.received.filter((m) => m.envelope.to.includes('owner@example.org'));
      const ended = (l: LogLine) => l.job === 'digest' && (l.msg === 'job done' || l.msg === 'job failed');
      const runs = () => [a, b].flatMap((w) => w.lines.filter(ended));
      const mailedAt = await until('the digest mail', () => (mails().length > 0 ? Date.now() : 0), 60_000);
      if (schedule.enabled) {
        // A scheduled run that began after the mail arrived has finished: it found the day sent, and sent nothing.
        const startedLater = () => [a, b].flatMap((w) => w.lines.filter((l) => l.job === 'digest' && l.msg === 'job start' && l.time > mailedAt).map((l) => l.jobId));
        await until('a later scheduled run to finish', () => runs().some((r) => startedLater().includes(r.jobId)), 60_000);
      }
      for (const run of runs()) expect(run, a.stderr().slice(-1500) + b.stderr().slice(-1500)).toMatchObject({ msg: 'job done', outcome: 'ok' });
      if (schedule.enabled) expect(runs().every((r) => String(r.jobId).startsWith('repeat:digest:'))).toBe(true);
      // each run taken by one worker only
      const starts = [a, b].flatMap((w) => w.lines.filter((l) => l.job === 'digest' && l.msg === 'job start').map((l) => l.jobId));
      expect(new Set(starts).size).toBe(starts.length);

      expect(mails()).toHaveLength(1);
      const text = String(mails()[0]!.parsed.text);
      expect(text).toContain('new_on_a');
      expect(text).toContain('new_on_b');
      expect(text).not.toMatch(/no report from host/);
      expect(await nodesHolding(prefix)).toHaveLength(1);
    });
  }

  it("a silent host's stores are unknown in the fleet digest on the cluster, and it is still sent once", async () => {
    const prefix = `{mw-${randomBytes(3).toString('hex')}}`;
    const f = fleetConfig(prefix, {
      smtp: smtp.config(),
      digest: { to: ['owner@example.org'], from: 'warden <warden@example.org>', hostTimeoutSeconds: 3 },
    });
    smtp.received.length = 0;
    const [a, b] = ['a', 'b'].map((h) => {
      const w = spawnWorker(f.file, ['worker', '--host', h], f.env(h));
      workers.push(w);
      return w;
    }) as [SpawnedWorker, SpawnedWorker];
    await Promise.all([a.ready, b.ready]);
    b.proc.kill('SIGKILL');
    await b.exited;
    const enq = await cliAsync(['enqueue', 'digest', '--config', f.file], f.env('ops'));
    expect(enq.code, enq.stderr).toBe(0);
    const mails = smtp.received.filter((m) => m.envelope.to.includes('owner@example.org'));
    expect(mails).toHaveLength(1);
    const text = String(mails[0]!.parsed.text);
    expect(text).toContain('new_on_a');
    expect(text).not.toContain('new_on_b');
    expect(text).toMatch(/no report from host b since \d{4}-\d\d-\d\dT/);
    expect(text).toMatch(/Unknown: no report of this store/);
    expect(await nodesHolding(prefix)).toHaveLength(1);
  });
});
