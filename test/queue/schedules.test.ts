import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { z } from 'zod';
import type { Redis } from 'ioredis';
import { defineJob } from '../../src/job.js';
import { loadConfig } from '../../src/config.js';
import { workerSchema } from '../../src/queue/config.js';
import { createLogger } from '../../src/logger.js';
import { JOBS } from '../../jobs/index.js';
import { listSchedulers, planSchedulers, syncSchedulers } from '../../src/queue/schedules.js';
import { openQueue } from '../../src/queue/worker.js';
import { createRedis } from '../../src/queue/connection.js';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from '../helpers/redis.js';
import { assertBuilt, CLI, loadTestConfig, makeStore, tempDir, writeConfig } from './fixtures.js';

const run = promisify(execFile);

/** A logger whose lines the test can read. */
function capture() {
  const lines: { level: number; msg: string; [k: string]: unknown }[] = [];
  const log = createLogger({ level: 'info', destination: { write: (s: string) => lines.push(JSON.parse(s)) } as unknown as NodeJS.WritableStream });
  return { log, lines };
}

const fakeJob = (name: string, scope?: 'store' | 'global') =>
  defineJob({ name, writes: false, scope, schema: z.object({}).passthrough(), run: async () => ({}) });

describe('planSchedulers', () => {
  const dir = tempDir('plan');
  const base = { dir, redisUrl: 'redis://127.0.0.1:1', prefix: 'unused', stores: { b: join(dir, 'b.db'), a: join(dir, 'a.db') } };

  it('plans one scheduler per store for store jobs and one for a global job, with the configured pattern and time zone', () => {
    const config = loadTestConfig({
      ...base,
      worker: { timezone: 'Europe/Rome', schedules: { prune: { enabled: true, pattern: '30 2 * * *' }, digest: { enabled: true, pattern: '0 7 * * *' } } },
    });
    const jobs = { prune: JOBS.prune!, digest: fakeJob('digest', 'global') };
    const planned = planSchedulers(config, jobs);
    expect(planned).toEqual([
      { id: 'prune:a', job: 'prune', store: 'a', pattern: '30 2 * * *', tz: 'Europe/Rome', data: { store: 'a' } },
      { id: 'prune:b', job: 'prune', store: 'b', pattern: '30 2 * * *', tz: 'Europe/Rome', data: { store: 'b' } },
      { id: 'digest', job: 'digest', store: null, pattern: '0 7 * * *', tz: 'Europe/Rome', data: {} },
    ]);
  });

  it('skips, with a warning, a scheduled job this build does not have, and leaves disabled jobs out', () => {
    const config = loadTestConfig({
      ...base,
      worker: { schedules: { prune: { enabled: false }, integrity: { enabled: true, pattern: '0 3 * * *' }, teleport: { enabled: true, pattern: '0 9 * * 1' } } },
    });
    const { log, lines } = capture();
    const planned = planSchedulers(config, JOBS, log);
    expect(planned.map((p) => p.id)).toEqual(['integrity:a', 'integrity:b']);
    expect(lines).toContainEqual(expect.objectContaining({ level: 40, job: 'teleport', msg: expect.stringContaining('does not have') }));
  });

  it('uses every (ms) instead of the pattern when set, with no time zone', () => {
    const config = loadTestConfig({ ...base, worker: { schedules: { prune: { enabled: true, every: 1000 } } } });
    const [first] = planSchedulers(config, { prune: JOBS.prune! });
    expect(first).toMatchObject({ id: 'prune:a', every: 1000 });
    expect(first!.pattern).toBeUndefined();
  });

  it('ships defaults for all five jobs: snapshot, prune, integrity daily, digest daily at 07:00, drift weekly', () => {
    const { schedules } = loadConfig({ env: {} }).worker;
    expect(schedules).toEqual({
      snapshot: { enabled: true, pattern: '0 2 * * *' },
      prune: { enabled: true, pattern: '30 2 * * *' },
      integrity: { enabled: true, pattern: '0 3 * * *' },
      digest: { enabled: true, pattern: '0 7 * * *' },
      drift: { enabled: true, pattern: '0 9 * * 1' },
    });
    // config/default.yaml and the schema's own defaults say the same
    expect(workerSchema.parse({}).schedules).toEqual(schedules);
  });
});

