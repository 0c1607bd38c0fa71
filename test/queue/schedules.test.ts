import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { z } from 'zod';
import type { Redis } from 'ioredis';
import { defineJob } from '../../src/job/job.js';
import { loadConfig } from '../../src/config/config.js';
import { workerSchema } from '../../src/queue/config.js';
import { createLogger } from '../../src/log/logger.js';
import { JOBS } from '../../jobs/index.js';
import { listSchedulers, missedRunId, planSchedulers, scheduledRunOf, syncSchedulers } from '../../src/queue/schedules.js';
import { openHostQueue, openQueue } from '../../src/queue/queues.js';
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

describe('scheduledRunOf', () => {
  it("names BullMQ's id of a tick and the missed-run put-back of the same tick as one run, and nothing else", () => {
    expect(scheduledRunOf('repeat:prune:agent:1700000000000')).toBe('prune:agent:1700000000000');
    expect(scheduledRunOf(missedRunId('prune:agent', 1_700_000_000_000))).toBe('prune:agent:1700000000000');
    expect(scheduledRunOf('repeat:digest:1700000000000')).toBe(scheduledRunOf(missedRunId('digest', 1_700_000_000_000)));
    expect(scheduledRunOf(missedRunId('prune:a b%', 5))).toBe('prune:a b%:5');
    // A manual enqueue's id is a counter Redis may start again: never a scheduled run.
    for (const id of ['1', '42', undefined, 'repeat:prune:agent', 'missed:%E0%A4%A:5', 'other:prune:agent:5']) expect(scheduledRunOf(id)).toBeNull();
  });
});

