import type { z } from '../vendor/zod.js';
import type { Redis } from 'ioredis';
import type { Logger } from '../log/logger.js';
import type { Config } from '../config/config.js';
import type { Clock } from '../time/instants.js';
import { usageError } from '../core/errors.js';
import type { Progress } from '../progress/progress.js';
import type { EngineName } from '../engines/contract.js';

/**
 * What every job gets besides its payload. The CLI (`memory-warden run JOB`) and the BullMQ worker build one
 * of these and call the same job function; neither reimplements a job.
 */
export interface JobContext {
  config: Config;
  log: Logger;
  /** The job's notion of "now": injected so tests never sleep and `--now` works. */
  now: Clock;
  signal: AbortSignal;
  /**
   * Set by the worker only: hand work out as tasks on its queues and wait for the results (drift's source reads,
   * one BullMQ job per memory). Without it a job does that work inline, as under `memory-warden run`.
   */
  dispatch?: TaskDispatch;
  /** Set by the worker only: which host it is, and what Redis knows of the other hosts (src/queue/fleet.ts). */
  fleet?: FleetView;
  /** Set by the CLI only, on a terminal: how far a long loop has got (src/progress/progress.ts). Never in the worker. */
  progress?: Progress;
}

export interface FleetView {
  host: string;
  /** The worker's Redis connection: fleet-wide records (the digest's exactly-once ledger) live there. */
  redis: Redis;
  /** A host's last heartbeat (ISO-8601), or null when none was ever seen. */
  lastSeen(host: string): Promise<string | null>;
}

/** What one task came to: its return value, or why it failed after its retries (or never ran: the job was stopped). */
export type TaskOutcome = { ok: true; value: unknown } | { ok: false; error: string; stopped?: boolean; timedOut?: boolean };

export interface TaskDispatch {
  /**
   * Run one task of `kind` per payload and wait for them all; outcomes in the payloads' order. How many run at once
   * is the task queue's business. When `signal` aborts, tasks not yet finished come back `stopped`; after
   * `timeoutMs`, `timedOut` (and a task no worker took yet is withdrawn). A kind routed by host takes each payload's
   * `host` and runs it only on a worker of that host.
   */
  runTasks(kind: string, payloads: readonly unknown[], opts: { signal: AbortSignal; timeoutMs?: number }): Promise<TaskOutcome[]>;
}

/**
 * What checks a job's payload: a zod schema, or anything with its `safeParse` (src/job/payload.ts `storePayload`,
 * which `check` runs with, without loading zod).
 */
export interface PayloadSchema<T = unknown> {
  safeParse(payload: unknown):
    | { success: true; data: T }
    | { success: false; error: { issues: readonly { path: readonly PropertyKey[]; message: string }[] } };
}

/** The payload a schema gives its job. */
export type PayloadOf<S> = S extends z.ZodType ? z.output<S> : S extends PayloadSchema<infer T> ? T : never;

/** A job: a plain async function of a payload checked on entry by its schema (old jobs outlive code changes). */
export interface JobDefinition<S extends PayloadSchema = z.ZodType, R = unknown> {
  name: string;
  /** Writes to the store: never runs beside another writer of the same store (prune, repair, drift, erase, restore). */
  writes: boolean;
  /**
   * The store engines it runs on (src/engines/registry.ts); unset: SQLite only. A store of another engine is refused
   * before the job runs (src/job/runner.ts), whichever process started it.
   */
  engines?: readonly EngineName[];
  /** `store`: one run per configured store, payload `{ store }`; `global`: one run for all stores (the digest). */
  scope?: 'store' | 'global';
  schema: S;
  run(payload: PayloadOf<S>, ctx: JobContext): Promise<R>;
  /**
   * The task kinds this job hands out through ctx.dispatch (drift's source reads, the fleet digest's sections).
   * The worker starts a task queue for each kind every job declares; nothing in the engine names a job's tasks.
   */
  tasks?(config: Config): TaskKind[];
  /** Checked once when the worker starts: a broken setup (a verifier plugin, a rule) fails the start, naming it. */
  prepare?(config: Config): Promise<void>;
  /**
   * Why a scheduled run of it would fail as configured (the digest without smtp), or null: the worker says so when
   * it starts, once, rather than only when the run fails; the other jobs are not held up by it.
   */
  unready?(config: Config): Promise<string | null>;
}

/** Every job, by name: what the CLI hands the runner and the worker (jobs/index.ts is the one in this build). */
export type JobMap = Readonly<Record<string, JobDefinition<any, any>>>;

/** A job imported only when it is run (src/commands/job-loaders.ts): `check` loads integrity, not the mailer. */
export interface JobLoader {
  (name: string): Promise<JobDefinition<any, any> | undefined>;
  /** Every job it can load, for the unknown-job error. */
  readonly names: readonly string[];
}

export interface TaskContext {
  log: Logger;
  /** Aborted when the worker is told to stop (shutdown timeout). */
  signal: AbortSignal;
  /** 1 for the first try. */
  attempt: number;
  /** No retry follows this attempt, whatever is thrown. */
  lastAttempt: boolean;
}

export interface TaskKind {
  name: string;
  /**
   * `host`: each payload names a host (`{ host, … }`) and only a worker of that host runs it (its file is there),
   * from the lane `<worker.queue>-<kind>.<host>`. Default: any worker, from `<worker.queue>-<kind>`.
   */
  route?: 'host';
  /** Tasks of this kind running at once: per worker process, and across all of them (BullMQ global concurrency). */
  concurrency: number;
  /** A transient error thrown here is retried with backoff (worker.attempts, worker.backoff); anything else fails the task for good. */
  run(payload: unknown, ctx: TaskContext): Promise<unknown>;
}

export function defineJob<S extends PayloadSchema, R>(job: JobDefinition<S, R>): JobDefinition<S, R> {
  return job;
}

/**
 * A payload that asks for a dry run (`dryRun: true`: prune, erase, restore): it changes nothing, so it is no run of
 * the job. It is not recorded in the state db, nor counted, nor published as the job's last success: a what-if
 * prune must not hide an overdue one (/healthz, the metrics, `fleet`, the digest's "prune ran").
 */
export function isDryRun(payload: unknown): boolean {
  return typeof payload === 'object' && payload !== null && (payload as { dryRun?: unknown }).dryRun === true;
}

/** Validate a payload; a wrong one is a permanent (usage) error naming the field. */
export function parsePayload<S extends PayloadSchema>(job: JobDefinition<S, unknown>, payload: unknown): PayloadOf<S> {
  const r = job.schema.safeParse(payload) as ReturnType<PayloadSchema<PayloadOf<S>>['safeParse']>;
  if (!r.success) {
    const issue = r.error.issues[0]!;
    throw usageError(`${job.name} payload: ${issue.path.map(String).join('.') || '(root)'}: ${issue.message}`);
  }
  return r.data;
}
