import { hostname } from 'node:os';
import { Queue, UnrecoverableError, Worker, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Config } from '../config/config.js';
import { expandHome } from '../config/config.js';
import { coerceError, configError } from '../core/errors.js';
import type { Logger } from '../log/logger.js';
import { isAlreadyRan, runJob } from '../job/runner.js';
import { parseInstant, systemClock, type Clock } from '../time/instants.js';
import { lastSuccesses as lastSuccessesIn, openStateDb, recordQueueUse } from '../state/state.js';
import { WorkerMetrics } from './metrics.js';
import { startHttpServer, type Health, type HttpHandle } from './http.js';
import { connectRedis, describeRedis } from './connection.js';
import { storeLockKey, withStoreLock } from './lock.js';
import { planSchedulers, scheduledRunOf, syncSchedulers, type SyncResult } from './schedules.js';
import { fleetStores, globalHost, hostOfStore, hostQueueName, reachesEveryHost, storesOn, thisHost } from './hosts.js';
import { digestScopes } from '../digest/digest.js';
import { heartbeatTime, isSilent, publishSuccesses, readHeartbeats, writeHeartbeat, type Heartbeat } from './fleet.js';
import { openHostQueue, openQueue } from './queues.js';
import { VERSION } from '../core/version.js';
import { startTaskQueues, type TaskQueues } from './tasks.js';
import { isDryRun, type JobMap, type TaskDispatch } from '../job/job.js';
import { finishInterruptedRestores } from '../snapshot/restore.js';
import { inOwnProcess, runsApart } from './isolate.js';

export interface StartOptions {
  /** The jobs it takes (jobs/index.ts JOBS, handed down by the CLI), with the task kinds they declare. */
  jobs: JobMap;
  config: Config;
  log: Logger;
  /** The jobs' clock; the wall clock unless a test injects one. */
  now?: Clock;
  metrics?: WorkerMetrics;
  /**
   * The script a store job runs in when a native driver reads its store's files (src/queue/isolate.ts): such a job
   * that the driver aborts ends its own process, not the worker. Unset (a worker started from the sources): in process.
   */
  jobProcess?: string;
}

export interface RunningWorker {
  /** Which host this worker is: it takes the jobs of this host's stores only. */
  host: string;
  /** The shared queue: jobs for every store at once (the digest). */
  queue: Queue;
  /** This host's queue: its stores' jobs. */
  hostQueue: Queue;
  /** The worker on the shared queue. */
  worker: Worker;
  /** The worker on this host's queue. */
  hostWorker: Worker;
  redis: Redis;
  metrics: WorkerMetrics;
  http?: HttpHandle;
  schedulers: SyncResult;
  health(): Promise<Health>;
  /** Stop taking jobs, let running ones finish (bounded by worker.shutdownTimeoutMs), close everything. */
  shutdown(reason?: string): Promise<{ drained: boolean }>;
}

export { openQueue, openHostQueue, openQueueFor } from './queues.js';

/** Run-time state the processor and health check share. */
interface WorkerState {
  shuttingDown: boolean;
  stop: AbortController;
}

/**
 * The processor: the queue is only the transport and the clock. The job itself is the same `runJob` that
 * `memory-warden run` calls; this adds the cross-machine store lock for writers, the log lines, the metrics and
 * the retry decision (transient → thrown as is, BullMQ retries with backoff; anything else → UnrecoverableError).
 */
