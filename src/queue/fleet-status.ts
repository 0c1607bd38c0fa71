import type { Redis } from 'ioredis';
import type { Config } from '../config.js';
import type { JobDefinition } from '../job.js';
import { configuredHosts, storesOn } from './hosts.js';
import { isSilent, readHeartbeats, readSuccesses } from './fleet.js';
import { listSchedulers, planSchedulers, type SchedulerListing } from './schedules.js';
import { openHostQueue, openQueue } from './queues.js';

export interface FleetJob {
  job: string;
  store: string | null;
  lastSuccess: string | null;
  next: string | null;
  /** Its next run is past by more than worker.silentAfterMs: no worker of its host has taken it. */
  overdue: boolean;
}

export interface FleetHost {
  host: string;
  version: string | null;
  pid: number | null;
  lastSeen: string | null;
  /** Seen before, not stopped on purpose, and no heartbeat for worker.silentAfterMs. */
  silent: boolean;
  stopped: boolean;
  /** Never seen: no worker has run as this host on this Redis and prefix. */
  neverSeen: boolean;
  stores: { store: string; jobs: FleetJob[] }[];
}

export interface FleetStatus {
  now: string;
  prefix: string;
  hosts: FleetHost[];
  /** Jobs for every store at once (the digest), on the shared queue. */
  global: FleetJob[];
  silent: string[];
  overdue: FleetJob[];
}

/** Every host the config names or Redis has seen, with its stores, their jobs' last success and next run. Reads only. */
export async function fleetStatus(config: Config, redis: Redis, jobs: Record<string, JobDefinition<any, any>>, now: number): Promise<FleetStatus> {
  const beats = new Map((await readHeartbeats(redis, config.redis.prefix)).map((b) => [b.host, b]));
  const successes = await readSuccesses(redis, config.redis.prefix);
  const hosts = [...new Set([...configuredHosts(config), ...beats.keys()])].sort();
  const queues = [{ host: null, queue: openQueue(config, redis) }, ...hosts.map((host) => ({ host, queue: openHostQueue(config, redis, host) }))];
  let listing: SchedulerListing[];
  try {
    listing = await listSchedulers(queues, planSchedulers(config, jobs));
  } finally {
    await Promise.all(queues.map((q) => q.queue.close().catch(() => {})));
  }
  const grace = config.worker.silentAfterMs;
  const jobOf = (s: SchedulerListing): FleetJob => ({
    job: s.job,
    store: s.store,
    lastSuccess: successes[s.store === null ? s.job : `${s.job}:${s.store}`] ?? null,
    next: s.next,
    overdue: s.inConfig && s.next !== null && Date.parse(s.next) < now - grace,
  });
  const inConfig = listing.filter((s) => s.inConfig);
  const out: FleetHost[] = hosts.map((host) => {
    const beat = beats.get(host);
    const stores = [...new Set([...storesOn(config, host), ...(beat?.stores ?? [])])].sort();
    return {
      host,
      version: beat?.version ?? null,
      pid: beat?.pid ?? null,
      lastSeen: beat?.lastSeen ?? null,
      silent: beat ? isSilent(beat, now, grace) : false,
      stopped: beat?.stopped ?? false,
      neverSeen: !beat,
      stores: stores.map((store) => ({ store, jobs: inConfig.filter((s) => s.store === store && s.host === host).map(jobOf) })),
    };
  });
  const global = inConfig.filter((s) => s.store === null).map(jobOf);
  const all = [...global, ...out.flatMap((h) => h.stores.flatMap((s) => s.jobs))];
  return {
    now: new Date(now).toISOString(),
    prefix: config.redis.prefix,
    hosts: out,
    global,
    silent: out.filter((h) => h.silent).map((h) => h.host),
    overdue: all.filter((j) => j.overdue),
  };
}
