import type Libsql from 'libsql';
import type { StoreHandle } from '../contract.js';
import { expandHome } from '../../config/read.js';
import { assertSqliteFile, busyTimeoutMs } from '../../store/sqlite.js';
import { storeError } from '../../core/errors.js';
import { openLibsql } from '../../store/libsql.js';
import { mastraOf } from './names.js';

// The Mastra store's files opened with libsql's own driver: its vector tables carry a libsql_vector_idx index that
// plain SQLite (better-sqlite3) can neither change nor count (docs/mastra-layout.md, "Why libsql"). Both connections
// are src/store/libsql.ts's: every text value is read as bytes, so no byte in a store can abort the process.

export type LibDb = InstanceType<typeof Libsql>;

export interface MastraFiles {
  /** LibSQLStore's file: threads, messages, resources, observations. */
  db: LibDb;
  /** LibSQLVector's file: the same connection when the vectors are in the store's file. */
  vec: LibDb;
  /** Paths of the two, for errors. */
  dbPath: string;
  vecPath: string;
  /** Tables of `vec` that hold Mastra's semantic-recall embeddings (vector_id, embedding, metadata). */
  vectorTables: string[];
  close(): void;
}

export function openLib(path: string, busyMs: number): LibDb {
  assertSqliteFile(path);
  let db: LibDb;
  try {
    db = openLibsql(path) as unknown as LibDb;
  } catch (err) {
    throw storeError(`open ${path}: ${(err as Error).message}`, err);
  }
  db.pragma(`busy_timeout = ${Math.max(0, Math.floor(busyMs))}`);
  return db;
}

export function openMastra(store: StoreHandle): MastraFiles {
  const dbPath = store.path;
  const cfg = mastraOf(store.config);
  const vecPath = cfg.vectorDb ? expandHome(cfg.vectorDb) : dbPath;
  // The store's own connection (libsql: the layout's sqliteEngine); a second one on the same file from this process
  // could delete the WAL under it on close. A separate vector file gets a connection of its own, closed here.
  const db = store.db as unknown as LibDb;
  const vec = vecPath === dbPath ? db : openLib(vecPath, busyTimeoutMs(store.db));
  try {
    return { db, vec, dbPath, vecPath, vectorTables: vectorTablesOf(vec), close: () => { if (vec !== db) vec.close(); } };
  } catch (err) {
    if (vec !== db) vec.close();
    throw err;
  }
}

/**
 * LibSQLVector's index tables: `CREATE TABLE <index> (id, vector_id TEXT UNIQUE, embedding F32_BLOB(n), metadata)`.
 * Every such table is Mastra's (Memory names its index memory_messages_<dim>), found by shape, not by name.
 */
export function vectorTablesOf(db: LibDb): string[] {
  const tables = db.prepare(`SELECT name FROM sqlite_schema WHERE type = 'table' AND sql LIKE '%F32_BLOB%' ORDER BY name`).all() as { name: string }[];
  return tables.map((t) => t.name).filter((name) => {
    const cols = new Set((db.prepare(`SELECT name FROM pragma_table_info(?)`).all(name) as { name: string }[]).map((c) => c.name));
    return cols.has('vector_id') && cols.has('metadata') && cols.has('embedding');
  });
}

export const quoteId = (name: string) => `"${name.replace(/"/g, '""')}"`;

/** Run `fn` in BEGIN IMMEDIATE … COMMIT on `db`. */
export function immediate<T>(db: LibDb, fn: () => T): T {
  return db.transaction(fn).immediate();
}
