import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Config } from '../config/config.js';
import type { Logger } from '../log/logger.js';
import { connectRedis } from '../queue/connection.js';
import { readHeartbeats } from '../queue/fleet.js';
import { configuredHosts, hostQueueName } from '../queue/hosts.js';
import { taskQueueName } from '../queue/tasks.js';
import type { Db } from '../store/sqlite.js';
import { queueUsed } from '../state/state.js';
import { recordMatcher, type Place, type StateTarget } from './state.js';

/**
 * Erase in what memory-warden keeps in Redis (BullMQ, src/queue/): the copies kinds `redis-job` and `redis-event`
 * (src/snapshot/copies.ts). Only under the configured `redis.prefix`, only in memory-warden's own queues, named as
 * the queue code names them: the shared queue, each host's queue, each task kind's queue (shared and per host), for
 * every host the config names or whose worker's heartbeat is there. No SCAN: every key read is one of those queues'.
 *
 * A job whose payload (`data`), result (`returnvalue`), error (`failedReason`, `stacktrace`) or log lines hold an
 * erased text, the subject or a field of the erased rows (and, for a job of the erased memories' store, an erased id)
 * — tested exactly as the state db's records are (state.ts recordMatcher) — is removed through BullMQ's own removal
 * when it is finished (completed or failed), so its indexes stay consistent. One still waiting, delayed or running is
 * left where it is (removing it under a running worker would break the run) and reported: still queued, exit 1, and a
 * later erase removes it once it is done. An entry of a queue's event stream (`<prefix>:<queue>:events`) holding one
 * goes too: the stream is rewritten without it in one script (XDEL only marks an entry deleted, its bytes stay in
 * the stream's node), keeping every other entry's id and the stream's last id, so no reader misses an event. Every
 * step is one atomic command or script: a kill at any point leaves what the next erase finds and removes.
 *
 * `erase` jobs are not searched: their payload is the erase request itself, which leaves Redis when its receipt is
 * read (src/queue/remote.ts, sensitive).
 */

/** The task kinds the jobs hand out (JobDefinition.tasks): their queues hold memory text. */
async function taskKinds(): Promise<string[]> {
  const [{ VERIFY_TASK }, { DIGEST_SECTIONS_TASK }] = await Promise.all([import('../drift/task.js'), import('../digest/fleet.js')]);
  return [VERIFY_TASK, DIGEST_SECTIONS_TASK];
}

export interface RedisSweep {
  /** Searched: Redis was reached and every queue read through. */
  searched: boolean;
  /** Not searched and the state db records no use of the queue: nothing memory-warden made can be there. */
  notUsed: boolean;
  /** Why it was not searched, and what the state db says of the queue's use. */
  reason?: string;
  /** Labels as erase lists copies (`redis:<key>`): found, removed, and those it could not rule out. */
  found: string[];
  deleted: string[];
  unverified: string[];
  /** `<queue> job <id>`: waiting, delayed or running while holding the person. */
  queued: string[];
  places: Place[];
}

export interface RedisSweepOptions {
  dryRun: boolean;
  log: Logger;
  /** The state db: whether the queue was ever used here, when Redis cannot be reached. */
  state: Db;
}

/** The states a job hash is indexed under; the first two are finished (removable), the rest still queued. */
const FINISHED = ['completed', 'failed'] as const;
const PENDING = ['wait', 'paused', 'active', 'delayed', 'prioritized', 'waiting-children'] as const;
const LISTS = new Set(['wait', 'paused', 'active']);
const FIELDS = ['data', 'returnvalue', 'failedReason', 'stacktrace'] as const;
const BATCH = 200;

/**
 * Rewrite a stream without the given entries, atomically: every other entry keeps its id and fields, and the stream
 * its last generated id (XSETID), so a reader waiting after it sees the next event as it would have.
 */
