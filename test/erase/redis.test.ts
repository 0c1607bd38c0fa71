import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { Queue, QueueEvents, Worker, type Job } from 'bullmq';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Config } from '../../src/config/config.js';
import { loadConfig } from '../../src/config/config.js';
import { silentLogger } from '../../src/log/logger.js';
import { defineJob, type JobMap } from '../../src/job/job.js';
import { jobOptions } from '../../src/queue/options.js';
import { startWorker } from '../../src/queue/worker.js';
import { openStateDb, recordQueueUse } from '../../src/state/state.js';
import { openDatabase } from '../../src/store/sqlite.js';
import { z } from '../../src/vendor/zod.js';
import { CLI, cliAsync } from '../helpers/cli.js';
import { deletePrefix, freePort, startTestRedis, uniquePrefix, valuesUnder, type TestRedis } from '../helpers/redis.js';
import { makeStore } from '../helpers/store.js';
import { tempDir, until, writeConfig } from '../queue/fixtures.js';

/**
 * Erase reaches memory-warden's jobs in Redis (src/erase/redis.ts): records the worker's real code paths leave (a job
 * failing on a row's text, a task's result read back, a completed job's result) and records made through BullMQ's own
 * API for each field (data, returnvalue, failedReason, stacktrace, log lines) go; another person's stay; a job still
 * queued holding the text stays and is reported (exit 1); Redis down is unknown, exit 1 only where the state db
 * records queue use; a kill -9 in the middle of the sweep leaves what the next run removes.
 */
const CAROL = 'Carol Whitfield keeps the vault code 4471 in her left shoe';
const BOB = 'Bob Arkwright hides the spare key under the blue flowerpot';
const CAROL_NEEDLE = 'vault code 4471';
const BOB_NEEDLE = 'blue flowerpot';

let redis: TestRedis;
const prefixes: string[] = [];
beforeAll(async () => {
  redis = await startTestRedis();
});
afterEach(async () => {
  for (const p of prefixes.splice(0)) await deletePrefix(redis.client, p);
});
afterAll(async () => {
  await redis.stop();
});

interface World {
  dir: string;
  file: string;
  config: Config;
  prefix: string;
  store: string;
}

function world(name: string, redisUrl = redis.url): World {
  const dir = tempDir(`erase-redis-${name}`);
  const store = makeStore(join(dir, 'memory.db'), [
    { id: 'm_carol', subject: 'carol', fact: CAROL },
    { id: 'm_bob', subject: 'bob', fact: BOB },
  ]);
  const prefix = uniquePrefix(`erase-${name}`);
  prefixes.push(prefix);
  const file = writeConfig({ dir, redisUrl, prefix, stores: { agent: store } });
  return { dir, file, config: loadConfig({ file }), prefix, store };
}

const erase = (w: World, ...flags: string[]) => cliAsync(['erase', '--config', w.file, '--store', 'agent', '--user', 'carol', ...flags]);

const holding = async (prefix: string, needle: string) => (await valuesUnder(redis.client, prefix)).filter((v) => v.includes(needle)).length;

const factOf = (store: string, id: string): string => {
  const db = openDatabase(store, { readonly: true });
  try {
    return (db.prepare(`SELECT fact FROM memory WHERE id = ?`).get(id) as { fact: string }).fact;
  } finally {
    db.close();
  }
};

/**
 * A job as the worker runs one: it hands its row to a `verify` task (the drift task's payload: the memory's id and
 * fact), which answers quoting it; then fails quoting the row (`fail`) or returns it.
 */
function quoteJobs(store: string): JobMap {
  const quote = defineJob({
    name: 'quote',
    writes: false,
    schema: z.strictObject({ store: z.string(), id: z.string(), fail: z.boolean() }),
    tasks: () => [{ name: 'verify', concurrency: 1, run: async (p: unknown) => ({ verdict: 'stale', evidence: `the source says otherwise than "${(p as { memory: { fact: string } }).memory.fact}"` }) }],
    async run(p, ctx) {
      const fact = factOf(store, p.id);
      const [outcome] = await ctx.dispatch!.runTasks('verify', [{ v: 1, run: 'r1', store: p.store, memory: { id: p.id, subject: '', fact, source: 'message', confirmed_at: '' } }], { signal: ctx.signal });
      if (!outcome?.ok) throw new Error('the task failed');
      if (p.fail) throw new Error(`cannot parse the memory "${fact}"`);
      return { checked: fact };
    },
  });
  return { quote };
}

