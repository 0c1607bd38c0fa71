import { hostname } from 'node:os';
import type { Config } from '../config/config.js';
import { configError } from '../core/errors.js';
import { reachOf } from '../engines/registry.js';

/**
 * Where a store lives. Every store belongs to one host, the machine that holds its file: `host:` in the store's
 * config, or, without it, the machine reading the config. A worker is one host (`worker --host NAME`,
 * `worker.host`, MEMORY_WARDEN_HOST, else the machine's name) and takes only its own stores' jobs, from its own
 * queue, `<worker.queue>.<host>`; jobs for every store at once (the digest) stay on `<worker.queue>`. A store whose
 * engine reaches every host (a PostgreSQL database: its engine's `reach` is `fleet`) belongs to no host: its jobs go
 * to the shared queue, which every worker takes from, and run once across the fleet (src/job/runner.ts).
 */
export const HOST_NAME = /^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,62}$/;

/** The host this process is. */
export function thisHost(config: Config, env: NodeJS.ProcessEnv = process.env): string {
  const name = config.worker.host ?? (env.MEMORY_WARDEN_HOST || hostname().split('.')[0] || 'localhost');
  if (!HOST_NAME.test(name)) throw configError(`host "${name}": a host name is letters, digits, _ . - (at most 63), as in worker --host or MEMORY_WARDEN_HOST`);
  return name;
}

/** Whether `store` is reachable from every host (its engine's reach is `fleet`): then it belongs to no host. */
export function reachesEveryHost(config: Config, store: string): boolean {
  const s = config.stores[store];
  return s !== undefined && reachOf(s) === 'fleet';
}

/** The stores every host reaches, sorted: any worker runs their jobs, from the shared queue. */
export function fleetStores(config: Config): string[] {
  return Object.keys(config.stores).filter((s) => reachesEveryHost(config, s)).sort();
}

/** The stores that live on a host (files on one machine), sorted. */
function hostStores(config: Config): string[] {
  return Object.keys(config.stores).filter((s) => !reachesEveryHost(config, s)).sort();
}

/**
 * The host whose queue takes a job for `store`, or null for the shared queue: a store on a host, that host; a store
 * every host reaches, none (any worker); a job of every store at once (`store` null), where globalHost says.
 */
export function queueHostOf(config: Config, store: string | null, env: NodeJS.ProcessEnv = process.env): string | null {
  if (store === null) return globalHost(config, env);
  return reachesEveryHost(config, store) ? null : hostOfStore(config, store, env);
}

/** The host that holds `store` (a store every host reaches: this one, where it is opened from). */
export function hostOfStore(config: Config, store: string, env: NodeJS.ProcessEnv = process.env): string {
  return config.stores[store]?.host ?? thisHost(config, env);
}

/**
 * The host that holds `store` when that is not this machine, else null: the file at the store's path here is then
 * not that store. What every command (src/commands/common.ts) and the review page decide a store by.
 */
export function storeElsewhere(config: Config, store: string, env: NodeJS.ProcessEnv = process.env): string | null {
  if (config.stores[store]?.host === undefined) return null;
  const host = hostOfStore(config, store, env);
  return host === thisHost(config, env) ? null : host;
}

/** Every host the config names, this one included, sorted. */
export function configuredHosts(config: Config, env: NodeJS.ProcessEnv = process.env): string[] {
  return [...new Set([thisHost(config, env), ...hostStores(config).map((s) => hostOfStore(config, s, env))])].sort();
}

/** The queue of one host's store jobs. */
export function hostQueueName(config: Config, host: string): string {
  return `${config.worker.queue}.${host}`;
}

/** The stores `host` holds (a store every host reaches is held by none). */
export function storesOn(config: Config, host: string, env: NodeJS.ProcessEnv = process.env): string[] {
  return hostStores(config).filter((s) => hostOfStore(config, s, env) === host);
}

/**
 * Where a job for every store at once (the digest) runs: on the one host that holds every store, when there is
 * one (it reads them all there, and keeps its records in that host's state db; stores every host reaches are read
 * from there too); on any worker, from the shared queue, when the stores live on several hosts (src/digest/fleet.ts)
 * or on none.
 */
export function globalHost(config: Config, env: NodeJS.ProcessEnv = process.env): string | null {
  const hosts = new Set(hostStores(config).map((s) => hostOfStore(config, s, env)));
  return hosts.size === 1 ? [...hosts][0]! : null;
}
