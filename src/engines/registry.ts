import type { EngineName, StoreEngine } from './contract.js';
import { usageError, type WardenError } from '../core/errors.js';

export type { AnyStoreHandle, EngineName, StoreEngine } from './contract.js';

/**
 * Every store engine, by the name a store's `engine:` takes in the config, each loaded when a store of it is opened
 * (a SQLite command never loads the PostgreSQL client). Features ask the engine; they never branch on its name. A test
 * fails when a folder under src/engines/ is missing here, and every entry runs test/engines/contract.test.ts.
 */
export const ENGINES: Record<EngineName, () => Promise<StoreEngine<any>>> = {
  sqlite: async () => (await import('./sqlite/index.js')).sqliteEngine,
  postgres: async () => (await import('./postgres/index.js')).postgresEngine,
};

/**
 * Where each engine's stores live, known from the config alone without loading the engine (the worker plans its
 * schedules and routes jobs from it): `host`, files on one machine; `fleet`, a database every host reaches
 * (StoreEngine.reach, which test/engines/contract.test.ts checks says the same).
 */
export const ENGINE_REACH: Record<EngineName, StoreEngine['reach']> = { sqlite: 'host', postgres: 'fleet' };

/** The reach of a store's engine: where its jobs may run (src/queue/hosts.ts decides its queue by it). */
export function reachOf(store: { engine?: EngineName }): StoreEngine['reach'] {
  return ENGINE_REACH[store.engine ?? 'sqlite'];
}

/** The engine of a store's config (`engine:` unset is SQLite, as every store was before engines). */
export function engineFor(store: { engine?: EngineName }): Promise<StoreEngine<any>> {
  return ENGINES[store.engine ?? 'sqlite']();
}

const ENGINE_TITLES: Record<EngineName, string> = { sqlite: 'SQLite', postgres: 'PostgreSQL' };

/**
 * The one refusal of a command or job on a store of an engine it does not run on yet: exit 2, before anything is
 * opened, naming the store (src/commands/common.ts for commands, src/job/runner.ts for jobs the worker runs).
 */
export function notOnEngineYet(what: string, store: string, engine: EngineName): WardenError {
  const title = ENGINE_TITLES[engine];
  return usageError(`${what}: store ${store} is a ${title} store, and ${what} does not support ${title} stores yet (docs/postgres.md says what does)`);
}

/** The stores of `names` whose engine `supported` leaves out, first one first. */
export function storeOffEngines(stores: Record<string, { engine?: EngineName }>, names: readonly string[], supported: readonly EngineName[]): { store: string; engine: EngineName } | undefined {
  for (const store of names) {
    const engine = stores[store]?.engine ?? 'sqlite';
    if (!supported.includes(engine)) return { store, engine };
  }
  return undefined;
}
