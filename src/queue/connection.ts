import { Redis } from 'ioredis';
import { transientError } from '../core/errors.js';
import type { Logger } from '../log/logger.js';

/** `redis://user:secret@host:6379/0` → `redis://user:***@host:6379/0`: the only form of a Redis URL we print. */
export function redactRedisUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return url.replace(/\/\/([^@/]*)@/, (_, auth: string) => `//${auth.includes(':') ? auth.split(':')[0] + ':***' : '***'}@`);
  }
}

/**
 * The connection the queue uses: commands wait while Redis is away (maxRetriesPerRequest null, as BullMQ needs)
 * and the client reconnects forever with a capped backoff, so a Redis restart costs a pause, not a run.
 */
export function createRedis(url: string, log?: Logger): Redis {
  const redis = new Redis(url, {
    maxRetriesPerRequest: null,
    lazyConnect: true,
    retryStrategy: (times) => Math.min(200 * 2 ** Math.min(times, 6), 10_000),
  });
  let down = false;
  redis.on('error', (err: Error) => {
    // ioredis repeats the same error on every reconnect attempt; one line per outage is enough.
    if (!down) log?.error({ redis: redactRedisUrl(url), err: err.message }, 'redis connection lost; retrying');
    down = true;
  });
  redis.on('ready', () => {
    if (down) log?.info({ redis: redactRedisUrl(url) }, 'redis connection back');
    down = false;
  });
  return redis;
}

const HOW_TO_FIX =
  'start Redis (redis-server, or systemctl start redis-server) or point REDIS_URL / redis.url at one; ' +
  'to run one job without a queue use "memory-warden run <job>"';

/**
 * Fail fast at start: one attempt, a short timeout, and one line that names the (password-free) URL and what to
 * do. Later outages are handled by createRedis's reconnects instead.
 */
export async function assertRedisReachable(url: string, timeoutMs = 3000): Promise<void> {
  const probe = new Redis(url, { lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0, connectTimeout: timeoutMs, enableOfflineQueue: false });
  let socketError: (Error & { code?: string }) | undefined;
  probe.on('error', (err: Error) => (socketError ??= err)); // reported below, once
  try {
    await probe.connect();
    await probe.ping();
  } catch (err) {
    // connect() rejects with "Connection is closed."; the socket's own error (ECONNREFUSED, NOAUTH…) says why.
    const cause = (err as Error & { code?: string }).code ? (err as Error & { code?: string }) : (socketError ?? (err as Error & { code?: string }));
    const reason = cause.code ?? cause.message.split('\n')[0];
    throw transientError(`cannot reach Redis at ${redactRedisUrl(url)} (${reason}): ${HOW_TO_FIX}`, err);
  } finally {
    probe.disconnect();
  }
}

/** Connect a client made by createRedis, failing with the same one-line explanation when Redis is not there. */
export async function connectRedis(url: string, log?: Logger): Promise<Redis> {
  await assertRedisReachable(url);
  const redis = createRedis(url, log);
  await redis.connect();
  return redis;
}