/** A job run through BullMQ's own Queue and Worker, its processor doing what the field needs. */
async function bullJob(w: World, queueName: string, data: unknown, processor: (job: Job) => Promise<unknown>): Promise<string> {
  const connection = { url: redis.url };
  const queue = new Queue(queueName, { connection, prefix: w.prefix });
  const events = new QueueEvents(queueName, { connection, prefix: w.prefix });
  await events.waitUntilReady();
  const worker = new Worker(queueName, processor, { connection, prefix: w.prefix });
  try {
    const job = await queue.add('verify', data, { removeOnComplete: { count: 1000 }, removeOnFail: { count: 1000 } });
    await job.waitUntilFinished(events).catch(() => {});
    return job.id!;
  } finally {
    await worker.close();
    await events.close();
    await queue.close();
  }
}

describe('erase reaches memory-warden\'s jobs in Redis', { timeout: 180_000 }, () => {
  it('what the worker left and what BullMQ\'s API made, in every field, goes; another person\'s stays; BullMQ\'s indexes stay whole', async () => {
    const w = world('fields');
    // The worker's real code paths: a job failing on Carol's row (failedReason, stacktrace), one completing with it
    // (returnvalue), each after a verify task answered quoting it (the task removed once read: its events remain).
    const worker = await startWorker({ jobs: quoteJobs(w.store), config: w.config, log: silentLogger });
    const hostQueue = worker.hostQueue;
    const events = new QueueEvents(hostQueue.name, { connection: { url: redis.url }, prefix: w.prefix });
    await events.waitUntilReady();
    try {
      for (const [id, fail] of [['m_carol', true], ['m_carol', false], ['m_bob', true], ['m_bob', false]] as const) {
        const job = await hostQueue.add('quote', { store: 'agent', id, fail }, jobOptions(w.config));
        await job.waitUntilFinished(events).catch(() => {});
      }
    } finally {
      await events.close();
      await worker.shutdown('test');
    }
    // BullMQ's own API, one field at a time, on a task queue (a drift task's payload) and the host queue.
    const task = `${w.config.worker.queue}-verify`;
    const q = (name: string) => new Queue(name, { connection: { url: redis.url }, prefix: w.prefix });
    const made = {
      data: await bullJob(w, task, { v: 1, store: 'agent', memory: { id: 'x1', fact: CAROL } }, async () => ({ verdict: 'ok' })),
      returnvalue: await bullJob(w, task, { v: 1, store: 'other' }, async () => ({ evidence: CAROL })),
      failedReason: await bullJob(w, task, { v: 1, store: 'other' }, async () => {
        throw new Error(`no such line: ${CAROL}`);
      }),
      stacktrace: await bullJob(w, task, { v: 1, store: 'other' }, async () => {
        const e = new Error('unreadable');
        e.stack = `Error: unreadable\n    at read (${CAROL})`;
        throw e;
      }),
      logs: await bullJob(w, task, { v: 1, store: 'other' }, async (job) => {
        await job.log(`read ${CAROL}`);
        return { verdict: 'ok' };
      }),
      bob: await bullJob(w, task, { v: 1, store: 'agent', memory: { id: 'm_bob', fact: BOB } }, async () => {
        throw new Error(`no such line: ${BOB}`);
      }),
    };
    const taskQueue = q(task);
    const mainQueue = q(hostQueue.name);
    try {
      expect(await holding(w.prefix, CAROL_NEEDLE)).toBeGreaterThanOrEqual(10);
      const bobBefore = await holding(w.prefix, BOB_NEEDLE);
      expect(bobBefore).toBeGreaterThan(0);

      const dry = await erase(w, '--dry-run', '--json');
      expect(dry.code, dry.stderr).toBe(0);
      const d = dry.json();
      for (const id of [made.data, made.returnvalue, made.failedReason, made.stacktrace, made.logs]) expect(d.snapshots.found).toContain(`redis:${w.prefix}:${task}:${id}`);
      expect(d.snapshots.found).toContain(`redis:${w.prefix}:${task}:events`);
      expect(d.snapshots.found).toContain(`redis:${w.prefix}:${hostQueue.name}:events`);
      expect(d.snapshots.found.filter((f: string) => f.startsWith(`redis:${w.prefix}:${hostQueue.name}:`) && !f.endsWith(':events'))).toHaveLength(2);
      expect(d.snapshots.found).not.toContain(`redis:${w.prefix}:${task}:${made.bob}`);
      expect(await holding(w.prefix, CAROL_NEEDLE), 'a dry run removes nothing').toBeGreaterThanOrEqual(10);

      const stream = `${w.prefix}:${hostQueue.name}:events`;
      const lastId = async () => {
        const info = (await redis.client.call('XINFO', 'STREAM', stream)) as string[];
        return info[info.indexOf('last-generated-id') + 1];
      };
      const lastBefore = await lastId();
      const r = await erase(w);
      expect(r.code, r.stdout + r.stderr).toBe(0);
      // The stream was rewritten without her entries, its last id kept (never going back): a reader waiting after it
      // misses nothing; what came since is BullMQ's own record of the removals.
      const ms = (id: string) => id.split('-').map(Number) as [number, number];
      const [a, b] = [ms(lastBefore!), ms((await lastId())!)];
      expect(b[0] > a[0] || (b[0] === a[0] && b[1] >= a[1])).toBe(true);
      const since = await redis.client.xrange(stream, `(${lastBefore}`, '+');
      expect(since.map(([, kv]) => kv[1])).toEqual(since.map(() => 'removed'));
      expect(r.stdout).toMatch(/redis:jobs 7\b/);
      expect(r.stdout).toMatch(/redis:events [1-9]/);
      expect(r.stdout).not.toContain('4471');
      expect(await holding(w.prefix, CAROL_NEEDLE), 'nothing under the prefix holds her text').toBe(0);
      expect(await holding(w.prefix, BOB_NEEDLE), 'Bob\'s records are untouched').toBe(bobBefore);
      // BullMQ still reads every set whole: no id without its job, Bob's jobs where they were.
      for (const queue of [taskQueue, mainQueue]) {
        for (const state of ['completed', 'failed'] as const) {
          const jobs = await queue.getJobs([state]);
          expect(jobs.every((j) => j && j.id), `${queue.name} ${state}`).toBe(true);
        }
      }
      expect((await mainQueue.getJobs(['failed'])).map((j) => j.data.id)).toEqual(['m_bob']);
      expect((await mainQueue.getJobs(['completed'])).map((j) => j.data.id)).toEqual(['m_bob']);
      expect((await taskQueue.getJobs(['failed'])).map((j) => j.id)).toEqual([made.bob]);
      const again = await erase(w);
      expect(again.code).toBe(0);
      expect(again.stdout).toMatch(/redis:jobs 0, redis:events 0/);
    } finally {
      await taskQueue.close();
      await mainQueue.close();
    }
  });

  it('a job still waiting that holds the text stays and is reported (exit 1); once it has run, the next erase removes it', async () => {
    const w = world('queued');
    recordQueueUse(w.config.stateDb, w.prefix, 'worker', Date.now()); // as the worker that made such jobs records
    const task = `${w.config.worker.queue}-verify`;
    const queue = new Queue(task, { connection: { url: redis.url }, prefix: w.prefix });
    try {
      const job = await queue.add('verify', { v: 1, store: 'agent', memory: { id: 'm_carol', fact: CAROL } });
      const r = await erase(w);
      expect(r.code).toBe(1);
      expect(r.stdout).toContain(`still queued: ${task} job ${job.id}`);
      expect(await queue.getJobState(job.id!)).toBe('waiting');
      expect(r.stdout).not.toContain('4471');
      // It runs (a worker takes it: its answer quotes the text), then the next erase of her finds it done. Her rows
      // are gone by then: the job is known by the id it names, which the first erase kept as a keyed hash.
      const events = new QueueEvents(task, { connection: { url: redis.url }, prefix: w.prefix });
      await events.waitUntilReady();
      const worker = new Worker(task, async (j) => ({ verdict: 'stale', evidence: `the page no longer says "${(j.data as { memory: { fact: string } }).memory.fact}"` }), { connection: { url: redis.url }, prefix: w.prefix });
      await job.waitUntilFinished(events);
      await worker.close();
      await events.close();
      expect(await holding(w.prefix, CAROL_NEEDLE)).toBe(3); // the job's payload and result, the completed event
      const after = await erase(w);
      expect(after.code, after.stdout).toBe(0);
      expect(after.stdout).toMatch(/redis:jobs 1, redis:events 1/);
      expect(await queue.getJob(job.id!)).toBeUndefined();
      expect(await holding(w.prefix, CAROL_NEEDLE)).toBe(0);
    } finally {
      await queue.close();
    }
  });

  it('Redis down: not searched; exit 0 where nothing ever went through the queue, exit 1 where the state db records it', async () => {
    const closed = `redis://127.0.0.1:${await freePort()}`;
    const never = world('down-never', closed);
    const r = await erase(never);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/redis not used: no worker ran here/);

    const used = world('down-used', closed);
    recordQueueUse(used.config.stateDb, used.prefix, 'worker', Date.now());
    const u = await erase(used, '--json');
    expect(u.code).toBe(1);
    const receipt = u.json();
    expect(receipt.redis).toMatchObject({ searched: false, notUsed: false });
    expect(receipt.redis.reason).toMatch(/it may hold copies: a worker ran through the queue here/);
    expect(receipt.snapshots.unverified).toContain(`redis:${used.prefix}:*`);

    // A state db from before queue_use: a scheduled run is the worker's.
    const older = world('down-older', closed);
    const db = openStateDb(older.config.stateDb);
    db.prepare(`INSERT INTO job_runs (job, store, started_at, finished_at, outcome, scheduled_run) VALUES ('prune', 'agent', '2026-11-01 02:30:00', '2026-11-01 02:30:01', 'ok', 'prune:agent@1')`).run();
    db.close();
    const o = await erase(older);
    expect(o.code).toBe(1);
    expect(o.stdout).toContain('redis NOT searched (unknown)');
    expect(o.stdout).toContain('a worker ran scheduled jobs here');
  });

  it('a kill -9 in the middle of the Redis sweep: the next erase removes the rest, and BullMQ\'s sets stay whole', async () => {
    const w = world('killed');
    recordQueueUse(w.config.stateDb, w.prefix, 'worker', Date.now()); // as the worker that made such jobs records
    const task = `${w.config.worker.queue}-verify`;
    const connection = { url: redis.url };
    const queue = new Queue(task, { connection, prefix: w.prefix });
    const N = 1500;
    try {
      const events = new QueueEvents(task, { connection, prefix: w.prefix });
      await events.waitUntilReady();
      const worker = new Worker(task, async (job) => ({ evidence: `${CAROL} (${job.id})` }), { connection, prefix: w.prefix, concurrency: 50 });
      await queue.addBulk(Array.from({ length: N }, (_, i) => ({ name: 'verify', data: { v: 1, store: 'other', n: i }, opts: { removeOnComplete: { count: 5000 } } })));
      await until('every job done', async () => (await queue.getCompletedCount()) === N, 60_000);
      await worker.close();
      await events.close();

      const child = spawn(process.execPath, [CLI, 'erase', '--config', w.file, '--store', 'agent', '--user', 'carol'], { env: { ...process.env, LOG_LEVEL: 'silent' }, stdio: 'ignore' });
      const exited = new Promise((resolve) => child.once('exit', resolve));
      // Killed as soon as the sweep has removed its first job.
      await until('the sweep under way', async () => (await redis.client.zcard(`${w.prefix}:${task}:completed`)) < N, 60_000);
      child.kill('SIGKILL');
      await exited;
      const left = await queue.getCompletedCount();
      expect(left).toBeLessThan(N);
      expect(left, 'killed while jobs of hers were still there').toBeGreaterThan(0);
      expect((await queue.getJobs(['completed'], 0, -1)).every((j) => j && j.id)).toBe(true);

      const again = await erase(w);
      expect(again.code, again.stdout + again.stderr).toBe(0);
      expect(await queue.getCompletedCount()).toBe(0);
      expect(await holding(w.prefix, CAROL_NEEDLE)).toBe(0);
    } finally {
      await queue.close();
    }
  });
});
