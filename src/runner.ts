import type { Config } from './config.js';
import { expandHome } from './config.js';
import type { Logger } from './logger.js';
import type { Clock } from './time.js';
import { systemClock } from './time.js';
import { parsePayload, type FleetView, type JobContext, type JobDefinition, type JobLoader, type JobMap, type TaskDispatch } from './job.js';
import { coerceError, usageError, WardenError } from './errors.js';
import { redactText } from './secrets.js';
import { openStateDb, recordRunEnd, recordRunStart } from './state.js';
import { assertNoPendingRestore } from './snapshot/journal.js';
import type { Progress } from './progress.js';

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
  const storeDb = store ? opts.config.stores[store]?.db : undefined;
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
  const state = opts.record === false ? undefined : openStateDb(expandHome(opts.config.stateDb));
  const runId = state ? recordRunStart(state, name, store, systemClock()) : 0;
  try {
    const result = await job.run(parsed, ctx);
    if (state) recordRunEnd(state, runId, systemClock(), 'ok', result);
    return result;
  } catch (err) {
    const coerced = coerceError(err, `${name}${store ? ` ${store}` : ''}`);
    // What the CLI prints and the worker records: no value from the environment in it.
    const message = redactText(coerced.message);
    const e = message === coerced.message ? coerced : new WardenError(coerced.kind, message, { cause: coerced.cause });
    if (state) recordRunEnd(state, runId, systemClock(), 'failed', e.message);
    throw e;
  } finally {
    ctx.progress?.done();
    state?.close();
  }
}

async function findJob(jobs: JobMap | JobLoader, name: string): Promise<{ job: JobDefinition<any, any> | undefined; names: readonly string[] }> {
  if (typeof jobs === 'function') return { job: await jobs(name), names: jobs.names };
  return { job: Object.hasOwn(jobs, name) ? jobs[name] : undefined, names: Object.keys(jobs) };
}
