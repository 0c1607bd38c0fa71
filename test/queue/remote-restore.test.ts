import { describe, expect, it } from 'vitest';
import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CLI, countRows, makeStore, ROOT, spawnWorker, tempDir, until, useWorkerProcesses } from './fixtures.js';

const exec = promisify(execFile);

/**
 * `restore` of a store on another host that nobody waits for any more (Ctrl-C, SIGTERM, --timeout): a request no
 * worker has taken is withdrawn, so the host does not restore, later and for nobody, a store the person gave up on.
 * Real worker processes, a real CLI process interrupted with a signal, a real Redis under a prefix of its own.
 */
describe('an interrupted cross-host restore', { timeout: 120_000 }, () => {
  const { redis: r, workers, prefix: prefixFor } = useWorkerProcesses();

  function setup(name: string) {
    const redis = r();
    const dir = tempDir(name);
    const prefix = prefixFor(name);
    for (const h of ['a', 'b']) mkdirSync(join(dir, h));
    const db = makeStore(join(dir, 'b', 'b1.db'), { live: 2 });
    const file = join(dir, 'fleet.yaml');
    const off = { enabled: false };
    writeFileSync(file, JSON.stringify({
      stateDb: '${STATE_DIR}/state.db',
      snapshot: { root: '${STATE_DIR}/snapshots' },
      log: { level: 'info' },
      redis: { url: redis.url, prefix },
      worker: { http: { port: 0 }, heartbeatMs: 200, schedules: { prune: off, integrity: off, snapshot: off, digest: off, drift: off } },
      stores: { b1: { db, host: 'b' }, a1: { db: makeStore(join(dir, 'a', 'a1.db')), host: 'a' } },
    }));
    const env = { ...process.env, REDIS_URL: '', STATE_DIR: join(dir, 'a'), MEMORY_WARDEN_HOST: 'a', LOG_LEVEL: 'info' };
    // the folder on b the person names (it need not exist for the request to wait: b would read it when it runs)
    const args = (extra: string[] = []) => [CLI, 'restore', join(dir, 'b', 'snapshots', 'b1', 'any'), '--store', 'b1', '--force', '--config', file, ...extra];
    const restoreFromA = (extra: string[] = []) => {
      const proc = spawn(process.execPath, args(extra), { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
      let stderr = '';
      proc.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
      proc.stdout.resume();
      const exited = new Promise<number | null>((res) => proc.once('exit', (code) => res(code)));
      const queued = until('the restore request to be queued', () => stderr.includes('enqueued; waiting for a worker'));
      return { proc, exited, queued, stderr: () => stderr };
    };
    /** The restore jobs on b's queue, in any state: none is left once the request is withdrawn. */
    const restoreJobs = async () => {
      const keys = await redis.client.keys(`${prefix}:maintenance.b:*`);
      const names = await Promise.all(keys.filter((k) => /:\d+$/.test(k)).map((k) => redis.client.hget(k, 'name')));
      return names.filter((n) => n === 'restore').length;
    };
    const fatal = (stderr: string) => stderr.split('\n').filter((l) => l.startsWith('memory-warden:'));
    const startB = () => {
      const w = spawnWorker(file, ['worker', '--host', 'b'], { STATE_DIR: join(dir, 'b') });
      workers.push(w);
      return w;
    };
    /** b back: a job asked after the withdrawn one runs there, and nothing else has (a queue is first in, first out). */
    const bRunsOnlyWhatIsAsked = async () => {
      const b = startB();
      await b.ready;
      await exec(process.execPath, [CLI, 'enqueue', 'integrity', '--store', 'b1', '--config', file, '--timeout', '60'], { env });
      expect(b.lines.filter((l) => l.msg === 'job start').map((l) => l.job)).toEqual(['integrity']);
    };
    return { db, file, env, args, restoreFromA, restoreJobs, fatal, bRunsOnlyWhatIsAsked };
  }

  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    it(`${signal} while the owner host is down: the request is withdrawn, exit 2, and b never runs it when it comes back`, async () => {
      const t = setup(`restore-${signal.toLowerCase()}`);
      const cli = t.restoreFromA();
      await cli.queued;
      expect(await t.restoreJobs()).toBe(1);
      cli.proc.kill(signal);
      expect(await cli.exited).toBe(2);
      const lines = t.fatal(cli.stderr());
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/restore b1: interrupted; the request was withdrawn from maintenance\.b before any worker took it: nothing was done/);
      expect(await t.restoreJobs()).toBe(0);
      await t.bRunsOnlyWhatIsAsked();
      expect(countRows(t.db)).toBe(2);
    });
  }

  it('--timeout while the owner host is down: withdrawn the same way, exit 2; a bad --timeout is refused before anything is queued', async () => {
    const t = setup('restore-timeout');
    const r = await exec(process.execPath, t.args(['--timeout', '0.5']), { env: t.env }).catch((e: { code: number; stderr: string }) => e);
    expect((r as { code: number }).code).toBe(2);
    const lines = t.fatal((r as { stderr: string }).stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/restore b1: no result within 0\.5 s \(is a worker running on host b\?.*\); the request was withdrawn from maintenance\.b before any worker took it: nothing was done/);
    expect(await t.restoreJobs()).toBe(0);
    for (const bad of ['0', '-1', 'soon', 'Infinity']) {
      const refused = await exec(process.execPath, t.args(['--timeout', bad]), { env: t.env }).catch((e: { code: number; stderr: string }) => e);
      expect((refused as { code: number }).code, bad).toBe(2);
      expect(t.fatal((refused as { stderr: string }).stderr)[0], bad).toMatch(/--timeout: /);
      expect(await t.restoreJobs(), bad).toBe(0);
    }
    // `run restore` is the same command: the same option, the same withdrawal
    const run = await exec(process.execPath, [CLI, 'run', ...t.args(['--timeout', '0.5']).slice(1)], { env: t.env }).catch((e: { code: number; stderr: string }) => e);
    expect((run as { code: number }).code).toBe(2);
    expect(t.fatal((run as { stderr: string }).stderr)[0]).toMatch(/restore b1: no result within 0\.5 s .*withdrawn/);
    expect(await t.restoreJobs()).toBe(0);
    await t.bRunsOnlyWhatIsAsked();
  });
});
