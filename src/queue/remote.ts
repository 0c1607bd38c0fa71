import { QueueEvents, type Job, type Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Config } from '../config/config.js';
import { expandHome } from '../config/config.js';
import { recordQueueUse } from '../state/state.js';
import type { Logger } from '../log/logger.js';
import { coerceError, transientError } from '../core/errors.js';
import { connectRedis } from './connection.js';
import { jobOptions } from './options.js';
import { openQueueFor } from './queues.js';

export interface RemoteRun {
  config: Config;
  log: Logger;
  /** The job's name, and its payload (`store` routes it to the store's host; none: where globalHost says). */
  job: string;
  data: Record<string, unknown> & { store?: string };
  timeoutSeconds: number;
  /**
   * The payload names a person or their text (erase): the job leaves Redis as soon as its result is read, and a
   * failed one at once; it is never retried by BullMQ (the command says what happened and the person reruns it).
   */
  sensitive?: boolean;
  /**
   * At the timeout too, as on Ctrl-C, a job no worker has taken is withdrawn (restore: the host must not restore a
   * store later, for nobody, after the person gave up). Without it (enqueue) it stays queued at the timeout.
   * A sensitive job is always withdrawn.
   */
  withdrawUnwaited?: boolean;
  /** Ctrl-C: stop waiting; the job is withdrawn if no worker has taken it yet. */
  signal?: AbortSignal;
  /** Where its outcome can be read later, when it runs without anyone waiting (erase: the host's receipts). */
  outcomeKeptAt?: string;
}

/** What became of a job its requester stopped waiting for. */
type Left = 'withdrawn' | 'running' | 'gone';

// Remove a job only while it waits (no worker has it): atomically, so a job a worker takes meanwhile, or has already
// finished, is never reported withdrawn.
const WITHDRAW = `
local found = redis.call('LREM', KEYS[1], 0, ARGV[1]) + redis.call('LREM', KEYS[2], 0, ARGV[1]) + redis.call('ZREM', KEYS[3], ARGV[1]) + redis.call('ZREM', KEYS[4], ARGV[1])
if found == 0 then return 0 end
redis.call('DEL', KEYS[5], KEYS[6])
return 1`;

async function withdraw(redis: Redis, queue: Queue, job: Job): Promise<Left> {
  const k = queue.keys;
  const jobKey = queue.toKey(job.id!);
  if (Number(await redis.eval(WITHDRAW, 6, k.wait!, k.paused!, k.delayed!, k.prioritized!, jobKey, `${jobKey}:logs`, job.id!)) === 1) return 'withdrawn';
  return (await job.getState().catch(() => 'unknown')) === 'active' ? 'running' : 'gone';
}

/** How often a requester also reads the job's own record while it waits for the job's events. */
const LOOK_MS = 2_000;
const GONE = Symbol('gone');

/**
 * The job's outcome from its own record, looked at every LOOK_MS: what the requester gets when the event saying it
 * finished never reaches it (a Redis failover between the worker's write and the requester's read, a stream trimmed
 * past it by a busy queue). Resolves with its result, rejects with its failure (a final one: a failed try that will
 * be retried is not), resolves GONE when the job was removed (a sensitive job, removed as it completes) and no event
 * came meanwhile. Never settles once `stop` is aborted.
 */
async function lookAtJob(queue: Queue, id: string, stop: AbortSignal): Promise<unknown> {
  let missing = 0;
  for (;;) {
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, LOOK_MS);
      stop.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
    });
    if (stop.aborted) return new Promise(() => {});
    let state: string;
    let job: Job | undefined;
    try {
      state = await queue.getJobState(id);
      job = state === 'completed' || state === 'failed' ? await queue.getJob(id) : undefined;
    } catch {
      continue; // Redis away: the next look, or the event, tells
    }
    if (stop.aborted) return new Promise(() => {});
    if (state === 'unknown' || ((state === 'completed' || state === 'failed') && !job)) {
      // Removed: its completion event normally arrives with the removal; one more look's time for it.
      if (++missing >= 2) return GONE;
      continue;
    }
    missing = 0;
    if (state === 'completed') return job!.returnvalue;
    if (state === 'failed') throw new Error(job!.failedReason || 'failed');
  }
}