describe('syncSchedulers on Redis', () => {
  let redis: TestRedis;
  let conn: Redis;
  const prefixes: string[] = [];
  const dir = tempDir('sync');
  const stores = { s1: makeStore(join(dir, 's1.db')), s2: makeStore(join(dir, 's2.db')) };
  const { log } = capture();

  beforeAll(async () => {
    redis = await startTestRedis();
    conn = createRedis(redis.url);
    await conn.connect();
  });
  afterEach(async () => {
    for (const p of prefixes.splice(0)) await deletePrefix(redis.client, p);
  });
  afterAll(async () => {
    await conn.quit();
    await redis.stop();
  });

  const schedules = { prune: { enabled: true, pattern: '30 2 * * *' }, integrity: { enabled: true, pattern: '0 3 * * *' } };

  it('creates one scheduler per job and store, and upserting again (a second replica) adds none', async () => {
    const prefix = uniquePrefix('sync');
    prefixes.push(prefix);
    const config = loadTestConfig({ dir, redisUrl: redis.url, prefix, stores, worker: { schedules } });
    const queue = openQueue(config, conn);
    try {
      const planned = planSchedulers(config, JOBS, log);
      await syncSchedulers(queue, config, planned, log);
      await syncSchedulers(queue, config, planned, log);
      const held = await queue.getJobSchedulers(0, -1);
      expect(held.map((s) => s.key).sort()).toEqual(['integrity:s1', 'integrity:s2', 'prune:s1', 'prune:s2']);
      expect(held.find((s) => s.key === 'prune:s1')).toMatchObject({ name: 'prune', pattern: '30 2 * * *', tz: 'UTC', template: { data: { store: 's1' } } });
      // one delayed job per scheduler, not one per upsert
      expect(await queue.getDelayedCount()).toBe(4);
    } finally {
      await queue.close();
    }
  });

  it('removes schedulers whose store or job left the config, and keeps those of a job only a newer build has', async () => {
    const prefix = uniquePrefix('sync');
    prefixes.push(prefix);
    const before = loadTestConfig({ dir, redisUrl: redis.url, prefix, stores, worker: { schedules } });
    const queue = openQueue(before, conn);
    try {
      await syncSchedulers(queue, before, planSchedulers(before, JOBS, log), log);
      // a newer replica scheduled `teleport`, which this build lacks
      await queue.upsertJobScheduler('teleport:s1', { pattern: '0 9 * * 1', tz: 'UTC' }, { name: 'teleport', data: { store: 's1' } });

      const after = loadTestConfig({
        dir,
        redisUrl: redis.url,
        prefix,
        stores: { s1: stores.s1 },
        worker: { schedules: { prune: schedules.prune, integrity: { enabled: false }, teleport: { enabled: true, pattern: '0 9 * * 1' } } },
        name: 'after',
      });
      const result = await syncSchedulers(queue, after, planSchedulers(after, JOBS, log), log);
      expect(result.removed.sort()).toEqual(['integrity:s1', 'integrity:s2', 'prune:s2']);
      expect(result.kept).toEqual(['teleport:s1']);
      expect((await queue.getJobSchedulers(0, -1)).map((s) => s.key).sort()).toEqual(['prune:s1', 'teleport:s1']);

      const listing = await listSchedulers(queue, planSchedulers(after, JOBS, log));
      const prune = listing.find((r) => r.id === 'prune:s1')!;
      expect(prune).toMatchObject({ job: 'prune', store: 's1', inConfig: true, inRedis: true, pattern: '30 2 * * *' });
      expect(Date.parse(prune.next!)).toBeGreaterThan(Date.now() - 1000);
      expect(listing.find((r) => r.id === 'teleport:s1')).toMatchObject({ inConfig: false, inRedis: true });
    } finally {
      await queue.close();
    }
  });

  it('names the schedule when a cron pattern is invalid', async () => {
    const prefix = uniquePrefix('sync');
    prefixes.push(prefix);
    // Refused when the config is read (the same cron parser BullMQ uses), before any scheduler is touched.
    expect(() => loadTestConfig({ dir, redisUrl: redis.url, prefix, stores, worker: { schedules: { prune: { enabled: true, pattern: 'every tuesday' } } } }))
      .toThrow(/worker\.schedules\.prune\.pattern: not a cron pattern/);
  });

  it('`memory-warden schedule --json` lists each scheduler with its next run time', async () => {
    assertBuilt();
    const prefix = uniquePrefix('sync');
    prefixes.push(prefix);
    const input = { dir, redisUrl: redis.url, prefix, stores, worker: { schedules: { prune: schedules.prune } }, name: 'cli' };
    const config = loadTestConfig(input);
    const queue = openQueue(config, conn);
    try {
      await syncSchedulers(queue, config, planSchedulers(config, JOBS, log), log);
    } finally {
      await queue.close();
    }
    const { stdout } = await run(process.execPath, [CLI, 'schedule', '--json', '--config', writeConfig(input)], { env: { ...process.env, REDIS_URL: '' } });
    const out = JSON.parse(stdout) as { schedulers: { id: string; next: string | null; pattern: string | null; inRedis: boolean }[] };
    expect(out.schedulers.map((s) => s.id)).toEqual(['prune:s1', 'prune:s2']);
    for (const s of out.schedulers) {
      expect(s).toMatchObject({ pattern: '30 2 * * *', inRedis: true });
      expect(new Date(s.next!).getUTCHours()).toBe(2);
      expect(new Date(s.next!).getUTCMinutes()).toBe(30);
    }
  });
});
