import { createRequire } from 'node:module';
import type { Queue } from 'bullmq';
import type { Config } from '../config/config.js';
import type { JobDefinition } from '../job/job.js';
import type { Logger } from '../log/logger.js';
import { configError } from '../core/errors.js';
import { jobOptions } from './options.js';
import { queueHostOf } from './hosts.js';
import { systemClock, type Clock } from '../time/instants.js';

const require = createRequire(import.meta.url);

/** One scheduler the config asks for: a job, for one store (or for all, a global job), on a cron pattern. */
export interface PlannedScheduler {
  /** `prune:agent` for a store job, `digest` for a global one: stable, so every replica upserts the same one. */
  id: string;
  job: string;
  store: string | null;
  /**
   * The host whose queue runs it (src/queue/hosts.ts queueHostOf); null: the shared queue, any worker (a fleet's
   * global jobs, and every job of a store every host reaches).
   */
  host: string | null;
  pattern?: string;
  every?: number;
  tz?: string;
  data: Record<string, unknown>;
}

export function schedulerId(job: string, store: string | null): string {
  return store === null ? job : `${job}:${store}`;
}

/**
 * What the config asks for, given the jobs this build has. A schedule for a job missing from JOBS is skipped with
 * a warning (its job may be in a newer release), never a crash.
 */
export function planSchedulers(config: Config, jobs: Record<string, JobDefinition<any, any>>, log?: Logger): PlannedScheduler[] {
  const planned: PlannedScheduler[] = [];
  const stores = Object.keys(config.stores).sort();
  for (const [name, schedule] of Object.entries(config.worker.schedules)) {
    if (!schedule.enabled) continue;
    const job = jobs[name];
    if (!job) {
      log?.warn({ job: name }, 'schedule names a job this build does not have; skipped');
      continue;
    }
    const when = schedule.every !== undefined ? { every: schedule.every } : { pattern: schedule.pattern!, tz: schedule.tz ?? config.worker.timezone };
    if ((job.scope ?? 'store') === 'global') {
      planned.push({ id: schedulerId(name, null), job: name, store: null, host: queueHostOf(config, null), ...when, data: {} });
    } else {
      for (const store of stores) planned.push({ id: schedulerId(name, store), job: name, store, host: queueHostOf(config, store), ...when, data: { store } });
    }
  }
  return planned;
}

/** The job (and store) a scheduler found in Redis belongs to, from its template or, failing that, its id. */
function ownerOf(s: { key: string; id?: string | null; name: string; template?: { data?: unknown } }): { id: string; job: string; store: string | null } {
  const id = s.id ?? s.key;
  const data = s.template?.data as { store?: unknown } | undefined;
  const store = typeof data?.store === 'string' ? data.store : id.includes(':') ? id.slice(id.indexOf(':') + 1) : null;
  return { id, job: s.name, store };
}

export interface SyncResult {
  upserted: string[];
  removed: string[];
  /** Left in place: their job is configured but this build lacks it; a newer replica may run it. */
  kept: string[];
  /** Runs that were due while no worker was up and that the upsert dropped, put back once: `missed:<id>:<millis>`. */
  backfilled: string[];
}

/**
 * The job id of a back-filled run: one per scheduler and missed tick, so two workers starting together add it once
 * (BullMQ keeps the first job of an id). A custom id may hold two colons at most: the scheduler id is encoded.
 */
export function missedRunId(schedulerId: string, millis: number): string {
  return `missed:${encodeURIComponent(schedulerId)}:${millis}`;
}

/**
 * The scheduled run a job id names, as `<schedulerId>:<millis>`: BullMQ's `repeat:<schedulerId>:<millis>` and the
 * put-back `missed:<encoded schedulerId>:<millis>` of the same tick are the same run. Null for any other id: a
 * manual enqueue's id is a counter that starts again if Redis loses its data, so it never names one run.
 */
export function scheduledRunOf(jobId: string | undefined): string | null {
  const m = /^(repeat|missed):(.+):(\d+)$/.exec(jobId ?? '');
  if (!m) return null;
  let scheduler = m[2]!;
  if (m[1] === 'missed') {
    try {
      scheduler = decodeURIComponent(scheduler);
    } catch {
      return null;
    }
  }
  return `${scheduler}:${m[3]}`;
}

/**
 * The run a scheduler had due and not yet taken: its record's next millis when that is not after `now` and its job
 * still waits (delayed, waiting, prioritized). Null when nothing is due or the run was already taken.
 */
async function dueRun(queue: Queue, id: string, now: number): Promise<number | null> {
  const held = await queue.getJobScheduler(id);
  const next = held?.next === undefined || held?.next === null ? NaN : Number(held.next);
  if (!Number.isFinite(next) || next > now) return null;
  const job = await queue.getJob(`repeat:${id}:${next}`);
  if (!job) return null;
  const state = await job.getState();
  return state === 'delayed' || state === 'waiting' || state === 'prioritized' ? next : null;
}

/**
 * Make one queue hold exactly its planned schedulers: the shared queue the global ones and those of stores every host
 * reaches (`host` null), a host's queue that host's stores' ones. Every planned one is upserted (idempotent: replicas starting from the same config
 * upsert the same ids, so nothing is scheduled twice); those whose job or store left the config, or whose store
 * moved to another host, are removed. A worker syncs only the shared queue and its own host's.
 */