/**
 * Run one job on the worker of the store's host (its queue, src/queue/hosts.ts) and wait for the result there:
 * what `enqueue` does, and what `erase` and `restore` do for a store on another machine.
 */
export async function runOnHost(run: RemoteRun): Promise<unknown> {
  const { config, log } = run;
  const store = run.data.store ?? null;
  const redis = await connectRedis(config.redis, log);
  // The job's payload and result pass through Redis: recorded, so that an erase here knows the queue was used.
  recordQueueUse(expandHome(config.stateDb), config.redis.prefix, 'job sent', Date.now());
  const queue = openQueueFor(config, redis, store);
  // Events are read from the stream's last entry before the job is added, never from "whatever comes next" ('$'):
  // a reconnect (a failover) then resumes where it was, and misses no event written while it was away.
  const [last] = (await redis.xrevrange(queue.keys.events!, '+', '-', 'COUNT', 1)) as Array<[string, string[]]>;
  const events = new QueueEvents(queue.name, { connection: redis.duplicate(), prefix: config.redis.prefix, lastEventId: last?.[0] ?? '0-0' });
  events.on('error', () => {});
  const what = store === null ? run.job : `${run.job} ${store}`;
  try {
    await events.waitUntilReady();
    const opts = run.sensitive ? { ...jobOptions(config), attempts: 1, removeOnComplete: true, removeOnFail: true } : jobOptions(config);
    const job = await queue.add(run.job, run.data, opts);
    log.info({ job: run.job, store, jobId: job.id, queue: queue.name }, 'enqueued; waiting for a worker to run it');
    // Our own timer, cleared on every way out (BullMQ's ttl timer would keep the process alive after a Ctrl-C).
    let timer: NodeJS.Timeout | undefined;
    const stopped = new Promise<'interrupted' | 'timed out'>((resolve) => {
      timer = setTimeout(() => resolve('timed out'), run.timeoutSeconds * 1000);
      if (run.signal?.aborted) resolve('interrupted');
      run.signal?.addEventListener('abort', () => resolve('interrupted'), { once: true });
    });
    let outcome: unknown;
    const looking = new AbortController();
    try {
      outcome = await Promise.race([job.waitUntilFinished(events), lookAtJob(queue, job.id!, looking.signal), stopped]);
    } catch (err) {
      throw coerceError(err, `${what} (job ${job.id}, queue ${queue.name})`);
    } finally {
      clearTimeout(timer);
      looking.abort();
    }
    const later = run.outcomeKeptAt ? `; its outcome is kept there: ${run.outcomeKeptAt}` : '';
    if (outcome === GONE) {
      throw transientError(`${what}: its result did not reach this command (job ${job.id} finished and was removed from ${queue.name}; whether it succeeded is not known here)${later}`);
    }
    if (outcome !== 'interrupted' && outcome !== 'timed out') return outcome;
    const host = queue.name.slice(config.worker.queue.length + 1) || '(any)';
    const why = outcome === 'interrupted' ? 'interrupted' : `no result within ${run.timeoutSeconds} s (is a worker running on host ${host}? memory-warden worker)`;
    // A request nobody waits for any more is withdrawn while no worker has it: it would run with nobody to read it.
    const left = run.sensitive || run.withdrawUnwaited || outcome === 'interrupted' ? await withdraw(redis, queue, job) : 'queued';
    const status =
      left === 'withdrawn' ? `the request was withdrawn from ${queue.name} before any worker took it: nothing was done` :
      left === 'running' ? `host ${host}'s worker is already running it (job ${job.id}): it finishes there${later}` :
      left === 'gone' ? `it is no longer queued (it finished or failed just now)${later}` :
      `it stays queued as job ${job.id} on ${queue.name} and runs when a worker of host ${host} takes it${later}`;
    throw transientError(`${what}: ${why}; ${status}`);
  } finally {
    await events.close().catch(() => {});
    await queue.close().catch(() => {});
    await redis.quit().catch(() => redis.disconnect());
  }
}
