import { basename } from 'node:path';
import type { Config } from '../config/config.js';
import { isDeepStrictEqual } from 'node:util';
import type { StoreConfig } from '../store/config.js';
import { layoutFor, postgresLayoutFor } from './registry.js';
import type { AnyStoreHandle, StoreHandle } from './contract.js';
import { openSqliteStore } from '../engines/sqlite/index.js';
import { engineFor } from '../engines/registry.js';
import { storeNameFrom } from '../store/name.js';

// The handle is the layout contract's (src/layouts/contract.ts).
export type { StoreHandle } from './contract.js';

export function openStore(config: Config, name: string, opts: { readonly?: boolean } = {}): StoreHandle {
  const storeConfig = config.stores[name];
  if (!storeConfig) throw new Error(`no store named ${name}`);
  // A layout whose files need libsql's engine gets its store through libsql only (src/store/libsql.ts says why).
  const libsql = layoutFor(storeConfig).sqliteEngine === 'libsql';
  const store = openSqliteStore(name, storeConfig, { busyTimeoutMs: config.busyTimeoutMs, readonly: opts.readonly ?? false, libsql });
  try {
    layoutFor(storeConfig).assertSchema(store.db, storeConfig);
  } catch (err) {
    store.close();
    throw err;
  }
  return store;
}

/**
 * A store of any engine, opened by its engine and its tables checked by its layout on that engine: what the jobs
 * that run on every engine (prune, check) open. A SQLite store is openStore's, unchanged; close it with `await`.
 */
export async function openStoreOnEngine(config: Config, name: string, opts: { readonly?: boolean } = {}): Promise<AnyStoreHandle> {
  const storeConfig = config.stores[name];
  if (!storeConfig) throw new Error(`no store named ${name}`);
  if (storeConfig.engine !== 'postgres') return openStore(config, name, opts);
  const [engine, layout] = await Promise.all([engineFor(storeConfig), postgresLayoutFor(storeConfig)]);
  const store = await engine.open(name, storeConfig, { readonly: opts.readonly ?? false });
  try {
    await layout.assertSchema(store);
  } catch (err) {
    await store.close();
    throw err;
  }
  return store;
}

/**
 * `fn` while holding the store's maintenance lock, its engine's (StoreEngine.lock: the sidecar file of a SQLite store,
 * an advisory lock of a PostgreSQL schema): one maintenance writer at a time, refused transiently when another holds it.
 */
export async function withStoreLock<T>(store: AnyStoreHandle, holder: string, fn: () => Promise<T>): Promise<T> {
  const lock = await (await engineFor(store.config)).lock(store, holder);
  try {
    return await fn();
  } finally {
    await lock.release();
  }
}

/** The store name `--db PATH` gets when there is no config file: the file name without its extension. */
export function storeNameForPath(path: string): string {
  return storeNameFrom(basename(path).replace(/\.[^.]*$/, ''));
}

/** How a command names a store: `--db PATH` or `--store NAME`. */
export interface StoreSelector {
  flag: '--db' | '--store';
  value: string;
}

/**
 * How a command a person pastes (the digest's review commands) names this store: `--db PATH` when the path
 * alone says everything about it (the brief's layout and no vector store, exactly what `--db` builds; a store named
 * as `--db` names it, after its file; its records in the state db `--db` alone uses, `stateDbIsDefault`), so the
 * command works with no config file and records the decision where the digest and review list read it; otherwise
 * `--store NAME`, which needs the same config.
 */
export function storeSelector(name: string, store: StoreConfig, stateDbIsDefault: boolean): StoreSelector {
  // storeSchema.parse({ db }), written out: this module opens every store and loads no zod (test/store/open.test.ts).
  const byPath = isDeepStrictEqual(store, { engine: 'sqlite', layout: 'warden', db: store.db }) && storeNameForPath(store.db) === name && stateDbIsDefault;
  return byPath ? { flag: '--db', value: store.db } : { flag: '--store', value: name };
}
