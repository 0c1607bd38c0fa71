import { basename } from 'node:path';
import type { Config } from '../config/config.js';
import { isDeepStrictEqual } from 'node:util';
import type { StoreConfig } from '../store/config.js';
import { layoutFor } from './registry.js';
import { openDatabase } from '../store/sqlite.js';
import { openLibsqlDatabase } from '../store/libsql.js';
import type { StoreHandle } from './contract.js';
import { rowVectorsFor } from '../vectors/registry.js';
import { storeNameFrom } from '../store/name.js';

// The handle is the layout contract's (src/layouts/contract.ts).
export type { StoreHandle } from './contract.js';

export function openStore(config: Config, name: string, opts: { readonly?: boolean } = {}): StoreHandle {
  const storeConfig = config.stores[name];
  if (!storeConfig) throw new Error(`no store named ${name}`);
  const how = { busyTimeoutMs: config.busyTimeoutMs, readonly: opts.readonly ?? false };
  // A layout whose files need libsql's engine gets its store through libsql only (src/store/libsql.ts says why).
  const db = layoutFor(storeConfig).sqliteEngine === 'libsql' ? openLibsqlDatabase(storeConfig.db, how) : openDatabase(storeConfig.db, how);
  try {
    layoutFor(storeConfig).assertSchema(db, storeConfig);
  } catch (err) {
    db.close();
    throw err;
  }
  const vectors = rowVectorsFor(storeConfig);
  return { name, config: storeConfig, path: storeConfig.db, db, ...(vectors ? { vectors } : {}), close: () => db.close() };
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
 * alone says everything about it (the brief's layout and no vector store, exactly what `--db` builds), so the
 * command works with no config file; otherwise `--store NAME`, which needs the same config.
 */
export function storeSelector(name: string, store: StoreConfig): StoreSelector {
  // storeSchema.parse({ db }), written out: this module opens every store and loads no zod (test/store/open.test.ts).
  return isDeepStrictEqual(store, { layout: 'warden', db: store.db }) ? { flag: '--db', value: store.db } : { flag: '--store', value: name };
}
