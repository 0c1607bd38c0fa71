import type { Redis } from 'ioredis';
import { HOST_NAME } from './hosts.js';

/**
 * The fleet's shared view, in Redis beside the queues (so under the same prefix and, on Redis Cluster, the same
 * hash tag): each host's heartbeat, and each store job's last success wherever it ran. `memory-warden fleet`,
 * /metrics and the digest read it; nothing coordinates through it (BullMQ does that).
 */
export interface Heartbeat {
  host: string;
  version: string;
  pid: number;
  startedAt: string;
  /** ISO-8601 UTC. */
  lastSeen: string;
  stores: string[];
  /** Set by a worker that shut down cleanly: it is not silent, it is stopped. */
  stopped?: boolean;
}

const hostsKey = (prefix: string) => `${prefix}:fleet:hosts`;
const successKey = (prefix: string) => `${prefix}:fleet:last-success`;

export async function writeHeartbeat(redis: Redis, prefix: string, beat: Heartbeat): Promise<void> {
  await redis.hset(hostsKey(prefix), beat.host, JSON.stringify(beat));
}

/**
 * Every heartbeat that reads as one: under its own host's field, a host name, a time and a list of stores. Anything
 * else in the hash (another release's form, a forged entry) is left out: its host then counts as never seen.
 */
export async function readHeartbeats(redis: Redis, prefix: string): Promise<Heartbeat[]> {
  const all = await redis.hgetall(hostsKey(prefix));
  const beats: Heartbeat[] = [];
  for (const [field, raw] of Object.entries(all)) {
    const beat = parseHeartbeat(raw);
    if (beat && beat.host === field && HOST_NAME.test(field)) beats.push(beat);
  }
  return beats.sort((a, b) => a.host.localeCompare(b.host));
}

function parseHeartbeat(raw: string): Heartbeat | null {
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    return null;
  }
  if (!v || typeof v !== 'object') return null;
  const b = v as Record<string, unknown>;
  if (typeof b.host !== 'string' || typeof b.lastSeen !== 'string') return null;
  return {
    host: b.host,
    version: typeof b.version === 'string' ? b.version : '?',
    pid: typeof b.pid === 'number' ? b.pid : 0,
    startedAt: typeof b.startedAt === 'string' ? b.startedAt : '',
    lastSeen: b.lastSeen,
    stores: Array.isArray(b.stores) ? b.stores.filter((s): s is string => typeof s === 'string') : [],
    ...(b.stopped === true ? { stopped: true } : {}),
  };
}

/**
 * Sets each `<job>:<store>` (or `<job>` for a job of every store) → ISO-8601 UTC time to the later of the time given
 * and the one already there, in one step: two workers publishing the digest's last success never put back an older
 * one. Workers publish what their state db says (src/state/state.ts lastSuccesses), the one record of it.
 */
export async function publishSuccesses(redis: Redis, prefix: string, successes: Record<string, string>): Promise<void> {
  const args = Object.entries(successes).flat();
  if (args.length === 0) return;
  await redis.eval(LATER_OF, 1, successKey(prefix), ...args);
}

const LATER_OF = `for i = 1, #ARGV, 2 do
  local now = redis.call('HGET', KEYS[1], ARGV[i])
  if (not now) or now < ARGV[i + 1] then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 1`;

export async function readSuccesses(redis: Redis, prefix: string): Promise<Record<string, string>> {
  return redis.hgetall(successKey(prefix));
}

/**
 * Silent: not stopped on purpose, and no heartbeat for `silentAfterMs`, or one whose time says nothing (does not
 * parse, or lies further ahead of this clock than silentAfterMs): when it was last seen is unknown, so it is not up.
 */
export function isSilent(beat: Heartbeat, now: number, silentAfterMs: number): boolean {
  if (beat.stopped) return false;
  const seen = heartbeatTime(beat.lastSeen);
  return seen === null || now - seen > silentAfterMs || seen - now > silentAfterMs;
}

/** A heartbeat's time as workers write it (ISO-8601 UTC, toISOString); anything else is no time at all. */
export function heartbeatTime(text: string): number | null {
  if (!/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z$/.test(text)) return null;
  const t = Date.parse(text);
  return Number.isFinite(t) ? t : null;
}
