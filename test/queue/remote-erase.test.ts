import { describe, expect, it } from 'vitest';
import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { openDatabase } from '../../src/store/sqlite.js';
import { storeLockKey } from '../../src/queue/lock.js';
import { CLI, countRows, keyHolding, ROOT, spawnWorker, tempDir, until, useWorkerProcesses, writeTwoHostFleet } from './fixtures.js';

const exec = promisify(execFile);
const SUBJECT = 'secret-person-7f3a';

/**
 * `erase` of a store on another host that nobody waits for any more (Ctrl-C, --timeout): a request no worker took
 * is withdrawn, and the person's text leaves Redis; one already running finishes there, and the CLI says where its
 * receipt is. Real worker processes, a real CLI process interrupted with SIGINT.
 */
describe('an interrupted cross-host erase', { timeout: 120_000 }, () => {
  const { redis: r, workers, prefix: prefixFor } = useWorkerProcesses();

  function setup(name: string) {
    const redis = r();
    const dir = tempDir(name);
    const prefix = prefixFor(name);
    const { db, file, onA } = writeTwoHostFleet({ dir, redisUrl: redis.url, prefix, worker: { storeLock: { ttlMs: 60_000, waitMs: 60_000 } } });
    const w = openDatabase(db);
    w.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES ('p1', ?, 'lives in Lyon', 'message')`).run(SUBJECT);
    w.close();
    const env = { ...process.env, REDIS_URL: '', ...onA, LOG_LEVEL: 'info' };
    const args = (extra: string[] = []) => [CLI, 'erase', '--store', 'b1', '--subject', SUBJECT, '--config', file, ...extra];
    /** The CLI on machine a, as a process the test can interrupt; resolves once its request is queued. */
    const eraseFromA = () => {
      const proc = spawn(process.execPath, args(), { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
      let stderr = '';
      let stdout = '';
      proc.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
      proc.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
      const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
      const queued = until('the erase request to be queued', () => stderr.includes('enqueued; waiting for a worker'));
      return { proc, exited, queued, out: () => ({ stdout, stderr }) };
    };
    const startB = () => {
      const w = spawnWorker(file, ['worker', '--host', 'b'], { STATE_DIR: join(dir, 'b') });
      workers.push(w);
      return w;
    };
    /** A key whose value holds the text (the person's text must be in none), or null. */
    const redisHolds = (text: string) => keyHolding(redis.client, prefix, text);
    const fatal = (stderr: string) => stderr.split('\n').filter((l) => l.startsWith('memory-warden:'));
    return { dir, prefix, db, file, env, args, eraseFromA, startB, redisHolds, fatal, redis };
  }

  it('Ctrl-C while the owner host is down: the request is withdrawn, nothing of the person stays in Redis, and b never runs it', async () => {
    const t = setup('int-down');
    const cli = t.eraseFromA();
    await cli.queued;
    expect(await t.redisHolds(SUBJECT)).not.toBeNull(); // the request holds it while it waits
    cli.proc.kill('SIGINT');
    expect(await cli.exited).toBe(2);
    const lines = t.fatal(cli.out().stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/erase b1: interrupted; the request was withdrawn from maintenance\.b before any worker took it: nothing was done/);
    expect(await t.redisHolds(SUBJECT)).toBeNull();
    // b comes back: nothing to run, the row is still there (nobody asked any more)
    const b = t.startB();
    await b.ready;
    await until('b to have looked at its queue', () => b.lines.some((l) => l.msg === 'worker ready'));
    expect(b.lines.some((l) => l.msg === 'job start')).toBe(false);
    expect(countRows(t.db, `subject = '${SUBJECT}'`)).toBe(1);
  });

  it('--timeout while the owner host is down: withdrawn the same way, exit 2; a bad --timeout is refused before anything is queued', async () => {
    const t = setup('timeout');
    const r = await exec(process.execPath, t.args(['--timeout', '0.5']), { env: t.env }).catch((e: { code: number; stderr: string }) => e);
    expect((r as { code: number }).code).toBe(2);
    expect(t.fatal((r as { stderr: string }).stderr)[0]).toMatch(/no result within 0\.5 s \(is a worker running on host b\?.*\); the request was withdrawn .*nothing was done/);
    expect(await t.redisHolds(SUBJECT)).toBeNull();
    const before = await t.redis.client.keys(`${t.prefix}:*`);
    for (const bad of ['0', '-1', 'soon', 'Infinity']) {
      const refused = await exec(process.execPath, t.args(['--timeout', bad]), { env: t.env }).catch((e: { code: number; stderr: string }) => e);
      expect((refused as { code: number }).code, bad).toBe(2);
      expect(t.fatal((refused as { stderr: string }).stderr)[0], bad).toMatch(/--timeout: /);
    }
    expect((await t.redis.client.keys(`${t.prefix}:*`)).sort()).toEqual(before.sort());
  });

  it("Ctrl-C while b's worker is already running it: the CLI says it finishes there and where the receipt is; it does", async () => {
    const t = setup('int-running');
    // another writer holds b1's store lock: b's erase job is taken (active) and waits for it
    await t.redis.client.set(storeLockKey(t.prefix, 'b1'), 'someone#held', 'PX', 60_000);
    const b = t.startB();
    await b.ready;
    const cli = t.eraseFromA();
    await cli.queued;
    await b.waitFor('the erase to wait for the store lock', (l) => l.msg === 'store lock busy; waiting' && l.job === 'erase');
    cli.proc.kill('SIGINT');
    expect(await cli.exited).toBe(2);
    const line = t.fatal(cli.out().stderr)[0];
    expect(line).toMatch(/erase b1: interrupted; host b's worker is already running it \(job \d+\): it finishes there; its outcome is kept there: memory-warden erase receipts --store b1, on host b/);
    await t.redis.client.del(storeLockKey(t.prefix, 'b1'));
    await b.waitFor('the erase to finish on b', (l) => l.msg === 'job done' && l.job === 'erase', 30_000);
    expect(countRows(t.db, `subject = '${SUBJECT}'`)).toBe(0);
    const receipts = await exec(process.execPath, [CLI, 'erase', 'receipts', '--store', 'b1', '--json', '--config', t.file], { env: { ...t.env, STATE_DIR: join(t.dir, 'b'), MEMORY_WARDEN_HOST: 'b' } });
    expect(JSON.parse(receipts.stdout)).toHaveLength(1);
    await until('the finished request to leave Redis', async () => (await t.redisHolds(SUBJECT)) === null);
  });
});