function makeProcessor(opts: StartOptions, redis: Redis, metrics: WorkerMetrics, state: WorkerState, dispatch: TaskDispatch, host: string) {
  const { config, log } = opts;
  const holder = `${host}:${process.pid}`;
  const apart = opts.jobProcess ? inOwnProcess(opts.jobs, opts.jobProcess) : undefined;
  return async (job: Job, _token?: string, bullSignal?: AbortSignal): Promise<unknown> => {
    const def = opts.jobs[job.name];
    const store = typeof (job.data as { store?: unknown } | undefined)?.store === 'string' ? (job.data as { store: string }).store : null;
    const attempt = job.attemptsMade + 1;
    const jobLog = log.child({ job: job.name, store, jobId: job.id, attempt });
    if (!def) {
      jobLog.error({ outcome: 'failed', retry: false }, 'job failed: this build has no such job');
      throw new UnrecoverableError(`unknown job "${job.name}" (jobs: ${Object.keys(opts.jobs).join(', ')})`);
    }
    // Only the host that holds a store's file may run its jobs: elsewhere the file is not there (or is another one).
    // A store every host reaches is run by whichever worker takes its job, once across the fleet (src/job/runner.ts).
    if (store !== null && store in config.stores && !reachesEveryHost(config, store) && hostOfStore(config, store) !== host) {
      const owner = hostOfStore(config, store);
      jobLog.error({ outcome: 'failed', retry: false, owner }, 'job failed: the store lives on another host');
      throw new UnrecoverableError(`${job.name} ${store}: the store lives on host "${owner}", not on this worker's host "${host}"; its jobs go to queue ${hostQueueName(config, owner)}`);
    }
    const started = performance.now();
    jobLog.info({ writes: def.writes }, 'job start');
    const signals = [state.stop.signal, ...(bullSignal ? [bullSignal] : [])];
    // A heartbeat's time is quoted only when it reads as one (the digest's "no report from host X since …").
    const lastSeen = async (h: string) => {
      const seen = (await readHeartbeats(redis, config.redis.prefix)).find((b) => b.host === h)?.lastSeen;
      return seen !== undefined && heartbeatTime(seen) !== null ? seen : null;
    };
    const fleet = { host, redis, lastSeen };
    // A scheduled run (by its id) runs at most once on this host: the state db, not Redis, says whether it did; for a
    // store every host reaches, at most once in the fleet: the store's database says (src/job/runner.ts).
    const scheduledRun = scheduledRunOf(job.id) ?? undefined;
    const run = (lost?: AbortSignal) =>
      runJob(job.name, job.data, { jobs: apart && runsApart(config, store) ? apart : opts.jobs, config, log, now: opts.now ?? systemClock, signal: AbortSignal.any(lost ? [...signals, lost] : signals), dispatch, fleet, ...(scheduledRun ? { scheduledRun } : {}) });
    try {
      // Writers of one store never overlap, across machines: the Redis lock here, the OS lock inside the job
      // (every writer takes withMaintenanceLock around its writes), both held while it writes.
      const result =
        def.writes && store !== null
          ? await withStoreLock(redis, storeLockKey(config.redis.prefix, store), { ...config.worker.storeLock, holder: `${job.name}@${holder}`, log: jobLog }, run)
          : await run();
      const seconds = (performance.now() - started) / 1000;
      // Counted when it ran: the job completes, the metrics and the fleet view stay as they were.
      if (isAlreadyRan(result)) return result;
      if (isDryRun(job.data)) {
        jobLog.info({ durationMs: Math.round(seconds * 1000), outcome: 'ok', dryRun: true }, 'job done (a dry run: not a run of the job)');
        return result;
      }
      metrics.recordRun(job.name, store, 'ok', seconds, { result });
      await publishHostSuccesses(redis, config, host).catch(() => {}); // best effort: fleet view only
      jobLog.info({ durationMs: Math.round(seconds * 1000), outcome: 'ok' }, 'job done');
      return result;
    } catch (err) {
      const e = coerceError(err);
      const seconds = (performance.now() - started) / 1000;
      const retry = e.transient && attempt < (job.opts.attempts ?? 1);
      metrics.recordRun(job.name, store, 'failed', seconds, { retried: retry });
      jobLog.error({ durationMs: Math.round(seconds * 1000), outcome: 'failed', retry, kind: e.kind, err: e.message }, 'job failed');
      if (e.transient) throw e;
      throw new UnrecoverableError(e.message);
    }
  };
}

/**
 * The series a worker of `host` will use: each job for each store of this host and each store every host reaches
 * (any worker may run those), and the jobs for every store at once when this host may run them (the one host of
 * every store, or any worker of a fleet, from the shared queue).
 */
