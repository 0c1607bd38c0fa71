import { describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import type { Queue } from 'bullmq';
import { jobOptions } from '../../src/queue/options.js';
import { loadConfig, type Config } from '../../src/config/config.js';
import { freePort, uniquePrefix } from '../helpers/redis.js';
import { CLI, countRows, makeStore, spawnWorker, stopProcess, tempDir, until, useWorkerProcesses, writeConfig, type TestConfigInput } from './fixtures.js';

const exec = promisify(execFile);

/**
 * Real worker processes (`node dist/src/cli.js worker`) on the real Redis: what only separate processes can show.
 * Slow prunes (one row per batch, a pause between batches) give the tests a job that is reliably mid-run.
 */
describe('worker processes', () => {
  const procs = useWorkerProcesses();

  // prune sizes its batches itself but never above batchSize nor below 50 rows: 50 rows per batch, a pause after each
  const slow = (pauseMs: number) => ({ batchSize: 50, pauseMs });
  const quick = { batchSize: 2000, pauseMs: 1 };

  function setup(name: string, rows: { expired?: number; live?: number }, worker: Record<string, unknown> = {}, prune = slow(60)) {
    const dir = tempDir(name);
    const prefix = procs.prefix(name);
    const store = makeStore(join(dir, 'agent.db'), rows);
    const input: TestConfigInput = { dir, redisUrl: procs.redis().url, prefix, stores: { agent: store }, worker, prune };
    const file = writeConfig(input);
    const config: Config = loadConfig({ file });
    // the store jobs' queue: the one host's (src/queue/hosts.ts)
    const queue = procs.queue(`${config.worker.queue}.solo`, prefix);
    const start = (cfg = file) => {
      const w = spawnWorker(cfg);
      procs.workers.push(w);
      return w;
    };
    return { dir, store, input, file, config, queue, start, add: (job: string) => queue.add(job, { store: 'agent' }, jobOptions(config)) };
  }

  async function state(queue: Queue, id: string): Promise<string> {
    return (await queue.getJob(id))?.getState() ?? 'missing';
  }

  it('two worker processes from one config schedule each job once and run each scheduled run once', async () => {
    const t = setup('twice', { live: 2 }, { schedules: { prune: { enabled: true, pattern: '* * * * * *' }, integrity: { enabled: true, pattern: '* * * * * *' } } }, quick);
    const a = t.start();
    const b = t.start();
    await Promise.all([a.ready, b.ready]);
    const done = () => [...a.lines, ...b.lines].filter((l) => l.msg === 'job done');
    await until('four finished runs', () => done().length >= 4, 20_000);
    a.proc.kill('SIGTERM');
    b.proc.kill('SIGTERM');
    expect((await a.exited).code).toBe(0);
    expect((await b.exited).code).toBe(0);

    expect((await t.queue.getJobSchedulers(0, -1)).map((s) => s.key).sort()).toEqual(['integrity:agent', 'prune:agent']);
    const startLines = [...a.lines, ...b.lines].filter((l) => l.msg === 'job start');
    const starts = startLines.map((l) => String(l.jobId));
    // No attempt started twice, in either process. A run the shutdown aborted is retried (attempt 2, often in the
    // other process while it closes): that is a new attempt of the same run, not the run delivered twice.
    const attempts = startLines.map((l) => `${String(l.jobId)}#${String(l.attempt)}`);
    expect(new Set(attempts).size).toBe(attempts.length);
    // One run per scheduler and tick: the job id is scheduler + tick, `repeat:` as BullMQ makes it, or `missed:` when
    // the second worker's start found that tick due and its job gone with the scheduler's upsert (schedules.ts
    // syncSchedulers puts that one run back): either way, no tick runs under both.
    const tick = (id: string) => /^repeat:((?:prune|integrity):agent):(\d+)$/.exec(id) ?? /^missed:((?:prune|integrity)%3Aagent):(\d+)$/.exec(id);
    expect(starts.filter((id) => !tick(id))).toEqual([]);
    const ticks = [...new Set(starts)].map((id) => `${decodeURIComponent(tick(id)![1]!)}@${tick(id)![2]}`);
    expect(new Set(ticks).size).toBe(ticks.length);
    const finishedIds = done().map((l) => String(l.jobId));
    expect(new Set(finishedIds).size).toBe(finishedIds.length);
    expect(await t.queue.getCompletedCount()).toBe(finishedIds.length);
  });

  it('a worker killed with SIGKILL over its next cron tick runs that missed run once when it is back', async () => {
    const t = setup('missed', { live: 2 }, { schedules: { prune: { enabled: true, pattern: '* * * * * *' } } }, quick);
    const first = t.start();
    await first.ready;
    await first.waitFor('a scheduled run', (l) => l.msg === 'job done');
    first.proc.kill('SIGKILL');
    await first.exited;
    // the run the scheduler has due next; nobody is up to take it, so it is still delayed once its time has passed
    const due = Number((await t.queue.getJobScheduler('prune:agent'))!.next);
    await until('the tick to pass with nobody up', () => Date.now() > due + 50, 5000);
    expect(await state(t.queue, `repeat:prune:agent:${due}`)).toBe('delayed');

    const back = t.start();
    await back.ready;
    const missed = `missed:${encodeURIComponent('prune:agent')}:${due}`;
    expect(back.lines.find((l) => l.msg.startsWith('a run was due while no worker was up'))).toMatchObject({ scheduler: 'prune:agent', jobId: missed });
    await back.waitFor('the missed run to finish', (l) => l.msg === 'job done' && l.jobId === missed);
    await until('later ticks to run too', () => back.lines.filter((l) => l.msg === 'job done').length >= 2);
    // a second restart finds nothing missed: the run is not put back again
    back.proc.kill('SIGTERM');
    expect((await back.exited).code).toBe(0);
    const again = t.start();
    await again.ready;
    const sync = again.lines.find((l) => l.msg === 'job schedulers in sync with config' && String(l.queue).endsWith('.solo'))!;
    expect((sync.backfilled as string[]).filter((id) => id === missed)).toEqual([]);
    const starts = [first, back, again].flatMap((w) => w.lines.filter((l) => l.msg === 'job start' && l.attempt === 1).map((l) => String(l.jobId)));
    expect(starts.filter((id) => id === missed)).toHaveLength(1);
    expect(starts).not.toContain(`repeat:prune:agent:${due}`);
    expect(new Set(starts).size).toBe(starts.length);
  });

  it('the per-store lock serialises writers across processes: the second waits until the first released', async () => {
    const t = setup('serial', { expired: 1000, live: 1 }); // 20 batches
    const a = t.start();
    const b = t.start();
    await Promise.all([a.ready, b.ready]);
    const first = await t.add('prune');
    const acquired = await until('a writer to take the store lock', () => [...a.lines, ...b.lines].find((l) => l.msg === 'store lock acquired' && l.jobId === first.id));
    const [holder, other] = acquired.pid === a.proc.pid ? [a, b] : [b, a];
    // The holder, stopped, keeps the store lock and its one job slot (concurrency 1) until the other process has
    // taken the second writer and found the store busy, however long that takes here.
    await stopProcess(holder);
    const second = await t.add('prune');
    try {
      await other.waitFor('the second writer to find the store busy', (l) => l.msg === 'store lock busy; waiting' && l.jobId === second.id);
      expect(countRows(t.store, 'expires_at IS NOT NULL')).toBeGreaterThan(0); // the first is still mid-prune
    } finally {
      holder.proc.kill('SIGCONT');
    }
    await until('both writers to finish', async () => (await state(t.queue, first.id!)) === 'completed' && (await state(t.queue, second.id!)) === 'completed');
    const released = holder.lines.find((l) => l.msg === 'store lock released' && l.jobId === first.id)!;
    const secondAcquired = other.lines.find((l) => l.msg === 'store lock acquired' && l.jobId === second.id)!;
    expect(secondAcquired.time).toBeGreaterThanOrEqual(released.time);
    expect(countRows(t.store)).toBe(1);
  });

  it('a worker killed with SIGKILL mid-job: another worker picks the job up and completes it', async () => {
    // short BullMQ job lock and store lock, so the dead worker's hold lapses quickly
    const fast = { lockDurationMs: 1000, stalledIntervalMs: 500, storeLock: { ttlMs: 1000, waitMs: 20_000 } };
    const t = setup('killed', { expired: 2000, live: 2 }, fast, slow(100)); // 40 batches
    const victim = t.start();
    await victim.ready;
    const job = await t.add('prune');
    await victim.waitFor('the prune to start', (l) => l.msg === 'store lock acquired' && l.jobId === job.id);
    await until('a few batches to be deleted', () => countRows(t.store, 'expires_at IS NOT NULL') <= 1900);
    victim.proc.kill('SIGKILL');
    expect((await victim.exited).signal).toBe('SIGKILL');
    expect(countRows(t.store, 'expires_at IS NOT NULL')).toBeGreaterThan(0); // it really died mid-job

    // the rescuer runs the same config, with fast batches
    const rescuerConfig = writeConfig({ ...t.input, prune: quick, name: 'rescuer' });
    const rescuer = t.start(rescuerConfig);
    await rescuer.ready;
    const done = await rescuer.waitFor('the rescued job to complete', (l) => l.msg === 'job done' && l.jobId === job.id, 20_000);
    expect(done.outcome).toBe('ok');
    // 'job done' is logged as the processor returns; BullMQ marks the job completed in Redis just after.
    await until('the rescued job to be marked completed', async () => (await state(t.queue, job.id!)) === 'completed');
    expect(countRows(t.store, 'expires_at IS NOT NULL')).toBe(0);
    expect(countRows(t.store)).toBe(2);
    expect(rescuer.lines.some((l) => l.msg.startsWith('job stalled') && l.jobId === job.id)).toBe(true);
  });

  it('SIGTERM drains: the running job finishes, no new job is taken, the process exits 0', async () => {
    const t = setup('drain', { expired: 750, live: 1 }, {}, slow(60)); // 15 batches
    const w = t.start();
    await w.ready;
    const running = await t.add('prune');
    await w.waitFor('the prune to start', (l) => l.msg === 'store lock acquired' && l.jobId === running.id);
    w.proc.kill('SIGTERM');
    await w.waitFor('the shutdown to begin', (l) => l.msg.startsWith('shutting down'));
    const late = await t.add('integrity');
    const { code } = await w.exited;
    expect(code).toBe(0);
    expect(w.lines.find((l) => l.msg === 'job done' && l.jobId === running.id)).toMatchObject({ outcome: 'ok' });
    expect(w.lines.find((l) => l.msg === 'worker stopped')).toMatchObject({ drained: true });
    expect(await state(t.queue, running.id!)).toBe('completed');
    expect(countRows(t.store, 'expires_at IS NOT NULL')).toBe(0);
    expect(await state(t.queue, late.id!)).toBe('waiting');
  });

  it('`enqueue <job> --store NAME` runs one job through the queue and prints its result', async () => {
    const t = setup('enqueue', { expired: 3, live: 2 }, {}, quick);
    const w = t.start();
    await w.ready;
    const { stdout } = await exec(process.execPath, [CLI, 'enqueue', 'prune', '--store', 'agent', '--json', '--config', t.file], { env: { ...process.env, REDIS_URL: '' } });
    expect(JSON.parse(stdout)).toMatchObject({ store: 'agent', deleted: 3 });
    expect(countRows(t.store)).toBe(2);
  });

  it('Redis unreachable at start: one line naming the URL without its password and what to do, exit 2', async () => {
    const dir = tempDir('noredis');
    const port = await freePort(); // nothing listens there
    const file = writeConfig({ dir, redisUrl: `redis://warden:\${REDIS_PASSWORD}@127.0.0.1:${port}/0`, prefix: uniquePrefix('noredis'), stores: {} });
    const err = await exec(process.execPath, [CLI, 'worker', '--config', file], { env: { ...process.env, REDIS_URL: '', REDIS_PASSWORD: 's3cr3t-pass' } }).catch((e: { code: number; stderr: string }) => e);
    expect((err as { code: number }).code).toBe(2);
    const stderr = (err as { stderr: string }).stderr;
    expect(stderr).not.toContain('s3cr3t-pass');
    const fatal = stderr.split('\n').filter((l) => l.startsWith('memory-warden:'));
    expect(fatal).toHaveLength(1);
    expect(fatal[0]).toContain(`redis://warden:***@127.0.0.1:${port}/0`);
    expect(fatal[0]).toMatch(/ECONNREFUSED/);
    expect(fatal[0]).toMatch(/redis-server/);
    expect(fatal[0]).toMatch(/memory-warden run/);
  });
});
