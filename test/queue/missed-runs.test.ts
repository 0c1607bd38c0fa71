import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { join } from 'node:path';
import { Worker, type Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { loadConfig, type Config } from '../../src/config/config.js';
import { createLogger } from '../../src/log/logger.js';
import { JOBS } from '../../jobs/index.js';
import { missedRunId, planSchedulers, syncSchedulers } from '../../src/queue/schedules.js';
import { openHostQueue, openQueue } from '../../src/queue/queues.js';
import { createRedis } from '../../src/queue/connection.js';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from '../helpers/redis.js';
import { makeStore, tempDir } from './fixtures.js';

/**
 * A host that comes back after its schedulers' next tick runs that missed run once; back before it, nothing extra.
 * BullMQ computes a cron scheduler's next run from Date.now(), so the clock is moved for the whole process (Date
 * only; timers stay real) and handed to syncSchedulers as its clock too.
 */
describe('a run due while no worker was up', () => {
  let redis: TestRedis;
  let conn: Redis;
  const prefixes: string[] = [];
  const dir = tempDir('missed');
  const store = makeStore(join(dir, 's1.db'));
  const log = createLogger({ level: 'silent' });
  const DAY = 86_400_000;
  const T0 = Date.parse('2026-03-10T12:00:00Z');

  beforeAll(async () => {
    redis = await startTestRedis();
    conn = createRedis(redis.url);
    await conn.connect();
  });
  afterEach(async () => {
    vi.useRealTimers();
    for (const p of prefixes.splice(0)) await deletePrefix(redis.client, p);
  });
  afterAll(async () => {
    await conn.quit();
    await redis.stop();
  });

  function setup(schedule: { pattern?: string; every?: number }, digest = false): { config: Config; queue: Queue; sync: (q?: Queue) => ReturnType<typeof syncSchedulers> } {
    const prefix = uniquePrefix('missed');
    prefixes.push(prefix);
    const off = { enabled: false };
    const config = loadConfig({
      env: {},
      overrides: {
        stateDb: join(dir, 'state.db'),
        redis: { url: redis.url, prefix },
        stores: { s1: { db: store, host: 'h1' }, s2: { db: store, host: 'h2' } },
        worker: { host: 'h1', schedules: { snapshot: off, integrity: off, drift: off, prune: digest ? off : { enabled: true, ...schedule }, digest: digest ? { enabled: true, ...schedule } : off } },
      },
    });
    const host = digest ? null : 'h1';
    const queue = host === null ? openQueue(config, conn) : openHostQueue(config, conn, host);
    const sync = (q = queue) => syncSchedulers(q, config, planSchedulers(config, JOBS, log), log, host, () => Date.now());
    return { config, queue, sync };
  }
  const at = (t: number) => vi.setSystemTime(t);
  /** A worker's first start at T0: the scheduler is made; `due` is its next run. The queue is closed after `body`. */
  async function scheduled(schedule: { pattern?: string; every?: number }, body: (s: ReturnType<typeof setup> & { due: number; id: string }) => Promise<void>, digest = false) {
    vi.useFakeTimers({ toFake: ['Date'] });
    at(T0);
    const s = setup(schedule, digest);
    const id = digest ? 'digest' : 'prune:s1';
    try {
      await s.sync();
      await body({ ...s, id, due: await nextOf(s.queue, id) });
    } finally {
      await s.queue.close();
    }
  }
  const nextOf = async (q: Queue, id: string) => Number((await q.getJobScheduler(id))!.next);
  const jobIds = async (q: Queue) => (await q.getJobs(['delayed', 'waiting', 'prioritized', 'active', 'completed'])).map((j) => j.id!).sort();

  it('cron: back after its next tick, the dropped run is put back once, by one id, whoever syncs after', () =>
    scheduled({ pattern: '30 2 * * *' }, async ({ queue, sync, due }) => {
      expect(due).toBe(Date.parse('2026-03-11T02:30:00Z'));
      // down over 02:30, back at 09:00 (kill -9: the delayed run stayed, nobody took it)
      at(due + 6.5 * 3_600_000);
      const back = await sync();
      const id = missedRunId('prune:s1', due);
      expect(back.backfilled).toEqual([id]);
      expect(await nextOf(queue, 'prune:s1')).toBe(due + DAY);
      const waiting = await queue.getJob(id);
      expect(waiting).toMatchObject({ name: 'prune', data: { store: 's1' } });
      expect(await waiting!.getState()).toBe('waiting');
      // a second worker of the host starting now, and a restart: nothing more
      expect((await sync()).backfilled).toEqual([]);
      expect(await jobIds(queue)).toEqual([id, `repeat:prune:s1:${due + DAY}`].sort());
    }));

  it('cron: two workers starting together over a missed tick add the missed run once', () =>
    scheduled({ pattern: '30 2 * * *' }, async ({ config, queue, sync, due }) => {
      const other = openHostQueue(config, conn, 'h1');
      at(due + 60_000);
      await Promise.all([sync(), sync(other)]).finally(() => other.close());
      expect((await jobIds(queue)).filter((i) => i.startsWith('missed:'))).toEqual([missedRunId('prune:s1', due)]);
    }));

  it('cron: down for three days, one run is put back, not three', () =>
    scheduled({ pattern: '30 2 * * *' }, async ({ queue, sync, due }) => {
      at(due + 3 * DAY + 60_000);
      expect((await sync()).backfilled).toEqual([missedRunId('prune:s1', due)]);
      expect((await jobIds(queue)).filter((i) => i.startsWith('missed:'))).toHaveLength(1);
    }));

  it('cron: back before its next tick, the pending run stays as it was and nothing is added', () =>
    scheduled({ pattern: '30 2 * * *' }, async ({ queue, sync, due }) => {
      at(due - 60_000);
      expect((await sync()).backfilled).toEqual([]);
      expect(await nextOf(queue, 'prune:s1')).toBe(due);
      expect(await jobIds(queue)).toEqual([`repeat:prune:s1:${due}`]);
    }));

  it('cron: a due run a live worker of the host already took is not added again when a replica restarts', () =>
    scheduled({ pattern: '30 2 * * *' }, async ({ queue, sync, due }) => {
      at(due + 1000);
      const job = (await queue.getJob(`repeat:prune:s1:${due}`))!;
      await job.promote();
      const taker = new Worker(queue.name, null, { connection: conn.duplicate(), prefix: queue.opts.prefix });
      try {
        expect((await taker.getNextJob('taker'))?.id).toBe(job.id); // active, as a running job is
        expect((await sync()).backfilled).toEqual([]);
      } finally {
        await taker.close(true);
      }
    }));

  it('every: back after its tick, BullMQ keeps the due run itself and nothing is added; back before it, the same', () =>
    scheduled({ every: 3_600_000 }, async ({ queue, sync, due }) => {
      for (const t of [due + 5 * 3_600_000, due - 1000]) {
        at(t);
        expect((await sync()).backfilled).toEqual([]);
        expect(await nextOf(queue, 'prune:s1')).toBe(due);
        expect(await jobIds(queue)).toEqual([`repeat:prune:s1:${due}`]);
      }
    }));

  it("the fleet's digest on the shared queue: every worker down at 07:00, the first one back sends that day's", () =>
    scheduled({ pattern: '0 7 * * *' }, async ({ queue, sync, due }) => {
      at(due + 2 * 3_600_000);
      expect((await sync()).backfilled).toEqual([missedRunId('digest', due)]);
      expect((await queue.getJob(missedRunId('digest', due)))?.name).toBe('digest');
    }, true));
});
