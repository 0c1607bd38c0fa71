import { describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CLI, makeStore, spawnWorker, tempDir, useWorkerProcesses } from './fixtures.js';

const exec = promisify(execFile);

/**
 * `memory-warden fleet` (and `schedule`) against real worker processes: a host nobody knows about is silent, not
 * fine; what a heartbeat says is checked; and reading the fleet writes no key.
 */
describe('fleet tells what is known', { timeout: 120_000 }, () => {
  const { redis: r, workers, prefix: prefixFor } = useWorkerProcesses();

  /** Stores a1 on host a and b1 on host b, one config; the CLI runs as machine `ops`, which holds no store. */
  function fleet(name: string, silentAfterMs = 5000) {
    const redis = r();
    const dir = tempDir(name);
    const prefix = prefixFor(name);
    const stores: Record<string, { db: string; host: string }> = {};
    for (const h of ['a', 'b']) {
      mkdirSync(join(dir, h));
      stores[`${h}1`] = { db: makeStore(join(dir, h, `${h}1.db`), { live: 1 }), host: h };
    }
    mkdirSync(join(dir, 'ops'));
    const off = { enabled: false };
    const file = join(dir, 'fleet.yaml');
    writeFileSync(file, JSON.stringify({
      stateDb: '${STATE_DIR}/state.db',
      log: { level: 'info' },
      redis: { url: redis.url, prefix },
      worker: { http: { port: 0 }, heartbeatMs: 200, silentAfterMs, schedules: { prune: { enabled: true, pattern: '0 3 * * *' }, integrity: off, snapshot: off, digest: off, drift: off } },
      stores,
    }));
    const start = (host: string) => {
      const w = spawnWorker(file, ['worker', '--host', host], { STATE_DIR: join(dir, host) });
      workers.push(w);
      return w;
    };
    const cli = async (args: string[]) => {
      const r = await exec(process.execPath, [CLI, ...args, '--config', file], { env: { ...process.env, REDIS_URL: '', STATE_DIR: join(dir, 'ops'), MEMORY_WARDEN_HOST: 'ops' } })
        .then((o) => ({ code: 0, ...o }), (e: { code: number; stdout: string; stderr: string }) => e);
      return { code: r.code, stdout: r.stdout, stderr: r.stderr };
    };
    const fleetJson = async () => {
      const r = await cli(['fleet', '--json']);
      return { code: r.code, status: JSON.parse(r.stdout) as { silent: string[]; hosts: { host: string; silent: boolean; neverSeen: boolean; lastSeen: string | null }[] } };
    };
    const keys = async () => {
      const out: string[] = [];
      let cursor = '0';
      do {
        const [next, batch] = await redis.client.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
        cursor = next;
        out.push(...batch);
      } while (cursor !== '0');
      return out.sort();
    };
    const beat = (host: string, fields: Record<string, unknown>) =>
      redis.client.hset(`${prefix}:fleet:hosts`, host, JSON.stringify({ host, version: '9.9.9', pid: 1, startedAt: new Date().toISOString(), lastSeen: new Date().toISOString(), stores: [], ...fields }));
    return { dir, prefix, file, start, cli, fleetJson, keys, beat, redis };
  }

  it('a configured host that never ran a worker is silent, exit 1; the machine running fleet is no host of it', async () => {
    const f = fleet('never');
    const a = f.start('a');
    await a.ready;
    const { code, status } = await f.fleetJson();
    expect(code).toBe(1);
    expect(status.silent).toEqual(['b']);
    expect(status.hosts.map((h) => h.host)).toEqual(['a', 'b']); // not `ops`
    expect(status.hosts.find((h) => h.host === 'b')).toMatchObject({ silent: true, neverSeen: true, lastSeen: null });
    expect(status.hosts.find((h) => h.host === 'a')).toMatchObject({ silent: false, neverSeen: false });
    const text = await f.cli(['fleet']);
    expect(text.code).toBe(1);
    expect(text.stdout).toMatch(/^b {2}SILENT: never seen/m);
    expect(text.stdout).not.toMatch(/^ops\b/m);
    // b starts: nothing silent, exit 0
    const b = f.start('b');
    await b.ready;
    expect(await f.fleetJson()).toMatchObject({ code: 0, status: { silent: [] } });
  });

  it('a heartbeat whose time does not parse, or lies ahead of the clock, is silent, not up', async () => {
    // b's heartbeat, written just before each look, stays fresh however long the CLI takes to start on a busy machine.
    const f = fleet('badtime', 600_000);
    for (const lastSeen of ['yesterday-ish', '2026-13-45T99:00:00Z', '1', '', new Date(Date.now() + 3_600_000).toISOString()]) {
      await f.beat('a', { lastSeen });
      await f.beat('b', {});
      const { code, status } = await f.fleetJson();
      expect(code, lastSeen).toBe(1);
      expect(status.silent, lastSeen).toEqual(['a']);
    }
    // a heartbeat that is no heartbeat (not JSON, another host's under this name): never seen, silent
    await f.redis.client.hset(`${f.prefix}:fleet:hosts`, 'a', '{not json');
    expect((await f.fleetJson()).status.hosts.find((h) => h.host === 'a')).toMatchObject({ silent: true, neverSeen: true });
    await f.beat('a', { host: 'b' });
    expect((await f.fleetJson()).status.hosts.find((h) => h.host === 'a')).toMatchObject({ silent: true, neverSeen: true });
  });

  it('fleet and schedule write no key, whatever the heartbeats name; forged host names are not listed', async () => {
    const f = fleet('readonly');
    const a = f.start('a');
    await a.ready;
    a.proc.kill('SIGTERM');
    await a.exited;
    await f.beat('x'.repeat(200_000), {});
    await f.beat('evil\u001b[2J\u0007host', {});
    await f.beat('../../etc', {});
    await f.beat('ghost', { stores: ['nowhere'] }); // a host name, not configured: listed, read from Redis only
    const before = await f.keys();
    const fleetOut = await f.cli(['fleet', '--json']);
    const text = await f.cli(['fleet']);
    const schedule = await f.cli(['schedule', '--json']);
    expect(schedule.code, schedule.stderr).toBe(0);
    expect(await f.keys()).toEqual(before);
    const status = JSON.parse(fleetOut.stdout) as { hosts: { host: string }[] };
    expect(status.hosts.map((h) => h.host)).toEqual(['a', 'b', 'ghost']);
    expect(text.stdout).not.toContain('\u001b');
    expect(text.stdout.length).toBeLessThan(20_000);
  });
});
