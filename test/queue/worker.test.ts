import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JOBS } from '../../jobs/index.js';
import { join } from 'node:path';
import type { Job, Queue } from 'bullmq';
import { createLogger, type Logger } from '../../src/log/logger.js';
import { openStateDb } from '../../src/state/state.js';
import { acquireMaintenanceLock } from '../../src/store/lock.js';
import { acquireStoreLock, storeLockKey } from '../../src/queue/lock.js';
import { jobOptions } from '../../src/queue/options.js';
import { startWorker, type RunningWorker } from '../../src/queue/worker.js';
import type { Config } from '../../src/config/config.js';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from '../helpers/redis.js';
import { countRows, loadTestConfig, makeStore, tempDir, until, type LogLine } from './fixtures.js';

function capture(): { log: Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const log = createLogger({ level: 'info', destination: { write: (s: string) => lines.push(JSON.parse(s) as LogLine) } as unknown as NodeJS.WritableStream });
  return { log, lines };
}

async function finished(queue: Queue, job: Job): Promise<Job> {
  return until(`job ${job.id} to finish`, async () => {
    const j = await queue.getJob(job.id!);
    // The state is read after the hash: read the hash again once the job is done, or its fields may predate that.
    return j && (j.finishedOn || (await j.getState()) === 'failed') ? queue.getJob(job.id!) : undefined;
  });
}