function seriesOf(config: Config, jobs: JobMap, host: string): Parameters<WorkerMetrics['zeroSeries']>[0] {
  const stores = [...storesOn(config, host), ...fleetStores(config)];
  const everyStore = globalHost(config);
  const global = everyStore === null || everyStore === host;
  const runs = Object.entries(jobs).flatMap(([job, def]): { job: string; store: string | null }[] =>
    (def.scope ?? 'store') === 'global' ? (global ? [{ job, store: null }] : []) : stores.map((store) => ({ job, store })));
  return { runs, stores, digestScopes: global && 'digest' in jobs ? digestScopes(config) : [] };
}

/**
 * Last successful run per store and job, from the state db (survives restarts, unlike the metrics): what /healthz
 * says, what the metric is set from, and what `fleet` reads (publishHostSuccesses). A run of `memory-warden run`
 * on this host counts as much as the worker's own; a dry run is none.
 */
function lastSuccesses(config: Config): Record<string, Record<string, string>> {
  const db = openStateDb(expandHome(config.stateDb));
  try {
    return lastSuccessesIn(db);
  } finally {
    db.close();
  }
}

/**
 * This host's part of the state db's last successes (its stores' jobs, the jobs of stores every host reaches, which
 * any host may have run, and the jobs of every store), into Redis for `fleet` on any machine: after each run, and
 * with each heartbeat (which brings in the runs `memory-warden run` made here). Redis keeps the latest of every host's.
 */
async function publishHostSuccesses(redis: Redis, config: Config, host: string): Promise<void> {
  const mine = new Set([...storesOn(config, host), ...fleetStores(config)]);
  const out: Record<string, string> = {};
  for (const [store, jobs] of Object.entries(lastSuccesses(config))) {
    if (store !== '*' && !mine.has(store)) continue;
    for (const [job, at] of Object.entries(jobs)) {
      const t = parseInstant(at);
      if (t !== null) out[store === '*' ? job : `${job}:${store}`] = new Date(t).toISOString();
    }
  }
  await publishSuccesses(redis, config.redis.prefix, out);
}

/** The times /healthz shows, as ISO-8601 UTC with its Z, the form `fleet --json` and every heartbeat use. */
function isoTimes(byStore: Record<string, Record<string, string>>): Record<string, Record<string, string>> {
  const iso = (text: string) => {
    const t = parseInstant(text);
    return t === null ? text : new Date(t).toISOString();
  };
  return Object.fromEntries(Object.entries(byStore).map(([store, jobs]) => [store, Object.fromEntries(Object.entries(jobs).map(([job, at]) => [job, iso(at)]))]));
}

async function redisReachable(redis: Redis, timeoutMs = 1000): Promise<boolean> {
  if (redis.status !== 'ready') return false;
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      redis.ping().then(() => true),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs))),
    ]);
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}