export async function syncSchedulers(
  queue: Queue, config: Config, planned: PlannedScheduler[], log: Logger, host: string | null = null, now: Clock = systemClock,
): Promise<SyncResult> {
  const result: SyncResult = { upserted: [], removed: [], kept: [], backfilled: [] };
  const opts = jobOptions(config);
  const mine = planned.filter((p) => p.host === host);
  for (const p of mine) {
    const repeat = p.every !== undefined ? { every: p.every } : { pattern: p.pattern!, tz: p.tz };
    // Read before the upsert: for a cron pattern BullMQ computes the next run from now and removes the one that was
    // due while nobody was up (an `every` scheduler keeps it). That one run is put back below, never more.
    const due = await dueRun(queue, p.id, now());
    try {
      await queue.upsertJobScheduler(p.id, repeat, { name: p.job, data: p.data, opts });
    } catch (err) {
      const where = `worker.schedules.${p.job}`;
      throw configError(`${where}: cannot schedule ${p.id} (${repeat.pattern ?? `every ${repeat.every} ms`}): ${(err as Error).message.split('\n')[0]}`);
    }
    result.upserted.push(p.id);
    if (due !== null && !(await queue.getJob(`repeat:${p.id}:${due}`))) {
      const jobId = missedRunId(p.id, due);
      await queue.add(p.job, p.data, { ...opts, jobId });
      result.backfilled.push(jobId);
      log.info({ scheduler: p.id, dueAt: new Date(due).toISOString(), jobId }, 'a run was due while no worker was up: running it once now');
    }
  }
  const wanted = new Set(mine.map((p) => p.id));
  // A store scheduler belongs on its host's queue (one left on the shared queue by an older release goes), or on the
  // shared queue for a store every host reaches (one left on a host's queue by an older release goes); a global one
  // on the queue of the host that holds every store, or on the shared queue (src/queue/hosts.ts queueHostOf).
  const belongs = (store: string | null) => (store === null || store in config.stores) && queueHostOf(config, store) === host;
  for (const existing of await queue.getJobSchedulers(0, -1)) {
    const owner = ownerOf(existing);
    if (wanted.has(owner.id)) continue;
    const schedule = config.worker.schedules[owner.job];
    if (belongs(owner.store) && schedule?.enabled && !planned.some((p) => p.job === owner.job)) {
      // Configured, but not planned: this build lacks the job. Another replica may have it; leave it.
      result.kept.push(owner.id);
      continue;
    }
    await queue.removeJobScheduler(owner.id);
    result.removed.push(owner.id);
  }
  log.info({ queue: queue.name, upserted: result.upserted.length, removed: result.removed, kept: result.kept, backfilled: result.backfilled }, 'job schedulers in sync with config');
  return result;
}

export interface SchedulerListing {
  id: string;
  job: string;
  store: string | null;
  host: string | null;
  pattern: string | null;
  every: number | null;
  tz: string | null;
  /**
   * Next run, ISO-8601 UTC: as Redis holds it, or, for a scheduler of the config no worker has put there yet,
   * computed from the config as BullMQ will (nextFrom says which); null for an `every` scheduler not in Redis.
   */
  next: string | null;
  nextFrom: 'redis' | 'config' | null;
  inConfig: boolean;
  inRedis: boolean;
}

/**
 * Every scheduler the config plans or Redis holds, with its next run. Reads only. `queues`: the shared queue
 * (host null) and each host's.
 */
export async function listSchedulers(queues: { host: string | null; queue: Queue }[], planned: PlannedScheduler[], now = Date.now()): Promise<SchedulerListing[]> {
  const rows = new Map<string, SchedulerListing>();
  for (const p of planned) {
    const next = p.pattern !== undefined ? nextOfPattern(p.pattern, p.tz ?? 'UTC', now) : null;
    rows.set(p.id, { id: p.id, job: p.job, store: p.store, host: p.host, pattern: p.pattern ?? null, every: p.every ?? null, tz: p.tz ?? null, next, nextFrom: next === null ? null : 'config', inConfig: true, inRedis: false });
  }
  const held = await Promise.all(queues.map(async ({ host, queue }) => ({ host, schedulers: await queue.getJobSchedulers(0, -1, true) })));
  for (const { host, schedulers } of held) for (const s of schedulers) {
    const owner = ownerOf(s);
    const want = rows.get(owner.id);
    // The same id on a queue it does not belong to (a store that moved host): its own row, not in config.
    const key = want && want.host !== host ? `${owner.id}@${host ?? '*'}` : owner.id;
    const row = (want && want.host === host ? want : undefined) ?? { ...owner, host, pattern: null, every: null, tz: null, next: null, nextFrom: null, inConfig: false, inRedis: true };
    rows.set(key, {
      ...row,
      pattern: s.pattern ?? row.pattern,
      every: s.every !== undefined && s.every !== null ? Number(s.every) : row.every,
      tz: s.tz ?? row.tz,
      next: s.next ? new Date(Number(s.next)).toISOString() : null,
      nextFrom: s.next ? 'redis' : null,
      inRedis: true,
    });
  }
  return [...rows.values()].sort((a, b) => a.id.localeCompare(b.id));
}

/**
 * The first time after `now` a cron pattern fires in zone `tz`, as BullMQ computes a scheduler's next run (the same
 * cron-parser, from the same pattern and zone); null if it never does.
 */
export function nextOfPattern(pattern: string, tz: string, now: number): string | null {
  try {
    const { CronExpressionParser } = require('cron-parser') as typeof import('cron-parser');
    return CronExpressionParser.parse(pattern, { tz, currentDate: new Date(now) }).next().toISOString();
  } catch {
    return null; // validated with the config: a pattern that stops firing (a date in the past) has no next run
  }
}
