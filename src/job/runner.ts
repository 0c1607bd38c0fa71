import type { Config } from '../config/config.js';
import { expandHome } from '../config/read.js';
import type { Logger } from '../log/logger.js';
import type { Clock } from '../time/instants.js';
import { systemClock } from '../time/instants.js';
import { isDryRun, parsePayload, type FleetView, type JobContext, type JobDefinition, type JobLoader, type JobMap, type TaskDispatch } from './job.js';
import { coerceError, transientError, usageError, WardenError } from '../core/errors.js';
import { redactText } from '../text/secrets.js';
import { assertNoPendingRestore } from '../snapshot/journal.js';
import type { Progress } from '../progress/progress.js';

export interface RunOptions {
  /**
   * The jobs this program runs, handed down by the composition root (the runner imports none): the map
   * (jobs/index.ts JOBS, the worker's) or a loader that imports only the job run (the CLI's, src/commands/job-loaders.ts).
   */
  jobs: JobMap | JobLoader;
  config: Config;
  log: Logger;
  now?: Clock;
  signal?: AbortSignal;
  /** Record the run in the state db (the digest reports runs and failures from there). Default true. */
  record?: boolean;
  /** The worker's task queues (JobContext.dispatch); absent under the CLI, where jobs do that work inline. */
  dispatch?: TaskDispatch;
  /** The worker's host and its view of the fleet (JobContext.fleet); absent under the CLI. */
  fleet?: FleetView;
  /** The CLI's progress reporter on a terminal (JobContext.progress); the worker gives none. */
  progress?: Progress;
  /**
   * The scheduled run this is (scheduler and due time, from the worker's job id; src/queue/schedules.ts
   * scheduledRunOf): run at most once on this host, whatever Redis hands out. Absent for a run started by hand.
   */
  scheduledRun?: string;
}

/** What runJob returns instead of running a scheduled run that this host's state db has finished 'ok'. */
export interface AlreadyRan {
  alreadyRan: { runId: number; finishedAt: string; scheduledRun: string };
}

export function isAlreadyRan(result: unknown): result is AlreadyRan {
  return typeof result === 'object' && result !== null && 'alreadyRan' in result;
}

/**
 * Run one job by name: validate the payload, build the context, record the outcome. The CLI's `run` and the
 * BullMQ worker both come through here, so a job behaves the same whichever started it.
 */
export async function runJob(name: string, payload: unknown, opts: RunOptions): Promise<unknown> {
  const { job, names } = await findJob(opts.jobs, name);
  if (!job) throw usageError(`unknown job "${name}" (jobs: ${names.join(', ')})`);
  const parsed = parsePayload(job, payload);
  const store = typeof (parsed as { store?: unknown }).store === 'string' ? (parsed as { store: string }).store : null;
  // A store of an engine the job does not run on is refused here, whoever started it (the CLI, the worker).
  const covered = store ? [store] : Array.isArray((parsed as { stores?: unknown }).stores) ? (parsed as { stores: string[] }).stores : job.scope === 'global' ? Object.keys(opts.config.stores) : [];
  if (covered.some((s) => (opts.config.stores[s]?.engine ?? 'sqlite') !== 'sqlite')) {
    const { notOnEngineYet, storeOffEngines } = await import('../engines/registry.js');
    const off = storeOffEngines(opts.config.stores, covered, job.engines ?? ['sqlite']);
    if (off) throw notOnEngineYet(`run ${name}`, off.store, off.engine);
  }
  const storeDb = store ? opts.config.stores[store]?.db : undefined;
  if (storeDb) (await import('../store/store-path.js')).assertStorePath(storeDb, `stores.${store}.db`);
  if (job.writes && storeDb) assertNoPendingRestore(storeDb);
  const now = opts.now ?? systemClock;
  const ctx: JobContext = {
    config: opts.config,
    log: opts.log.child({ job: name, ...(store ? { store } : {}) }),
    now,
    signal: opts.signal ?? new AbortController().signal,
    ...(opts.dispatch ? { dispatch: opts.dispatch } : {}),
    ...(opts.fleet ? { fleet: opts.fleet } : {}),
    ...(opts.progress ? { progress: opts.progress } : {}),
  };
  const record = opts.record === false || isDryRun(parsed) ? undefined : await recordRun(opts.config, name, store, opts.scheduledRun);
  if (isAlreadyRan(record)) {
    ctx.log.info({ scheduledRun: opts.scheduledRun, runId: record.alreadyRan.runId, finishedAt: record.alreadyRan.finishedAt }, 'a scheduled run already done on this host: not run again');
    return record;
  }
  try {
    const result = await job.run(parsed, ctx);
    record?.end('ok', result);
    return result;
  } catch (err) {
    const coerced = coerceError(err, `${name}${store ? ` ${store}` : ''}`);
    // What the CLI prints and the worker records: no value from the environment in it.
    const message = redactText(coerced.message);
    const e = message === coerced.message ? coerced : new WardenError(coerced.kind, message, { cause: coerced.cause });
    record?.end('failed', e.message);
    throw e;
  } finally {
    ctx.progress?.done();
    record?.close();
  }
}

/**
 * The run's row in the state db's job_runs; src/state/state.ts and its migrations load only for a run that is
 * recorded (`check` records none). A scheduled run is claimed (src/state/state.ts claimScheduledRun): one this host
 * finished 'ok' comes back as such, unrun; one running in another live process fails transiently (retried later,
 * when it has finished and is found 'ok').
 */
async function recordRun(config: Config, name: string, store: string | null, scheduledRun: string | undefined) {
  const { claimScheduledRun, openStateDb, recordRunEnd, recordRunStart } = await import('../state/state.js');
  const state = openStateDb(expandHome(config.stateDb));
  let runId: number;
  try {
    if (scheduledRun === undefined) runId = recordRunStart(state, name, store, systemClock());
    else {
      const claim = claimScheduledRun(state, name, store, scheduledRun, systemClock());
      if ('alreadyRan' in claim) {
        state.close();
        return { alreadyRan: { ...claim.alreadyRan, scheduledRun } } satisfies AlreadyRan;
      }
      if ('inProgress' in claim) throw transientError(`${name}${store ? ` ${store}` : ''}: the same scheduled run (${scheduledRun}) is in progress in process ${claim.inProgress.pid}`);
      runId = claim.runId;
    }
  } catch (err) {
    state.close();
    throw err;
  }
  return {
    end: (outcome: 'ok' | 'failed', detail: unknown) => recordRunEnd(state, runId, systemClock(), outcome, detail),
    close: () => state.close(),
  };
}

async function findJob(jobs: JobMap | JobLoader, name: string): Promise<{ job: JobDefinition<any, any> | undefined; names: readonly string[] }> {
  if (typeof jobs === 'function') return { job: await jobs(name), names: jobs.names };
  return { job: Object.hasOwn(jobs, name) ? jobs[name] : undefined, names: Object.keys(jobs) };
}