/** One sample of a Prometheus text exposition: `name{a="b"} 3`. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    const m = /^([a-z_:]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = (m[2] ?? '').split(',').filter(Boolean);
    if (want.every((w) => have.includes(w))) return Number(m[3]);
  }
  return undefined;
}

describe('worker (in process, real Redis, real stores)', () => {
  let redis: TestRedis;
  const prefixes: string[] = [];

  beforeAll(async () => {
    redis = await startTestRedis();
  });
  afterAll(async () => {
    for (const p of prefixes) await deletePrefix(redis.client, p);
    await redis.stop();
  });

  it('fires a scheduled prune (cron, every second) that deletes the expired rows of a temp store and records the run', async () => {
    const dir = tempDir('sched');
    const store = makeStore(join(dir, 'agent.db'), { expired: 5, live: 3 });
    const prefix = uniquePrefix('sched');
    prefixes.push(prefix);
    const config = loadTestConfig({ dir, redisUrl: redis.url, prefix, stores: { agent: store }, worker: { schedules: { prune: { enabled: true, pattern: '* * * * * *' } } } });
    const { log, lines } = capture();
    const w = await startWorker({ jobs: JOBS, config, log });
    try {
      expect(w.schedulers.upserted).toEqual(['prune:agent']);
      const done = await until('a scheduled prune to finish', () => lines.find((l) => l.msg === 'job done' && l.job === 'prune'));
      expect(done).toMatchObject({ store: 'agent', outcome: 'ok', jobId: expect.stringMatching(/^repeat:prune:agent:/) });
      expect(typeof done.durationMs).toBe('number');
      expect(countRows(store)).toBe(3);
      expect(countRows(store, 'expires_at IS NOT NULL')).toBe(0);
      const state = openStateDb(config.stateDb);
      try {
        const run = state.prepare(`SELECT * FROM job_runs WHERE job = 'prune' AND store = 'agent' AND outcome = 'ok' ORDER BY id LIMIT 1`).get() as { result: string };
        expect(JSON.parse(run.result)).toMatchObject({ deleted: 5, expired: 5 });
      } finally {
        state.close();
      }
    } finally {
      expect(await w.shutdown('test')).toEqual({ drained: true });
    }
  });

  it('bounds shutdown: past worker.shutdownTimeoutMs the running job is told to stop (prune stops between batches)', async () => {
    const dir = tempDir('bounded');
    const store = makeStore(join(dir, 'agent.db'), { expired: 2000, live: 1 });
    const prefix = uniquePrefix('bounded');
    prefixes.push(prefix);
    // 40 batches of 50 rows, 100 ms apart: far longer than the 200 ms the shutdown allows
    const config = loadTestConfig({ dir, redisUrl: redis.url, prefix, stores: { agent: store }, worker: { shutdownTimeoutMs: 200 }, prune: { batchSize: 50, pauseMs: 100 } });
    const { log, lines } = capture();
    const w = await startWorker({ jobs: JOBS, config, log });
    await w.queue.add('prune', { store: 'agent' }, jobOptions(config));
    await until('a first batch to be deleted', () => countRows(store, 'expires_at IS NOT NULL') < 2000);
    expect(await w.shutdown('test')).toEqual({ drained: true });
    expect(lines.find((l) => l.msg.startsWith('shutdown timeout'))).toBeDefined();
    expect(lines.find((l) => l.msg.startsWith('prune interrupted'))).toBeDefined();
    const left = countRows(store, 'expires_at IS NOT NULL');
    expect(left).toBeGreaterThan(0); // stopped early; the next run deletes the rest
  });

  describe('jobs enqueued by hand', () => {
    const dir = tempDir('worker');
    const stores = {
      metered: makeStore(join(dir, 'metered.db'), { expired: 4, live: 6 }),
      locked: makeStore(join(dir, 'locked.db'), { expired: 2, live: 1 }),
      shared: makeStore(join(dir, 'shared.db'), { expired: 1, live: 1 }),
      gone: join(dir, 'gone.db'), // configured, never created: a permanent failure
    };
    let config: Config;
    let w: RunningWorker;
    let lines: LogLine[];

    beforeAll(async () => {
      const prefix = uniquePrefix('worker');
      prefixes.push(prefix);
      config = loadTestConfig({ dir, redisUrl: redis.url, prefix, stores, worker: { concurrency: 2, attempts: 4, backoff: { type: 'fixed', delayMs: 300 } } });
      const c = capture();
      lines = c.lines;
      w = await startWorker({ jobs: JOBS, config, log: c.log });
    });
    afterAll(async () => {
      await w?.shutdown('test');
    });

    const add = (name: string, data: object) => w.queue.add(name, data, jobOptions(config));

    it('exposes the run on /metrics: runs, duration, rows deleted, rows vs live rows, problems, last success', async () => {
      const prune = await finished(w.queue, await add('prune', { store: 'metered' }));
      expect(prune.returnvalue).toMatchObject({ deleted: 4 });
      const integrity = await finished(w.queue, await add('integrity', { store: 'metered' }));
      expect(integrity.returnvalue).toMatchObject({ rows: 6, live: 6 });

      const res = await fetch(`${w.http!.url}/metrics`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toContain('text/plain');
      const text = await res.text();
      expect(sample(text, 'memory_warden_job_runs_total', { job: 'prune', store: 'metered', outcome: 'ok' })).toBe(1);
      expect(sample(text, 'memory_warden_job_runs_total', { job: 'integrity', store: 'metered', outcome: 'ok' })).toBe(1);
      expect(sample(text, 'memory_warden_job_duration_seconds_count', { job: 'prune', store: 'metered' })).toBe(1);
      expect(sample(text, 'memory_warden_rows_deleted_total', { store: 'metered' })).toBe(4);
      expect(sample(text, 'memory_warden_rows', { store: 'metered' })).toBe(6);
      expect(sample(text, 'memory_warden_live_rows', { store: 'metered' })).toBe(6);
      expect(sample(text, 'memory_warden_integrity_problems', { store: 'metered' })).toBe(0);
      expect(sample(text, 'memory_warden_last_success_timestamp_seconds', { job: 'prune', store: 'metered' })).toBeGreaterThan(Date.now() / 1000 - 3600);
      expect(sample(text, 'memory_warden_redis_up')).toBe(1);

      const health = await fetch(`${w.http!.url}/healthz`);
      expect(health.status).toBe(200);
      const body = (await health.json()) as { ok: boolean; redis: string; worker: string; lastSuccess: Record<string, Record<string, string>> };
      expect(body).toMatchObject({ ok: true, redis: 'up', worker: 'running' });
      expect(Object.keys(body.lastSuccess.metered!).sort()).toEqual(['integrity', 'prune']);
      expect((await fetch(`${w.http!.url}/nope`)).status).toBe(404);
    });

    it('retries a transient failure with backoff (the store is locked by another writer), then succeeds', async () => {
      // another maintenance writer on this machine holds the store: prune fails with a transient error
      const other = acquireMaintenanceLock(stores.locked, { holder: 'someone else' });
      let released = false;
      try {
        const job = await add('prune', { store: 'locked' });
        await until('the first attempt to fail', async () => ((await w.queue.getJob(job.id!))?.attemptsMade ?? 0) >= 1);
        other.release();
        released = true;
        const done = await finished(w.queue, job);
        expect(await done.getState()).toBe('completed');
        expect(done.attemptsMade).toBeGreaterThanOrEqual(1);
        expect(done.returnvalue).toMatchObject({ deleted: 2 });
        expect(countRows(stores.locked)).toBe(1);
        const failedLine = lines.find((l) => l.msg === 'job failed' && l.store === 'locked');
        expect(failedLine).toMatchObject({ retry: true, kind: 'transient' });
        const text = await w.metrics.text();
        expect(sample(text, 'memory_warden_job_failures_total', { job: 'prune', store: 'locked', retry: 'yes' })).toBeGreaterThanOrEqual(1);
      } finally {
        if (!released) other.release();
      }
    });

    it('does not retry a permanent failure (missing store): one attempt, failed, kept for inspection', async () => {
      const job = await add('prune', { store: 'gone' });
      const done = await finished(w.queue, job);
      expect(await done.getState()).toBe('failed');
      expect(done.attemptsMade).toBe(1);
      expect(done.failedReason).toMatch(/no such store/);
      expect(lines.find((l) => l.msg === 'job failed' && l.store === 'gone')).toMatchObject({ retry: false, kind: 'store' });
      expect(await w.queue.getFailedCount()).toBeGreaterThanOrEqual(1);
      expect(sample(await w.metrics.text(), 'memory_warden_job_failures_total', { job: 'prune', store: 'gone', retry: 'no' })).toBe(1);
    });

    it('fails a job this build does not know without retrying it', async () => {
      const done = await finished(w.queue, await w.queue.add('teleport', { store: 'shared' }, jobOptions(config)));
      expect(await done.getState()).toBe('failed');
      expect(done.attemptsMade).toBe(1);
      expect(done.failedReason).toMatch(/unknown job "teleport"/);
    });

    it('lets a reader run while a writer of another machine holds the store; the writer here waits for it', async () => {
      const key = storeLockKey(config.redis.prefix, 'shared');
      const elsewhere = await acquireStoreLock(redis.client, key, { ttlMs: 10_000, waitMs: 0, holder: 'prune@other-host:1' });
      let released = false;
      try {
        const writer = await add('prune', { store: 'shared' });
        await until('the writer to find the store busy', () => lines.find((l) => l.msg === 'store lock busy; waiting' && l.store === 'shared'));
        const reader = await finished(w.queue, await add('integrity', { store: 'shared' }));
        expect(await reader.getState()).toBe('completed');
        expect(await (await w.queue.getJob(writer.id!))!.getState()).toBe('active');
        expect(countRows(stores.shared)).toBe(2);
        await elsewhere.release();
        released = true;
        const done = await finished(w.queue, writer);
        expect(await done.getState()).toBe('completed');
        expect(countRows(stores.shared)).toBe(1);
      } finally {
        if (!released) await elsewhere.release();
      }
    });
  });
});