const DROP_ENTRIES = `
local drop = {}
for i = 1, #ARGV do drop[ARGV[i]] = true end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local last
for i = 1, #info, 2 do if info[i] == 'last-generated-id' then last = info[i + 1] end end
local entries = redis.call('XRANGE', KEYS[1], '-', '+')
local dropped = 0
for _, e in ipairs(entries) do if drop[e[1]] then dropped = dropped + 1 end end
if dropped == 0 then return 0 end
redis.call('DEL', KEYS[1])
local kept = 0
for _, e in ipairs(entries) do
  if not drop[e[1]] then
    redis.call('XADD', KEYS[1], e[1], unpack(e[2]))
    kept = kept + 1
  end
end
if kept > 0 then redis.call('XSETID', KEYS[1], last) end
return dropped`;

/** memory-warden's queues under the prefix, as the queue code names them; `tasks`: a task kind's queue. */
export async function queueNames(config: Config, redis: Redis): Promise<{ name: string; tasks: boolean }[]> {
  const beats = await readHeartbeats(redis, config.redis.prefix);
  const hosts = [...new Set([...configuredHosts(config), ...beats.map((b) => b.host)])].sort();
  const kinds = await taskKinds();
  return [
    ...[config.worker.queue, ...hosts.map((h) => hostQueueName(config, h))].map((name) => ({ name, tasks: false })),
    ...kinds.flatMap((k) => [taskQueueName(config, k), ...hosts.map((h) => taskQueueName(config, k, h))]).map((name) => ({ name, tasks: true })),
  ];
}

/** Search (and, unless a dry run, clean) memory-warden's records in Redis for one erase. */
export async function eraseRedisCopies(config: Config, t: StateTarget, opts: RedisSweepOptions): Promise<RedisSweep> {
  const out: RedisSweep = { searched: false, notUsed: false, found: [], deleted: [], unverified: [], queued: [], places: [] };
  const unknown = (why: string): RedisSweep => {
    const use = queueUsed(opts.state);
    const label = `redis:${config.redis.prefix}:*`;
    if (!use.used) return { ...out, notUsed: true, reason: `${why}; not used: ${use.why}`, places: [] };
    return { ...out, reason: `${why}; it may hold copies: ${use.why}`, found: [label], unverified: [label], places: [] };
  };
  let redis: Redis;
  try {
    redis = await connectRedis(config.redis);
  } catch (err) {
    const msg = (err as Error).message.split('\n')[0]!;
    const cut = msg.indexOf('): '); // the reason, without connectRedis's advice on starting a worker's Redis
    return unknown(`Redis not searched: ${cut >= 0 ? msg.slice(0, cut + 1) : msg}`);
  }
  // An outage during the sweep fails what is pending instead of waiting for Redis to come back.
  redis.on('error', () => redis.disconnect());
  try {
    const matches = recordMatcher(t);
    let jobs = 0;
    let events = 0;
    for (const { name, tasks } of await queueNames(config, redis)) {
      const queue = new Queue(name, { connection: redis, prefix: config.redis.prefix, skipMetasUpdate: true });
      queue.on('error', () => {});
      try {
        const r = await sweepQueue(redis, queue, tasks, t.store, matches, opts.dryRun);
        out.found.push(...r.found);
        out.deleted.push(...r.deleted);
        out.queued.push(...r.queued);
        jobs += r.jobs;
        events += r.events;
      } finally {
        await queue.close().catch(() => {});
      }
    }
    out.searched = true;
    out.places = [{ place: 'redis:jobs', count: jobs }, { place: 'redis:events', count: events }];
    if (out.queued.length > 0) opts.log.warn({ queued: out.queued }, 'erase: jobs still queued hold an erased text: run erase again once they are done');
    return out;
  } catch (err) {
    // What was removed is gone; the rest is unknown.
    const partial = unknown(`Redis not searched through: ${(err as Error).message.split('\n')[0]}`);
    return { ...partial, found: [...out.found, ...partial.found], deleted: out.deleted, queued: out.queued };
  } finally {
    redis.disconnect();
  }
}

interface QueueSweep {
  found: string[];
  deleted: string[];
  queued: string[];
  jobs: number;
  events: number;
}

async function idsIn(redis: Redis, key: string, list: boolean): Promise<string[]> {
  return list ? redis.lrange(key, 0, -1) : redis.zrange(key, 0, -1);
}

