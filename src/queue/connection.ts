import { readFileSync } from 'node:fs';
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import { configError, transientError, type WardenError } from '../core/errors.js';
import type { RedisConfig } from './config.js';
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

/** What the client needs to find Redis: the URL, or the whole `redis` config (auth, TLS, Sentinel). */
export type RedisTarget = string | (Pick<RedisConfig, 'url'> & Partial<Omit<RedisConfig, 'url'>>);

const targetOf = (target: RedisTarget) => (typeof target === 'string' ? { url: target } : target);

/** How logs and errors name the Redis: the password-free URL, or the sentinels and master name. */
export function describeRedis(target: RedisTarget): string {
  const t = targetOf(target);
  if (t.cluster) return `cluster via ${t.cluster.nodes.map((n) => `${n.host}:${n.port}`).join(',')}`;
  if (t.sentinels) return `sentinel master "${t.name}" via ${t.sentinels.map((n) => `${n.host}:${n.port}`).join(',')}`;
  return redactRedisUrl(t.url);
}

/**
 * ioredis options beyond the URL. Given after the URL, they fill only what it leaves out (ioredis merges with
 * "first wins"), so a user or password in the URL stays as written. A CA file that cannot be read is a config
 * error naming the setting, not a TLS failure later.
 */
export function redisOptions(target: RedisTarget): RedisOptions {
  const t = targetOf(target);
  const opts: RedisOptions = {};
  if (t.username) opts.username = t.username;
  if (t.password) opts.password = t.password;
  if (t.tls?.caFile) {
    let ca: Buffer;
    try {
      ca = readFileSync(t.tls.caFile);
    } catch (err) {
      throw configError(`config redis.tls.caFile: cannot read ${t.tls.caFile} (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
    }
    opts.tls = { ca };
    if (t.sentinels) opts.enableTLSForSentinelMode = true;
  }
  if (t.sentinels) {
    opts.sentinels = t.sentinels.map((n) => ({ host: n.host, port: n.port }));
    opts.name = t.name;
    // A sentinel that answers with a stale master is asked again rather than trusted (ioredis checks ROLE).
    opts.sentinelRetryStrategy = (times) => Math.min(100 * 2 ** Math.min(times, 6), 2_000);
  }
  return opts;
}

/**
 * A Redis Cluster client, typed as the single-node client the rest of the queue code takes: every key memory-warden
 * and BullMQ touch holds the prefix's {hash tag} (redis.prefix is refused without one), so every command, script
 * and transaction goes to the one node that owns that slot, and the Cluster client answers them as Redis does.
 */
function clusterClient(t: Exclude<RedisTarget, string>, nodeOptions: RedisOptions, options: ClusterOptions): Redis {
  const { sentinels: _s, name: _n, ...perNode } = redisOptions(t);
  const cluster = new Cluster(t.cluster!.nodes.map((n) => ({ host: n.host, port: n.port })), {
    ...options,
    redisOptions: { ...perNode, ...nodeOptions },
  });
  return cluster as unknown as Redis;
}

/** TLS verification failures: the server's certificate is not signed by the CA we were told to trust. */
const CERT_CODES = /^(SELF_SIGNED_CERT_IN_CHAIN|DEPTH_ZERO_SELF_SIGNED_CERT|UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT(_LOCALLY)?|CERT_|ERR_TLS_CERT_ALTNAME_INVALID)/;

/**
 * A refusal that no retry will fix, as a config error naming the setting to change: a wrong password or user
 * (WRONGPASS, NOAUTH), or a certificate the configured CA does not vouch for. Undefined for anything else.
 */
function settingRefused(t: Exclude<RedisTarget, string>, cause: Error & { code?: string }): Error | undefined {
  const where = describeRedis(t);
  if (cause.code && CERT_CODES.test(cause.code)) {
    const setting = t.tls?.caFile ? 'redis.tls.caFile' : 'redis.tls.caFile (not set: the system CAs were used)';
    return configError(`config ${setting}: Redis at ${where} presented a certificate it does not vouch for (${cause.code})`);
  }
  const reply = cause.message.split('\n')[0]!;
  if (/^(WRONGPASS|NOAUTH|NOPERM)/.test(reply)) {
    const setting = t.password || t.username ? 'redis.username / redis.password' : 'redis.url (its user and password)';
    return configError(`config ${setting}: Redis at ${where} refused them (${reply.split(' ')[0]})`);
  }
  return undefined;
}

/**
 * The connection the queue uses: commands wait while Redis is away (maxRetriesPerRequest null, as BullMQ needs)
 * and the client reconnects forever with a capped backoff, so a Redis restart costs a pause, not a run.
 */
export function createRedis(target: RedisTarget, log?: Logger): Redis {
  const t = targetOf(target);
  const backoff = (times: number) => Math.min(200 * 2 ** Math.min(times, 6), 10_000);
  const redis = t.cluster
    ? clusterClient(t, { maxRetriesPerRequest: null }, { lazyConnect: true, clusterRetryStrategy: backoff })
    : new Redis(t.url, { ...redisOptions(t), maxRetriesPerRequest: null, lazyConnect: true, retryStrategy: backoff });
  let down = false;
  redis.on('error', (err: Error) => {
    // ioredis repeats the same error on every reconnect attempt; one line per outage is enough.
    if (!down) log?.error({ redis: describeRedis(t), err: err.message }, 'redis connection lost; retrying');
    down = true;
  });
  redis.on('ready', () => {
    if (down) log?.info({ redis: describeRedis(t) }, 'redis connection back');
    down = false;
  });
  return redis;
}

const HOW_TO_FIX =
  'start Redis (redis-server, or systemctl start redis-server) or point REDIS_URL / redis.url at one; ' +
  'to run one job without a queue use "memory-warden run <job>"';

/** Probes behind Sentinel: during a failover a sentinel may still name the dead primary for a few seconds. */
const SENTINEL_PROBES = 8;
const SENTINEL_PROBE_GAP_MS = 500;

/**
 * Fail fast at start: one attempt (a few, seconds apart, behind Sentinel while a failover settles), a short
 * timeout, and one line that names the (password-free) URL and what to do. Later outages are handled by
 * createRedis's reconnects instead.
 */
export async function assertRedisReachable(target: RedisTarget, timeoutMs = 3000): Promise<void> {
  const t = targetOf(target);
  for (let probe = 1; ; probe++) {
    try {
      return await probeOnce(t, timeoutMs);
    } catch (err) {
      const again = t.sentinels && probe < SENTINEL_PROBES && (err as WardenError).kind === 'transient';
      if (!again) throw err;
      await new Promise((r) => setTimeout(r, SENTINEL_PROBE_GAP_MS));
    }
  }
}

async function probeOnce(t: Exclude<RedisTarget, string>, timeoutMs: number): Promise<void> {
  const once: RedisOptions = { retryStrategy: () => null, maxRetriesPerRequest: 0, connectTimeout: timeoutMs };
  const probe = t.cluster
    ? clusterClient(t, once, { lazyConnect: true, clusterRetryStrategy: () => null, enableOfflineQueue: false })
    : new Redis(t.url, { ...redisOptions(t), ...once, lazyConnect: true, enableOfflineQueue: false });
  let socketError: (Error & { code?: string }) | undefined;
  probe.on('error', (err: Error) => (socketError ??= err)); // reported below, once
  try {
    await probe.connect();
    await probe.ping();
  } catch (err) {
    // connect() rejects with "Connection is closed."; the socket's own error (ECONNREFUSED, NOAUTH…) says why.
    const cause = (err as Error & { code?: string }).code ? (err as Error & { code?: string }) : (socketError ?? (err as Error & { code?: string }));
    const refused = settingRefused(t, cause);
    if (refused) throw refused;
    const reason = cause.code ?? cause.message.split('\n')[0];
    throw transientError(`cannot reach Redis at ${describeRedis(t)} (${reason}): ${HOW_TO_FIX}`, err);
  } finally {
    probe.disconnect();
  }
}

/** Connect a client made by createRedis, failing with the same one-line explanation when Redis is not there. */
export async function connectRedis(target: RedisTarget, log?: Logger): Promise<Redis> {
  await assertRedisReachable(target);
  const redis = createRedis(target, log);
  await redis.connect();
  return redis;
}
