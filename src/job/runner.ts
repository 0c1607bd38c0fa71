import { hostname } from 'node:os';
import type { Config } from '../config/config.js';
import { expandHome } from '../config/read.js';
import type { Logger } from '../log/logger.js';
import type { Clock } from '../time/instants.js';
import { systemClock } from '../time/instants.js';
import { isDryRun, parsePayload, type FleetView, type JobContext, type JobDefinition, type JobLoader, type JobMap, type TaskDispatch } from './job.js';
import { coerceError, transientError, usageError, WardenError } from '../core/errors.js';
import { redactText } from '../text/secrets.js';
import { assertNoPendingRestore, restoreJournalBase } from '../snapshot/journal.js';
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

/**
 * What runJob returns instead of running a scheduled run already finished 'ok': by this host (its state db's run), or,
 * for a store every host reaches, by the host named (the run's row in the store's database).
 */
export interface AlreadyRan {
  alreadyRan: { runId: number; finishedAt: string; scheduledRun: string; host?: string };
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
  // A restore half done (its journal: beside the store file, or among a database store's snapshots here) keeps writers off.
  if (job.writes && store && opts.config.stores[store]) assertNoPendingRestore(restoreJournalBase(opts.config, store));
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
  const record = opts.record === false || isDryRun(parsed) ? undefined : await recordRun(opts.config, name, store, opts.scheduledRun, opts.fleet?.host);
  if (isAlreadyRan(record)) {
    const { runId, finishedAt, host } = record.alreadyRan;
    if (host === undefined) ctx.log.info({ scheduledRun: opts.scheduledRun, runId, finishedAt }, 'a scheduled run already done on this host: not run again');
    else ctx.log.info({ scheduledRun: opts.scheduledRun, runId, finishedAt, doneBy: host }, 'a scheduled run already done in the fleet: not run again');
    return record;
  }
  try {
    const result = await job.run(parsed, ctx);
    // A scheduled run told to stop (its store lock lost, the worker shutting down) that returns stopped part-way: it
    // is not recorded done, or no retry would finish it (the state db, or the store's database, would say it ran).
    if (opts.scheduledRun !== undefined && ctx.signal.aborted) throw stoppedError(`${name}${store ? ` ${store}` : ''}`, ctx.signal.reason);
    await record?.end('ok', result);
    return result;
  } catch (err) {
    const coerced = coerceError(err, `${name}${store ? ` ${store}` : ''}`);
    // What the CLI prints and the worker records: no value from the environment in it.
    const message = redactText(coerced.message);
    const e = message === coerced.message ? coerced : new WardenError(coerced.kind, message, { cause: coerced.cause });
    await record?.end('failed', e.message).catch(() => {}); // the job's own error is the one to report
    throw e;
  } finally {
    ctx.progress?.done();
    record?.close();
  }
}

interface RunRecord {
  end(outcome: 'ok' | 'failed', detail: unknown): Promise<void>;
  close(): void;
}

/**
 * The run's row in the state db's job_runs; src/state/state.ts and its migrations load only for a run that is
 * recorded (`check` records none). A scheduled run is claimed (src/state/state.ts claimScheduledRun): one this host
 * finished 'ok' comes back as such, unrun; one running in another live process fails transiently (retried later,
 * when it has finished and is found 'ok'). A scheduled run of a store every host reaches (its engine's reach is
 * `fleet`) is claimed first in the store's database (fleetClaim): once across the fleet, whichever worker runs it.
 */
async function recordRun(config: Config, name: string, store: string | null, scheduledRun: string | undefined, host: string | undefined): Promise<AlreadyRan | RunRecord> {
  const { claimScheduledRun, openStateDb, recordRunEnd, recordRunStart } = await import('../state/state.js');
  const what = `${name}${store ? ` ${store}` : ''}`;
  const fleet = scheduledRun === undefined || store === null ? undefined : await fleetClaim(config, name, store, scheduledRun, host);
  if (fleet && 'alreadyRan' in fleet) return { alreadyRan: { ...fleet.alreadyRan, scheduledRun: scheduledRun! } } satisfies AlreadyRan;
  if (fleet && 'inProgress' in fleet) {
    const where = fleet.inProgress.host === null ? 'another process' : `process ${fleet.inProgress.pid} on host ${fleet.inProgress.host}`;
    throw transientError(`${what}: the same scheduled run (${scheduledRun}) is in progress in ${where}`);
  }
  const claimed = fleet?.claimed;
  let state: ReturnType<typeof openStateDb> | undefined;
  let runId: number;
  try {
    state = openStateDb(expandHome(config.stateDb));
    if (scheduledRun === undefined) runId = recordRunStart(state, name, store, systemClock());
    else {
      const claim = claimScheduledRun(state, name, store, scheduledRun, systemClock());
      if ('alreadyRan' in claim) {
        // Done here, its end not recorded in the store's database (that write failed): it is now.
        await claimed?.end('ok');
        state.close();
        return { alreadyRan: { ...claim.alreadyRan, scheduledRun } } satisfies AlreadyRan;
      }
      if ('inProgress' in claim) throw transientError(`${what}: the same scheduled run (${scheduledRun}) is in progress in process ${claim.inProgress.pid}`);
      runId = claim.runId;
    }
  } catch (err) {
    state?.close();
    await claimed?.end('failed').catch(() => {});
    throw err;
  }
  const db = state;
  return {
    // The fleet's record first: once it says 'ok', no host runs the run again, whatever happens to this one.
    async end(outcome: 'ok' | 'failed', detail: unknown) {
      await claimed?.end(outcome);
      recordRunEnd(db, runId, systemClock(), outcome, detail);
    },
    close: () => db.close(),
  };
}

/**
 * The claim of a scheduled run in the database of a store every host reaches, through its engine (src/engines/
 * contract.ts claimScheduledRun); undefined for a store on one host, whose host's state db alone is the record.
 */
async function fleetClaim(config: Config, name: string, store: string, scheduledRun: string, host: string | undefined) {
  const storeConfig = config.stores[store];
  if (!storeConfig) return undefined;
  const { engineFor, reachOf } = await import('../engines/registry.js');
  if (reachOf(storeConfig) !== 'fleet') return undefined;
  const engine = await engineFor(storeConfig);
  if (!engine.claimScheduledRun) throw new Error(`engine ${engine.name} reaches every host but claims no scheduled run`);
  return engine.claimScheduledRun(store, storeConfig, { scheduledRun, job: name, host: host ?? (hostname().split('.')[0] || 'localhost'), pid: process.pid });
}

function stoppedError(what: string, reason: unknown): WardenError {
  const why = reason instanceof Error ? reason.message : typeof reason === 'string' ? reason : 'told to stop';
  return transientError(`${what}: stopped before it finished (${why}); a retry finishes it`);
}

async function findJob(jobs: JobMap | JobLoader, name: string): Promise<{ job: JobDefinition<any, any> | undefined; names: readonly string[] }> {
  if (typeof jobs === 'function') return { job: await jobs(name), names: jobs.names };
  return { job: Object.hasOwn(jobs, name) ? jobs[name] : undefined, names: Object.keys(jobs) };
}