describe('planSchedulers', () => {
  const dir = tempDir('plan');
  const base = { dir, redisUrl: 'redis://127.0.0.1:1', prefix: 'unused', stores: { b: join(dir, 'b.db'), a: join(dir, 'a.db') } };

  it('plans one scheduler per store for store jobs and one for a global job, with the configured pattern and time zone', () => {
    const config = loadTestConfig({
      ...base,
      worker: { host: 'h1', timezone: 'Europe/Rome', schedules: { prune: { enabled: true, pattern: '30 2 * * *' }, digest: { enabled: true, pattern: '0 7 * * *' } } },
    });
    const jobs = { prune: JOBS.prune!, digest: fakeJob('digest', 'global') };
    const planned = planSchedulers(config, jobs);
    expect(planned).toEqual([
      { id: 'prune:a', job: 'prune', store: 'a', host: 'h1', pattern: '30 2 * * *', tz: 'Europe/Rome', data: { store: 'a' } },
      { id: 'prune:b', job: 'prune', store: 'b', host: 'h1', pattern: '30 2 * * *', tz: 'Europe/Rome', data: { store: 'b' } },
      { id: 'digest', job: 'digest', store: null, host: 'h1', pattern: '0 7 * * *', tz: 'Europe/Rome', data: {} },
    ]);
  });

  it("puts each store's jobs on its host: the store's host:, else the host reading the config", () => {
    const config = loadConfig({
      env: {},
      overrides: { stateDb: join(dir, 'state.db'), stores: { a: { db: join(dir, 'a.db'), host: 'box-a' }, b: { db: join(dir, 'b.db') } }, worker: { host: 'here', schedules: { prune: { enabled: true, pattern: '30 2 * * *' } } } },
    });
    expect(planSchedulers(config, { prune: JOBS.prune! }, undefined).map((p) => [p.id, p.host])).toEqual([
      ['prune:a', 'box-a'],
      ['prune:b', 'here'],
    ]);
  });

  it("puts a store every host reaches (PostgreSQL) on the shared queue, whoever plans it; a job of every store goes where the stores on hosts are", () => {
    const pg = { engine: 'postgres', postgres: { url: '${PG_URL}', schema: 'fleet' } };
    const plan = (host: string, stores: Record<string, unknown>) => {
      const config = loadConfig({
        env: { PG_URL: 'postgres://127.0.0.1:1/none' },
        overrides: { stateDb: join(dir, 'state.db'), stores, worker: { host, schedules: { prune: { enabled: true, pattern: '30 2 * * *' }, digest: { enabled: true, pattern: '0 7 * * *' } } } },
      });
      return planSchedulers(config, { prune: JOBS.prune!, digest: fakeJob('digest', 'global') }).map((p) => [p.id, p.host]);
    };
    // Planned alike by a worker of the store's host and by one of another host: the same schedulers, on the same queues.
    for (const host of ['box-a', 'box-b']) {
      expect(plan(host, { a: { db: join(dir, 'a.db'), host: 'box-a' }, fleet: pg })).toEqual([['prune:a', 'box-a'], ['prune:fleet', null], ['digest', 'box-a']]);
      expect(plan(host, { fleet: pg })).toEqual([['prune:fleet', null], ['digest', null]]);
    }
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
    const config = loadTestConfig({ dir, redisUrl: redis.url, prefix, stores, worker: { host: 'h1', schedules } });
    const queue = openHostQueue(config, conn, 'h1');
    try {
      const planned = planSchedulers(config, JOBS, log);
      await syncSchedulers(queue, config, planned, log, 'h1');
      await syncSchedulers(queue, config, planned, log, 'h1');
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
    const before = loadTestConfig({ dir, redisUrl: redis.url, prefix, stores, worker: { host: 'h1', schedules } });
    const queue = openHostQueue(before, conn, 'h1');
    try {
      await syncSchedulers(queue, before, planSchedulers(before, JOBS, log), log, 'h1');
      // a newer replica scheduled `teleport`, which this build lacks
      await queue.upsertJobScheduler('teleport:s1', { pattern: '0 9 * * 1', tz: 'UTC' }, { name: 'teleport', data: { store: 's1' } });

      const after = loadTestConfig({
        dir,
        redisUrl: redis.url,
        prefix,
        stores: { s1: stores.s1 },
        worker: { host: 'h1', schedules: { prune: schedules.prune, integrity: { enabled: false }, teleport: { enabled: true, pattern: '0 9 * * 1' } } },
        name: 'after',
      });
      const result = await syncSchedulers(queue, after, planSchedulers(after, JOBS, log), log, 'h1');
      expect(result.removed.sort()).toEqual(['integrity:s1', 'integrity:s2', 'prune:s2']);
      expect(result.kept).toEqual(['teleport:s1']);
      expect((await queue.getJobSchedulers(0, -1)).map((s) => s.key).sort()).toEqual(['prune:s1', 'teleport:s1']);

      const listing = await listSchedulers([{ host: 'h1', queue }], planSchedulers(after, JOBS, log));
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
    const input = { dir, redisUrl: redis.url, prefix, stores, worker: { host: 'h1', schedules: { prune: schedules.prune } }, name: 'cli' };
    const config = loadTestConfig(input);
    const queue = openHostQueue(config, conn, 'h1');
    try {
      await syncSchedulers(queue, config, planSchedulers(config, JOBS, log), log, 'h1');
    } finally {
      await queue.close();
    }
    const { stdout } = await run(process.execPath, [CLI, 'schedule', '--json', '--config', writeConfig(input)], { env: { ...process.env, REDIS_URL: '' } });
    const out = JSON.parse(stdout) as { schedulers: { id: string; next: string | null; pattern: string | null; inRedis: boolean }[] };
    expect(out.schedulers.map((s) => s.id)).toEqual(['prune:s1', 'prune:s2']);
    for (const s of out.schedulers) {
      expect(s).toMatchObject({ host: 'h1', pattern: '30 2 * * *', inRedis: true });
      expect(new Date(s.next!).getUTCHours()).toBe(2);
      expect(new Date(s.next!).getUTCMinutes()).toBe(30);
    }
  });

  it('each host keeps only its own stores\' schedulers; the shared queue only global ones (old store schedulers there go)', async () => {
    const prefix = uniquePrefix('sync');
    prefixes.push(prefix);
    const fleet = (host: string, s2host = 'h2') =>
      loadConfig({
        env: {},
        overrides: { stateDb: join(dir, 'state.db'), redis: { url: redis.url, prefix }, stores: { s1: { db: stores.s1, host: 'h1' }, s2: { db: stores.s2, host: s2host } }, worker: { host, schedules: { ...schedules, snapshot: { enabled: false }, drift: { enabled: false }, digest: { enabled: true, pattern: '0 7 * * *' } } } },
      });
    const shared = openQueue(fleet('h1'), conn);
    const q1 = openHostQueue(fleet('h1'), conn, 'h1');
    const q2 = openHostQueue(fleet('h2'), conn, 'h2');
    try {
      // an older release kept store schedulers on the shared queue
      await shared.upsertJobScheduler('prune:s1', { pattern: '30 2 * * *', tz: 'UTC' }, { name: 'prune', data: { store: 's1' } });
      const plan = planSchedulers(fleet('h1'), JOBS, log);
      const r = await syncSchedulers(shared, fleet('h1'), plan, log, null);
      expect(r.removed).toEqual(['prune:s1']);
      await syncSchedulers(q1, fleet('h1'), plan, log, 'h1');
      await syncSchedulers(q2, fleet('h2'), planSchedulers(fleet('h2'), JOBS, log), log, 'h2');
      const keys = async (q: typeof shared) => (await q.getJobSchedulers(0, -1)).map((s) => s.key).sort();
      expect(await keys(shared)).toEqual(['digest']);
      expect(await keys(q1)).toEqual(['integrity:s1', 'prune:s1']);
      expect(await keys(q2)).toEqual(['integrity:s2', 'prune:s2']);
      // s2 moves to h1: h2's next start drops it, h1's adds it
      const moved = planSchedulers(fleet('h2', 'h1'), JOBS, log);
      expect((await syncSchedulers(q2, fleet('h2', 'h1'), moved, log, 'h2')).removed.sort()).toEqual(['integrity:s2', 'prune:s2']);
      await syncSchedulers(q1, fleet('h1', 'h1'), moved, log, 'h1');
      // every store on h1 now: the digest runs there too (it reads them all there)
      expect(await keys(q1)).toEqual(['digest', 'integrity:s1', 'integrity:s2', 'prune:s1', 'prune:s2']);
      expect(await keys(q2)).toEqual([]);
    } finally {
      for (const q of [shared, q1, q2]) await q.close();
    }
  });
});
