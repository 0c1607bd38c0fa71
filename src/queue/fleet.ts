import type { Redis } from 'ioredis';

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

export async function readHeartbeats(redis: Redis, prefix: string): Promise<Heartbeat[]> {
  const all = await redis.hgetall(hostsKey(prefix));
  const beats: Heartbeat[] = [];
  for (const raw of Object.values(all)) {
    try {
      beats.push(JSON.parse(raw) as Heartbeat);
    } catch {
      // a value another release wrote in a form this one does not read: skip it rather than fail the listing
    }
  }
  return beats.sort((a, b) => a.host.localeCompare(b.host));
}

/** `<job>:<store>` (or `<job>` for a global job) → when it last succeeded, ISO-8601 UTC. */
export async function recordSuccess(redis: Redis, prefix: string, job: string, store: string | null, at: Date): Promise<void> {
  await redis.hset(successKey(prefix), store === null ? job : `${job}:${store}`, at.toISOString());
}

export async function readSuccesses(redis: Redis, prefix: string): Promise<Record<string, string>> {
  return redis.hgetall(successKey(prefix));
}

/** Silent: no heartbeat for `silentAfterMs`, and not stopped on purpose. */
export function isSilent(beat: Heartbeat, now: number, silentAfterMs: number): boolean {
  return !beat.stopped && now - Date.parse(beat.lastSeen) > silentAfterMs;
}