/** Whether a job's payload names this store (its own runs, a drift task of its rows, a digest section task of it). */
function ofStore(data: string | null, store: string): boolean {
  if (data === null) return false;
  try {
    const d = JSON.parse(data) as { store?: unknown; stores?: unknown };
    return d.store === store || (Array.isArray(d.stores) && d.stores.includes(store));
  } catch {
    return false;
  }
}

async function sweepQueue(redis: Redis, queue: Queue, tasks: boolean, store: string, matches: (v: string, ofStore: boolean) => boolean, dryRun: boolean): Promise<QueueSweep> {
  const r: QueueSweep = { found: [], deleted: [], queued: [], jobs: 0, events: 0 };
  const keys = queue.keys as Record<string, string>;
  const states = new Map<string, string>();
  for (const state of [...FINISHED, ...PENDING]) {
    for (const id of await idsIn(redis, keys[state]!, LISTS.has(state))) if (!states.has(id)) states.set(id, state);
  }
  const storeJobs = new Set<string>();
  const hitJobs = new Set<string>();
  const ids = [...states.keys()];
  for (let i = 0; i < ids.length; i += BATCH) {
    const batch = ids.slice(i, i + BATCH);
    const pipe = redis.pipeline();
    for (const id of batch) {
      pipe.hmget(queue.toKey(id), 'name', ...FIELDS);
      pipe.lrange(`${queue.toKey(id)}:logs`, 0, -1);
    }
    const replies = (await pipe.exec()) ?? [];
    for (let j = 0; j < batch.length; j++) {
      const [err1, fields] = replies[2 * j]!;
      const [err2, logs] = replies[2 * j + 1]!;
      if (err1 || err2) throw err1 ?? err2;
      const [name, ...values] = fields as (string | null)[];
      if (name === null || name === undefined) continue; // removed meanwhile
      if (name === 'erase' && !tasks) continue; // the erase request itself (see above)
      const id = batch[j]!;
      const mine = ofStore(values[0] ?? null, store);
      if (mine) storeJobs.add(id);
      const texts = [...values.filter((v): v is string => typeof v === 'string'), ...(logs as string[])];
      if (!texts.some((v) => matches(v, mine))) continue;
      const label = `redis:${queue.toKey(id)}`;
      r.found.push(label);
      hitJobs.add(id);
      const state = states.get(id)!;
      if (!(FINISHED as readonly string[]).includes(state)) {
        r.queued.push(`${queue.name} job ${id}`);
        continue;
      }
      if (dryRun) {
        r.jobs += 1;
        continue;
      }
      // BullMQ's own removal: the hash, its logs and every index it is in, atomically. 0: a worker holds it now.
      if ((await queue.remove(id)) === 1) {
        r.deleted.push(label);
        r.jobs += 1;
      } else r.queued.push(`${queue.name} job ${id}`);
    }
  }
  // The event stream: entries quoting a result or an error (and, for this store's jobs, an erased id), and the result
  // or error of a job found holding the person (a task's answer, which quotes what its payload held).
  const stream = keys.events!;
  const hits: string[] = [];
  let from = '-';
  for (;;) {
    const page = await redis.xrange(stream, from, '+', 'COUNT', 500);
    for (const [entryId, kv] of page) {
      const field = (name: string) => {
        for (let k = 0; k + 1 < kv.length; k += 2) if (kv[k] === name) return kv[k + 1];
        return undefined;
      };
      const jobId = field('jobId');
      const mine = jobId !== undefined && storeJobs.has(jobId);
      const outcome = field('returnvalue') !== undefined || field('failedReason') !== undefined;
      if ((outcome && jobId !== undefined && hitJobs.has(jobId)) || kv.some((v, k) => k % 2 === 1 && matches(v, mine))) hits.push(entryId);
    }
    if (page.length < 500) break;
    from = `(${page[page.length - 1]![0]}`;
  }
  if (hits.length > 0) {
    const label = `redis:${stream}`;
    r.found.push(label);
    if (dryRun) r.events += hits.length;
    else {
      r.events += Number(await redis.eval(DROP_ENTRIES, 1, stream, ...hits));
      r.deleted.push(label);
    }
  }
  return r;
}
