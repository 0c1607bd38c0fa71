import { createRequire } from 'node:module';
import { z } from '../vendor/zod.js';
import { timerDuration } from '../time/timer-duration.js';
import { pathField } from '../config/path-field.js';

const require = createRequire(import.meta.url);

/** A time zone Intl (and so cron-parser, through luxon-free Date math) knows: IANA names and UTC. */
export function isTimeZone(tz: string): boolean {
  // The default, answered without Intl: a first DateTimeFormat loads ICU's zone data (~100 ms of every start-up).
  if (tz === 'UTC') return true;
  // Node 24's Intl takes a bare UTC offset ("+02:00") as a zone; cron-parser's luxon and the docs want an IANA name.
  if (/^[+-]/.test(tz)) return false;
  try {
    new Intl.DateTimeFormat('en', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

const timeZone = z.string().min(1).refine(isTimeZone, { message: 'not a time zone (an IANA name such as Europe/Rome, or UTC)' });

/**
 * Checked the way BullMQ will read it when the worker starts (the same cron-parser, parse then next), so a bad
 * pattern fails `config` and `schedule` naming its schedule, not the worker hours later.
 */
const cronPattern = z.string().min(1).superRefine((pattern, ctx) => {
  if (DEFAULT_PATTERNS.has(pattern)) return; // test/cli-startup.test.ts parses each of them with cron-parser
  try {
    // Loaded only for a pattern of the user's: cron-parser and luxon cost every command ~60 ms to load.
    const { CronExpressionParser } = require('cron-parser') as typeof import('cron-parser');
    CronExpressionParser.parse(pattern, { tz: 'UTC' }).next();
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: `not a cron pattern: ${(err as Error).message}` });
  }
});

const redisNode = z.strictObject({
  host: z.string().min(1),
  port: z.number().int().min(1).max(65_535),
});

export const redisSchema = z
  .strictObject({
    url: z.string().default('redis://127.0.0.1:6379'),
    /** Key prefix of every queue; wrap in {braces} for Redis Cluster hash tags. */
    prefix: z.string().min(1).default('memory-warden'),
    /** An ACL user (Redis 6+); the URL's user when absent. */
    username: z.string().min(1).optional(),
    /** Write it as `${REDIS_PASSWORD}`: a value from the environment is a secret, kept out of logs and output. */
    password: z.string().min(1).optional(),
    /** For `rediss://` URLs: the CA that signed the server's certificate (else the system's CAs). */
    tls: z.strictObject({ caFile: pathField().optional() }).optional(),
    /** Sentinel: where the sentinels listen and the master name they watch; the URL's host is then unused. */
    sentinels: z.array(redisNode).min(1).optional(),
    name: z.string().min(1).optional(),
    /**
     * Replicas that must acknowledge the fleet digest's claim (Redis WAIT) before any mail goes out; default 1
     * with sentinels, else 0. A claim they do not acknowledge within claimWaitMs is given up and retried.
     */
    claimReplicas: z.number().int().nonnegative().optional(),
    claimWaitMs: z.number().int().positive().default(2000),
    /** Redis Cluster: nodes to start from (any primaries); the prefix must hold a {hash tag}. */
    cluster: z.strictObject({ nodes: z.array(redisNode).min(1) }).optional(),
  })
  .superRefine((redis, ctx) => {
    const problem = redisDeploymentProblem(redis);
    if (problem) ctx.addIssue({ code: 'custom', path: [problem.field], message: problem.message });
  });

/**
 * A deployment the client cannot reach as written: a sentinel list without the master name (or the reverse),
 * both Sentinel and Cluster, or a Cluster prefix without a hash tag, with which BullMQ's keys of one queue would
 * land on several slots and its multi-key scripts fail (CROSSSLOT) at the first job.
 */
export function redisDeploymentProblem(redis: { prefix: string; sentinels?: unknown[]; name?: string; cluster?: unknown }): { field: string; message: string } | undefined {
  if (redis.sentinels && !redis.name) return { field: 'name', message: 'the master name the sentinels watch (sentinels are set)' };
  if (redis.name && !redis.sentinels) return { field: 'sentinels', message: 'the sentinels that watch master "' + redis.name + '" (name is set)' };
  if (redis.cluster && redis.sentinels) return { field: 'cluster', message: 'either cluster or sentinels, not both' };
  if (redis.cluster && hashTag(redis.prefix) === undefined) {
    return { field: 'prefix', message: `"${redis.prefix}" has no {hash tag}: on Redis Cluster a queue's keys would spread over slots; write e.g. "{${redis.prefix.replace(/[{}]/g, '') || 'memory-warden'}}"` };
  }
  return undefined;
}

/** How durable the fleet digest's claim is made (src/digest/ledger.ts): replicas to acknowledge it, and how long to wait. */
export function claimDurability(redis: { claimReplicas?: number; claimWaitMs: number; sentinels?: unknown[] }): { replicas: number; waitMs: number } {
  return { replicas: redis.claimReplicas ?? (redis.sentinels ? 1 : 0), waitMs: redis.claimWaitMs };
}

/** The part of a key Redis Cluster hashes: the text inside the first `{…}` when it is not empty (CLUSTER KEYSLOT's rule). */
export function hashTag(key: string): string | undefined {
  const open = key.indexOf('{');
  if (open === -1) return undefined;
  const close = key.indexOf('}', open + 1);
  if (close === -1 || close === open + 1) return undefined;
  return key.slice(open + 1, close);
}

/**
 * When one job runs. `pattern` is cron (5 fields, or 6 with seconds first) in `tz` (default worker.timezone);
 * `every` (milliseconds) replaces the pattern when set. A job named here but not (yet) in this build's JOBS is
 * skipped with a warning, so a config can name jobs that a newer release brings.
 */
export const scheduleSchema = z.strictObject({
  enabled: z.boolean().default(true),
  pattern: cronPattern.optional(),
  every: z.number().int().positive().optional(),
  tz: timeZone.optional(),
});

export const DEFAULT_SCHEDULES = {
  snapshot: { enabled: true, pattern: '0 2 * * *' },
  prune: { enabled: true, pattern: '30 2 * * *' },
  integrity: { enabled: true, pattern: '0 3 * * *' },
  digest: { enabled: true, pattern: '0 7 * * *' },
  drift: { enabled: true, pattern: '0 9 * * 1' },
} as const;

/** The default schedules' patterns: known good, so validating the defaults needs no cron parser. */
export const DEFAULT_PATTERNS: ReadonlySet<string> = new Set(Object.values(DEFAULT_SCHEDULES).map((s) => s.pattern));

/** BullMQ's KeepJobs: keep at most `count` finished jobs, and none older than `ageSeconds` when set. */
const keepSchema = z.strictObject({
  count: z.number().int().nonnegative(),
  ageSeconds: z.number().int().positive().optional(),
});

export const workerSchema = z.strictObject({
  /**
   * The host this worker is (src/queue/hosts.ts): it runs only the jobs of stores on this host. Default: `worker
   * --host`, else MEMORY_WARDEN_HOST, else the machine's name.
   */
  host: z.string().regex(/^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,62}$/, 'a host name of letters, digits, _ . - (at most 63)').optional(),
  /** Every worker writes a heartbeat to Redis this often (`memory-warden fleet`, /metrics). */
  heartbeatMs: timerDuration('ms').int().min(100).default(10_000),
  /** A host whose last heartbeat is older than this is silent: `fleet`, /metrics and the digest name it. */
  silentAfterMs: z.number().int().min(1000).default(120_000),
  timezone: timeZone.default('UTC'),
  /** The BullMQ queue every job goes through; its keys are `<redis.prefix>:<queue>:…`. */
  queue: z.string().regex(/^[A-Za-z0-9_.-]+$/, 'a queue name of letters, digits, _ . -').default('maintenance'),
  schedules: z
    .record(z.string().min(1), scheduleSchema)
    .default(DEFAULT_SCHEDULES)
    .refine((all) => Object.values(all).every((s) => !s.enabled || s.pattern !== undefined || s.every !== undefined), {
      message: 'an enabled schedule needs a cron pattern or every (milliseconds)',
    }),
  /** Jobs one worker process runs at once. Writers of one store still never overlap (the store lock). */
  concurrency: z.number().int().positive().default(2),
  /** Tries per job, the first included; only transient failures are retried. */
  attempts: z.number().int().positive().default(5),
  backoff: z
    .strictObject({
      type: z.enum(['exponential', 'fixed']).default('exponential'),
      delayMs: z.number().int().nonnegative().default(30_000),
    })
    .prefault({}),
  removeOnComplete: keepSchema.default({ count: 200, ageSeconds: 7 * 86_400 }),
  removeOnFail: keepSchema.default({ count: 1000 }),
  /** On SIGTERM/SIGINT, how long running jobs may take to finish before they are told to stop. */
  shutdownTimeoutMs: timerDuration('ms').int().nonnegative().default(300_000),
  /** BullMQ's job lock: renewed while the job runs; a job whose lock lapses (its worker died) runs again. */
  lockDurationMs: timerDuration('ms').int().positive().default(30_000),
  stalledIntervalMs: timerDuration('ms').int().positive().default(30_000),
  /** How often one job may be recovered from a dead worker before it is failed for good. */
  maxStalledCount: z.number().int().nonnegative().default(2),
  /** The Redis-held per-store lock writers take (on top of the OS lock on this machine). */
  storeLock: z
    .strictObject({
      /** Expiry; extended every third of it while the job runs, so a crashed holder frees it within ttlMs. */
      ttlMs: timerDuration('ms').int().min(100).default(60_000),
      /** How long a writer waits for the lock before failing transiently (and being retried with backoff). */
      waitMs: z.number().int().nonnegative().default(60_000),
    })
    .prefault({}),
  http: z
    .strictObject({
      enabled: z.boolean().default(true),
      host: z.string().min(1).default('127.0.0.1'),
      /** 0 picks a free port (tests); the bound address is logged. */
      port: z.number().int().min(0).max(65_535).default(9477),
    })
    .prefault({}),
});

export type RedisConfig = z.infer<typeof redisSchema>;
export type WorkerConfig = z.infer<typeof workerSchema>;
export type ScheduleConfig = z.infer<typeof scheduleSchema>;
