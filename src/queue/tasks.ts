import { hostname } from 'node:os';
import { Queue, QueueEvents, UnrecoverableError, Worker, type Job, type JobsOptions } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Config } from '../config/config.js';
import { coerceError, usageError } from '../core/errors.js';
import type { TaskDispatch, TaskKind, TaskOutcome } from '../job/job.js';
import type { Logger } from '../log/logger.js';

/**
 * Task queues: work a running job hands out and waits for (drift's source reads, src/drift/task.ts). Each kind has
 * its own BullMQ queue, `<worker.queue>-<kind>`, and its own Worker in every worker process, so a job waiting for its
 * tasks never holds the slot a task needs (no deadlock at worker.concurrency 1), and the queue's global concurrency
 * bounds the tasks running at once across every worker sharing the Redis.
 */

// A task kind is declared by the job that hands it out (JobDefinition.tasks, src/job/job.ts).
export type { TaskContext, TaskKind } from '../job/job.js';

export interface TaskQueues {
  dispatch: TaskDispatch;
  /** Tell running tasks to stop (the worker's shutdown timeout passed). */
  cancelAll(reason: string): void;
  /** Take no new task, let running ones finish, close the connections. Call after the jobs waiting on tasks are done. */
  close(): Promise<void>;
}

export function taskQueueName(config: Config, kind: string, host?: string): string {
  return host === undefined ? `${config.worker.queue}-${kind}` : `${config.worker.queue}-${kind}.${host}`;
}

/**
 * A task lives in Redis until its result is read (then the waiter removes it: its payload holds memory text); these
 * bound what a waiter that went away leaves behind.
 */
function taskJobOptions(config: Config): JobsOptions {
  const w = config.worker;
  return {
    attempts: w.attempts,
    backoff: { type: w.backoff.type, delay: w.backoff.delayMs },
    removeOnComplete: { age: 3600, count: 1000 },
    removeOnFail: { age: 86_400, count: 1000 },
  };
}

interface Lane {
  kind: TaskKind;
  queue: Queue;
  /** Absent on a lane this worker only sends to (another host's). */
  worker?: Worker;
  events: QueueEvents;
  eventsConnection: Redis;
}

const STOPPED: TaskOutcome = { ok: false, error: 'the job was stopped', stopped: true };

function processorFor(kind: TaskKind, log: Logger, stop: AbortSignal) {
  return async (job: Job, _token?: string, bullSignal?: AbortSignal): Promise<unknown> => {
    const attempt = job.attemptsMade + 1;
    const lastAttempt = attempt >= (job.opts.attempts ?? 1);
    const taskLog = log.child({ task: kind.name, taskId: job.id, attempt });
    const signal = bullSignal ? AbortSignal.any([stop, bullSignal]) : stop;
    try {
      const value = await kind.run(job.data, { log: taskLog, signal, attempt, lastAttempt });
      taskLog.debug({ outcome: 'ok' }, 'task done');
      return value;
    } catch (err) {
      const e = coerceError(err);
      taskLog.warn({ outcome: 'failed', retry: e.transient && !lastAttempt, kind: e.kind, err: e.message }, 'task failed');
      if (e.transient) throw e;
      throw new UnrecoverableError(e.message);
    }
  };
}

/** A lane: the queue, its events, and (`work`) a worker taking its tasks. */
async function openLane(config: Config, redis: Redis, kind: TaskKind, log: Logger, stop: AbortSignal, host: string | undefined, work: boolean): Promise<Lane> {
  const name = taskQueueName(config, kind.name, host);
  const w = config.worker;
  const queue = new Queue(name, { connection: redis, prefix: config.redis.prefix });
  queue.on('error', () => {}); // connection trouble is logged once by the connection itself
  queue.setMaxListeners(0); // one 'closing' listener per task being waited for
  await queue.setGlobalConcurrency(kind.concurrency);
  // Events from the stream's current end: nothing finishing after this point is missed, even before the first read.
  const tail = await redis.xrevrange(queue.keys.events!, '+', '-', 'COUNT', 1);
  const eventsConnection = redis.duplicate();
  const events = new QueueEvents(name, { connection: eventsConnection, prefix: config.redis.prefix, lastEventId: tail[0]?.[0] ?? '0-0' });
  events.on('error', () => {});
  events.setMaxListeners(0); // two listeners per task being waited for
  if (!work) {
    await events.waitUntilReady();
    return { kind, queue, events, eventsConnection };
  }
  const worker = new Worker(name, processorFor(kind, log, stop), {
    connection: redis,
    prefix: config.redis.prefix,
    name: `${hostname()}:${process.pid}`,
    concurrency: kind.concurrency,
    lockDuration: w.lockDurationMs,
    stalledInterval: w.stalledIntervalMs,
    maxStalledCount: w.maxStalledCount,
  });
  worker.on('error', (err) => log.debug({ task: kind.name, err: err.message }, 'task worker connection error'));
  worker.on('stalled', (jobId) => log.warn({ task: kind.name, taskId: jobId }, 'task stalled (its worker stopped without finishing); it runs again'));
  await Promise.all([events.waitUntilReady(), worker.waitUntilReady()]);
  return { kind, queue, worker, events, eventsConnection };
}

