import type { Redis } from 'ioredis';
import type { Config } from '../config/config.js';
import type { JobDefinition } from '../job/job.js';
import { fleetStores, hostOfStore, reachesEveryHost, storesOn, thisHost } from './hosts.js';
import { isSilent, readHeartbeats, readSuccesses } from './fleet.js';
import { listSchedulers, planSchedulers, type SchedulerListing } from './schedules.js';
import { openQueueToRead } from './queues.js';

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
  /**
   * Not stopped on purpose, and: no heartbeat for worker.silentAfterMs, one whose time says nothing (does not parse,
   * or is ahead of this clock), or never seen at all. Nobody knows what such a host is doing.
   */
  silent: boolean;
  stopped: boolean;
  /** Never seen: no worker has run as this host on this Redis and prefix (also silent). */
  neverSeen: boolean;
  stores: { store: string; jobs: FleetJob[] }[];
}

export interface FleetStatus {
  now: string;
  prefix: string;
  hosts: FleetHost[];
  /** Jobs for every store at once (the digest), on the shared queue. */
  global: FleetJob[];
  /** Stores every host reaches (a PostgreSQL database): their jobs are on the shared queue, run by any one worker. */
  anyHost: { store: string; jobs: FleetJob[] }[];
  silent: string[];
  overdue: FleetJob[];
}

/**
 * Every host a configured store lives on or a heartbeat names, with its stores, their jobs' last success and next
 * run. Reads only: it writes no key (its queues are opened to read, src/queue/queues.ts). The machine running it is
 * not a host of the fleet unless a store lives there or a worker ran as it.
 */
export async function fleetStatus(config: Config, redis: Redis, jobs: Record<string, JobDefinition<any, any>>, now: number): Promise<FleetStatus> {
  const beats = new Map((await readHeartbeats(redis, config.redis.prefix)).map((b) => [b.host, b]));
  const successes = await readSuccesses(redis, config.redis.prefix);
  thisHost(config); // a host name given to this machine that is none is refused, though this machine need be no host
  const configured = new Set(Object.keys(config.stores).filter((s) => !reachesEveryHost(config, s)).map((s) => hostOfStore(config, s)));
  const hosts = [...new Set([...configured, ...beats.keys()])].sort();
  const queues = [null, ...hosts].map((host) => ({ host, queue: openQueueToRead(config, redis, host) }));
  let listing: SchedulerListing[];
  try {
    listing = await listSchedulers(queues, planSchedulers(config, jobs), now);
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
      silent: beat ? isSilent(beat, now, grace) : configured.has(host),
      stopped: beat?.stopped ?? false,
      neverSeen: !beat,
      stores: stores.map((store) => ({ store, jobs: inConfig.filter((s) => s.store === store && s.host === host).map(jobOf) })),
    };
  });
  const global = inConfig.filter((s) => s.store === null).map(jobOf);
  const anyHost = fleetStores(config).map((store) => ({ store, jobs: inConfig.filter((s) => s.store === store && s.host === null).map(jobOf) }));
  const all = [...global, ...anyHost.flatMap((s) => s.jobs), ...out.flatMap((h) => h.stores.flatMap((s) => s.jobs))];
  return {
    now: new Date(now).toISOString(),
    prefix: config.redis.prefix,
    hosts: out,
    global,
    anyHost,
    silent: out.filter((h) => h.silent).map((h) => h.host),
    overdue: all.filter((j) => j.overdue),
  };
}