export async function startWorker(opts: StartOptions): Promise<RunningWorker> {
  const { config, log } = opts;
  const metrics = opts.metrics ?? new WorkerMetrics();
  // What a job needs set up is checked now (drift's verifier plugins and rules): an error names the file at start-up.
  for (const job of Object.values(opts.jobs)) await job.prepare?.(config);
  // A restore killed half-way left one store on the snapshot and one not: finish it before any writer runs.
  await finishInterruptedRestores(config, log, opts.now ?? systemClock);
  const redis = await connectRedis(config.redis, log);
  // Jobs taken from here on leave memory text in Redis: an erase that cannot reach it must not say "nothing left".
  try {
    recordQueueUse(expandHome(config.stateDb), config.redis.prefix, 'worker', (opts.now ?? systemClock)());
  } catch (err) {
    log.warn({ err: (err as Error).message }, 'state db unwritable: this worker\'s use of the queue is not recorded');
  }
  const state: WorkerState = { shuttingDown: false, stop: new AbortController() };
  const host = thisHost(config);
  metrics.registry.setDefaultLabels({ host });
  metrics.zeroSeries(seriesOf(config, opts.jobs, host));
  try {
    metrics.seedLastSuccess(lastSuccesses(config));
  } catch (err) {
    log.warn({ err: (err as Error).message }, 'state db unreadable: last successes unknown until each job runs');
  }
  const queue = openQueue(config, redis);
  const hostQueue = openHostQueue(config, redis, host);
  let worker: Worker | undefined;
  let hostWorker: Worker | undefined;
  let heartbeat: NodeJS.Timeout | undefined;
  let http: HttpHandle | undefined;
  let tasks: TaskQueues | undefined;
  try {
    // The task kinds the jobs declare (drift's source reads, a fleet digest's per-host sections), each on its own queue.
    const kinds = Object.values(opts.jobs).flatMap((job) => job.tasks?.(config) ?? []);
    tasks = await startTaskQueues(config, redis, kinds, log, state.stop.signal, host);
    const taskQueues = tasks;
    // This worker keeps the shared queue's schedulers (every replica upserts the same ones) and its own host's.
    const planned = planSchedulers(config, opts.jobs, log);
    for (const name of new Set(planned.map((p) => p.job))) {
      const why = await opts.jobs[name]?.unready?.(config);
      if (why) log.warn({ job: name }, `${name} is scheduled but cannot run as configured: ${why}; each run fails until the config is fixed (or worker.schedules.${name}.enabled: false)`);
    }
    const clock = opts.now ?? systemClock;
    const shared = await syncSchedulers(queue, config, planned, log, null, clock);
    const own = await syncSchedulers(hostQueue, config, planned, log, host, clock);
    const schedulers: SyncResult = {
      upserted: [...shared.upserted, ...own.upserted], removed: [...shared.removed, ...own.removed],
      kept: [...shared.kept, ...own.kept], backfilled: [...shared.backfilled, ...own.backfilled],
    };
    const w = config.worker;
    const processor = makeProcessor(opts, redis, metrics, state, taskQueues.dispatch, host);
    const startOne = (name: string) => {
      const bw = new Worker(name, processor, {
        connection: redis,
        prefix: config.redis.prefix,
        name: `${host}:${hostname()}:${process.pid}`,
        concurrency: w.concurrency,
        lockDuration: w.lockDurationMs,
        stalledInterval: w.stalledIntervalMs,
        maxStalledCount: w.maxStalledCount,
      });
      bw.on('error', (err) => log.debug({ err: err.message }, 'worker connection error'));
      bw.on('stalled', (jobId) => log.warn({ jobId }, 'job stalled (its worker stopped without finishing); it runs again'));
      return bw;
    };
    worker = startOne(config.worker.queue);
    hostWorker = startOne(hostQueueName(config, host));
    await Promise.all([worker.waitUntilReady(), hostWorker.waitUntilReady()]);
    const running = worker;
    const runningHost = hostWorker;

    const startedAt = new Date().toISOString();
    const beat = (stopped?: boolean) => {
      const b: Heartbeat = { host, version: VERSION, pid: process.pid, startedAt, lastSeen: new Date().toISOString(), stores: storesOn(config, host), ...(stopped ? { stopped } : {}) };
      const published = publishHostSuccesses(redis, config, host).catch((err: Error) => log.debug({ err: err.message }, 'last successes not published'));
      return Promise.all([writeHeartbeat(redis, config.redis.prefix, b).catch((err: Error) => log.debug({ err: err.message }, 'heartbeat not written')), published]);
    };
    await beat();
    heartbeat = setInterval(() => void beat(), w.heartbeatMs);
    heartbeat.unref();

    const health = async (): Promise<Health> => {
      const up = await redisReachable(redis);
      metrics.redisUp.set(up ? 1 : 0);
      const workerState = state.shuttingDown ? 'stopping' : running.isRunning() && runningHost.isRunning() ? 'running' : 'stopped';
      let stores: Record<string, Record<string, string>> | string;
      try {
        stores = isoTimes(lastSuccesses(config));
      } catch (err) {
        stores = `state db unreadable: ${(err as Error).message}`;
      }
      return { ok: up && workerState === 'running', redis: up ? 'up' : 'down', worker: workerState, lastSuccess: stores };
    };

    if (w.http.enabled) {
      try {
        http = await startHttpServer({
          host: w.http.host,
          port: w.http.port,
          log,
          health,
          metrics: async () => {
            const up = await redisReachable(redis);
            metrics.redisUp.set(up ? 1 : 0);
            try {
              metrics.seedLastSuccess(lastSuccesses(config)); // as /healthz says: a `memory-warden run` here counts too
            } catch {
              // the state db unreadable: the gauge keeps what it had; /healthz says why
            }
            if (up) {
              const now = Date.now();
              const beats = await readHeartbeats(redis, config.redis.prefix).catch(() => []);
              metrics.recordFleet(beats.map((b) => ({ host: b.host, lastSeen: b.lastSeen, silent: isSilent(b, now, w.silentAfterMs) })));
            }
            return { contentType: metrics.contentType, body: await metrics.text() };
          },
        });
      } catch (err) {
        const code = (err as { code?: string }).code ?? (err as Error).message;
        throw configError(`worker.http: cannot listen on ${w.http.host}:${w.http.port} (${code}); choose another worker.http.port or set worker.http.enabled: false`);
      }
    }

    log.info({ host, redis: describeRedis(config.redis), prefix: config.redis.prefix, queue: config.worker.queue, hostQueue: hostQueue.name, concurrency: w.concurrency, schedulers: schedulers.upserted.length }, 'worker ready');

    let closing: Promise<{ drained: boolean }> | undefined;
    const shutdown = (reason = 'shutdown') =>
      (closing ??= (async () => {
        state.shuttingDown = true;
        const began = Date.now();
        log.info({ reason, timeoutMs: w.shutdownTimeoutMs }, 'shutting down: taking no new jobs, letting running ones finish');
        clearInterval(heartbeat);
        const closed = Promise.all([running.close(), runningHost.close()]);
        let drained = await settlesWithin(closed, w.shutdownTimeoutMs);
        if (!drained) {
          log.warn({ timeoutMs: w.shutdownTimeoutMs }, 'shutdown timeout: telling running jobs to stop');
          state.stop.abort();
          running.cancelAllJobs('worker shutting down');
          runningHost.cancelAllJobs('worker shutting down');
          taskQueues.cancelAll('worker shutting down');
          // Jobs that ignore the signal are left to stalled-job recovery: their lock lapses, another worker reruns them.
          drained = await settlesWithin(closed, Math.min(10_000, Math.max(1000, w.shutdownTimeoutMs)));
        }
        // Only now: the jobs that were draining may have been waiting for their tasks. Tasks still running (for
        // another worker's job) get what is left of the timeout, then are told to stop; they are retried elsewhere.
        const tasksClosed = taskQueues.close();
        if (!(await settlesWithin(tasksClosed, Math.max(1000, w.shutdownTimeoutMs - (Date.now() - began))))) {
          state.stop.abort();
          taskQueues.cancelAll('worker shutting down');
          drained = (await settlesWithin(tasksClosed, 10_000)) && drained;
        }
        await http?.close();
        await beat(true);
        await queue.close().catch(() => {});
        await hostQueue.close().catch(() => {});
        if (drained) await redis.quit().catch(() => redis.disconnect());
        else redis.disconnect();
        log.info({ drained }, 'worker stopped');
        return { drained };
      })());

    return { host, queue, hostQueue, worker: running, hostWorker: runningHost, redis, metrics, http, schedulers, health, shutdown };
  } catch (err) {
    clearInterval(heartbeat);
    await http?.close();
    await worker?.close(true).catch(() => {});
    await hostWorker?.close(true).catch(() => {});
    await tasks?.close();
    await queue.close().catch(() => {});
    await hostQueue.close().catch(() => {});
    redis.disconnect();
    throw err;
  }
}

function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.then(() => true, () => true),
    new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms))),
  ]).finally(() => clearTimeout(timer));
}