/** Wait for one task; its result read, it leaves Redis. One the stop overtook is left to finish and age out. */
async function outcomeOf(lane: Lane, job: Job, stopped: Promise<TaskOutcome>, timeoutMs: number | undefined): Promise<TaskOutcome> {
  const finished = job.waitUntilFinished(lane.events).then(
    (value: unknown): TaskOutcome => ({ ok: true, value }),
    (err: unknown): TaskOutcome => ({ ok: false, error: err instanceof Error ? err.message : String(err) }),
  );
  let timer: NodeJS.Timeout | undefined;
  const late =
    timeoutMs === undefined
      ? new Promise<TaskOutcome>(() => {})
      : new Promise<TaskOutcome>((resolve) => (timer = setTimeout(() => resolve({ ok: false, error: `no answer within ${Math.round(timeoutMs / 1000)} s`, timedOut: true }), timeoutMs)));
  const outcome = await Promise.race([finished, stopped, late]).finally(() => clearTimeout(timer));
  // Withdrawn if no worker took it (a host that comes back later must not do stale work); an active task is locked:
  // it finishes and goes with removeOnComplete.
  await job.remove().catch(() => {});
  return outcome;
}

/**
 * `host`: this worker's host; it takes the tasks of host-routed kinds sent to it, and opens (on first use) a
 * send-only lane to each other host it dispatches to.
 */
export async function startTaskQueues(config: Config, redis: Redis, kinds: readonly TaskKind[], log: Logger, stop: AbortSignal, host?: string): Promise<TaskQueues> {
  const lanes = new Map<string, Lane>();
  const laneKey = (kind: string, to?: string) => (to === undefined ? kind : `${kind}.${to}`);
  const closeAll = async () => {
    const all = [...lanes.values()];
    await Promise.all(all.map((l) => l.worker?.close().catch(() => {})));
    for (const l of all) {
      await l.events.close().catch(() => {});
      l.eventsConnection.disconnect();
      await l.queue.close().catch(() => {});
    }
  };
  try {
    for (const kind of kinds) {
      if (kind.route !== 'host') lanes.set(kind.name, await openLane(config, redis, kind, log, stop, undefined, true));
      else if (host !== undefined) lanes.set(laneKey(kind.name, host), await openLane(config, redis, kind, log, stop, host, true));
    }
  } catch (err) {
    await closeAll();
    throw err;
  }
  const opening = new Map<string, Promise<Lane>>();
  const laneTo = (kind: TaskKind, to: string): Promise<Lane> => {
    const key = laneKey(kind.name, to);
    const open = lanes.get(key);
    if (open) return Promise.resolve(open);
    let p = opening.get(key);
    if (!p) {
      p = openLane(config, redis, kind, log, stop, to, false).then((l) => (lanes.set(key, l), l));
      opening.set(key, p);
    }
    return p;
  };
  const kindsByName = new Map(kinds.map((k) => [k.name, k]));

  const dispatch: TaskDispatch = {
    async runTasks(kind, payloads, { signal, timeoutMs }) {
      const def = kindsByName.get(kind);
      if (!def) throw usageError(`no task queue for "${kind}" in this worker (task kinds: ${[...kindsByName.keys()].join(', ') || 'none'})`);
      if (payloads.length === 0) return [];
      if (signal.aborted) return payloads.map(() => STOPPED);
      const opts = taskJobOptions(config);
      const routed = await Promise.all(
        payloads.map(async (data) => {
          const to = def.route === 'host' ? (data as { host?: unknown }).host : undefined;
          if (def.route === 'host' && typeof to !== 'string') throw usageError(`${kind}: a task routed by host needs a payload with host`);
          const lane = def.route === 'host' ? await laneTo(def, to as string) : lanes.get(kind)!;
          return { lane, job: await lane.queue.add(kind, data, opts) };
        }),
      );
      let onAbort: (() => void) | undefined;
      const stopped = new Promise<TaskOutcome>((resolve) => {
        onAbort = () => resolve(STOPPED);
        signal.addEventListener('abort', onAbort, { once: true });
      });
      try {
        return await Promise.all(routed.map(({ lane, job }) => outcomeOf(lane, job, stopped, timeoutMs)));
      } finally {
        signal.removeEventListener('abort', onAbort!);
      }
    },
  };

  return {
    dispatch,
    cancelAll: (reason) => {
      for (const l of lanes.values()) l.worker?.cancelAllJobs(reason);
    },
    close: closeAll,
  };
}
