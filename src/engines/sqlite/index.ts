import type { StoreConfig } from '../../store/config.js';
import { assertIntact, journalMode, openDatabase, truncateWal, type Db } from '../../store/sqlite.js';
import { fileIdentity } from '../../store/file-identity.js';
import { openLibsqlDatabase } from '../../store/libsql.js';
import { rowVectorsFor } from '../../vectors/registry.js';
import type { OpenOnEngine, SqliteStoreHandle, StoreEngine } from '../contract.js';

export interface OpenSqlite extends OpenOnEngine {
  /** The layout's files carry libsql vector indexes (`Layout.sqliteEngine`): opened through libsql's driver only. */
  libsql?: boolean;
}

/**
 * A store in one SQLite file on its host: today's primitives (src/store/), named as an engine. Opening is synchronous
 * (`openSqliteStore`, what src/layouts/open.ts calls on every command's path: nothing more is loaded or awaited than
 * before); the lock is the sidecar file's (src/store/lock.ts); the integrity check is SQLite's integrity_check.
 */
export function openSqliteStore(name: string, store: StoreConfig, opts: OpenSqlite = {}): SqliteStoreHandle {
  const how = { busyTimeoutMs: opts.busyTimeoutMs ?? 5000, readonly: opts.readonly ?? false };
  const db = opts.libsql ? openLibsqlDatabase(store.db, how) : openDatabase(store.db, how);
  const vectors = rowVectorsFor(store);
  return { name, config: store, path: store.db, db, ...(vectors ? { vectors } : {}), close: () => db.close() };
}

export const sqliteEngine: StoreEngine<SqliteStoreHandle> = {
  name: 'sqlite',
  reach: 'host',
  describe: (store) => store.db,
  open: async (name, store, opts) => openSqliteStore(name, store, opts),
  lock: async (handle, holder) => (await import('../../store/lock.js')).acquireMaintenanceLock(handle.path, { holder }),
  async integrity(handle) {
    const lines = (handle.db.pragma('integrity_check') as { integrity_check: string }[]).map((r) => r.integrity_check);
    return { result: lines.join('; ') };
  },
  assertReadable: async (handle) => assertIntact(handle.db, handle.path),
  identity: async (handle) => fileIdentity(handle.path),
  scrubErased: async (handle) => compactAfterErase(handle.db),
};

/**
 * VACUUM rewrites the file without the free pages secure_delete already zeroed; the checkpoint copies the WAL back
 * and truncates it, so no old frame keeps a copy. A reader holding the WAL makes the truncate fail: reported.
 */
export function compactAfterErase(db: Db): { vacuumed: boolean; walTruncated: boolean } {
  // VACUUM builds the new database in a TEMP file; with temp_store = MEMORY (which the deletes set, src/store/
  // delete.ts) that copy of the whole store lived in RAM: peak RSS grew with the store (714 MB at 3M rows). Back on
  // disk it is a few MB of page cache. This drops the deletes' TEMP objects; prepareConnection makes them again.
  db.pragma('temp_store = DEFAULT');
  db.exec('VACUUM');
  return { vacuumed: true, walTruncated: journalMode(db) === 'wal' ? truncateWal(db) : true };
}
