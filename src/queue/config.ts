import { createRequire } from 'node:module';
import { z } from '../vendor/zod.js';
import { timerDuration } from '../time/timer-duration.js';
import { pathField } from '../config/path-field.js';
import { secretField } from '../config/secret-fields.js';

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
  host: z.string().min(1).describe('Host name or address.'),
  port: z.number().int().min(1).max(65_535).describe('Port.'),
});

export const redisSchema = z
  .strictObject({
    url: secretField('url').default('redis://127.0.0.1:6379')
      .describe('Redis URL (`redis://`, or `rediss://` for TLS): `${REDIS_URL}`, or with its password from the environment (`redis://:${REDIS_PASSWORD}@host:6379`); never logged or printed.'),
    prefix: z.string().min(1).default('memory-warden')
      .describe('Key prefix of every queue; wrap in {braces} for Redis Cluster hash tags.'),
    username: z.string().min(1).optional().describe('An ACL user (Redis 6+); the URL\'s user when absent.'),
    password: secretField().min(1).optional()
      .describe('Write it as `${REDIS_PASSWORD}`: a value from the environment is a secret, kept out of logs and output.'),
    tls: z.strictObject({ caFile: pathField().optional().describe('PEM file of the CA that signed the server\'s certificate.') }).optional()
      .describe('For `rediss://` URLs: the CA that signed the server\'s certificate (else the system\'s CAs).'),
    sentinels: z.array(redisNode).min(1).optional()
      .describe('Sentinel: where the sentinels listen and the master name they watch; the URL\'s host is then unused.'),
    name: z.string().min(1).optional().describe('The master name the sentinels watch; goes with `sentinels`.'),
    claimReplicas: z.number().int().nonnegative().optional()
      .describe('Replicas that must acknowledge the fleet digest\'s claim (Redis WAIT) before any mail goes out; default 1 with sentinels, else 0. A claim they do not acknowledge within claimWaitMs is given up and retried.'),
    claimWaitMs: z.number().int().positive().default(2000)
      .describe('How long the digest waits for `claimReplicas` replicas to acknowledge its claim.'),
    cluster: z.strictObject({ nodes: z.array(redisNode).min(1).describe('Cluster nodes to start from.') }).optional()
      .describe('Redis Cluster: nodes to start from (any primaries); the prefix must hold a {hash tag}.'),
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
  enabled: z.boolean().default(true).describe('false drops the job from the schedule.'),
  pattern: cronPattern.optional()
    .describe('Cron pattern (5 fields, or 6 with seconds first), in `worker.timezone` or `tz`.'),
  every: z.number().int().positive().optional().describe('Run every this many milliseconds instead of a cron pattern.'),
  tz: timeZone.optional().describe('Time zone of this schedule\'s pattern, overriding `worker.timezone`.'),
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
  count: z.number().int().nonnegative().describe('At most this many jobs kept in Redis.'),
  ageSeconds: z.number().int().positive().optional().describe('Jobs older than this are dropped from Redis.'),
});

export const workerSchema = z.strictObject({
  host: z.string().regex(/^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,62}$/, 'a host name of letters, digits, _ . - (at most 63)').optional()
    .describe('The host this worker is (src/queue/hosts.ts): it runs only the jobs of stores on this host. Default: `worker --host`, else MEMORY_WARDEN_HOST, else the machine\'s name.'),
  heartbeatMs: timerDuration('ms').int().min(100).default(10_000)
    .describe('Every worker writes a heartbeat to Redis this often (`memory-warden fleet`, /metrics).'),
  silentAfterMs: z.number().int().min(1000).default(120_000)
    .describe('A host whose last heartbeat is older than this is silent: `fleet`, /metrics and the digest name it.'),
  timezone: timeZone.default('UTC').describe('Time zone of the cron patterns (IANA name, e.g. Europe/Rome).'),
  queue: z.string().regex(/^[A-Za-z0-9_.-]+$/, 'a queue name of letters, digits, _ . -').default('maintenance')
    .describe('The BullMQ queue every job goes through; its keys are `<redis.prefix>:<queue>:…`.'),
  schedules: z
    .record(z.string().min(1), scheduleSchema)
    .default(DEFAULT_SCHEDULES)
    .refine((all) => Object.values(all).every((s) => !s.enabled || s.pattern !== undefined || s.every !== undefined), {
      message: 'an enabled schedule needs a cron pattern or every (milliseconds)',
    }),
  concurrency: z.number().int().positive().default(2)
    .describe('Jobs one worker process runs at once. Writers of one store still never overlap (the store lock).'),
  attempts: z.number().int().positive().default(5)
    .describe('Tries per job, the first included; only transient failures are retried.'),
  backoff: z
    .strictObject({
      type: z.enum(['exponential', 'fixed']).default('exponential')
        .describe('exponential doubles the delay after each failed try; fixed keeps it.'),
      delayMs: z.number().int().nonnegative().default(30_000)
        .describe('First retry after this; exponential doubles it each time.'),
    })
    .prefault({}),
  removeOnComplete: keepSchema.default({ count: 200, ageSeconds: 7 * 86_400 }),
  removeOnFail: keepSchema.default({ count: 1000 }),
  shutdownTimeoutMs: timerDuration('ms').int().nonnegative().default(300_000)
    .describe('On SIGTERM/SIGINT, how long running jobs may take to finish before they are told to stop.'),
  lockDurationMs: timerDuration('ms').int().positive().default(30_000)
    .describe('BullMQ\'s job lock: renewed while the job runs; a job whose lock lapses (its worker died) runs again.'),
  stalledIntervalMs: timerDuration('ms').int().positive().default(30_000)
    .describe('How often workers look for jobs whose worker died.'),
  maxStalledCount: z.number().int().nonnegative().default(2)
    .describe('How often one job may be recovered from a dead worker before it is failed for good.'),
  storeLock: z
    .strictObject({
      /** Expiry; extended every third of it while the job runs, so a crashed holder frees it within ttlMs. */
      ttlMs: timerDuration('ms').int().min(100).default(60_000)
        .describe('Expiry of the Redis-held per-store writer lock, extended while the job runs: a crashed holder frees it within this.'),
      /** How long a writer waits for the lock before failing transiently (and being retried with backoff). */
      waitMs: z.number().int().nonnegative().default(60_000)
        .describe('A writer waits this long for a busy store, then fails transiently (and is retried).'),
    })
    .prefault({}).describe('The Redis-held per-store lock writers take (on top of the OS lock on this machine).'),
  http: z
    .strictObject({
      enabled: z.boolean().default(true).describe('Serve /metrics (Prometheus) and /healthz.'),
      host: z.string().min(1).default('127.0.0.1')
        .describe('Address /metrics and /healthz listen on (loopback by default).'),
      port: z.number().int().min(0).max(65_535).default(9477)
        .describe('0 picks a free port (tests); the bound address is logged.'),
    })
    .prefault({}),
});

export type RedisConfig = z.infer<typeof redisSchema>;
export type WorkerConfig = z.infer<typeof workerSchema>;
export type ScheduleConfig = z.infer<typeof scheduleSchema>;
