import { createRequire } from 'node:module';
import { assertSqliteFile, type Db } from './sqlite.js';
import { storeError } from '../core/errors.js';
import { TIMER_MAX_MS } from '../time/timer-limit.js';

// Stores whose layout reads them with libsql's engine (Layout.sqliteEngine): one SQLite library per file in this
// process. Two libraries on one file do not see each other's connections: either one's close can checkpoint and
// delete the WAL the other still reads, and closing a descriptor drops the other's POSIX locks.

/** openDatabase's promises (file checked first, foreign keys on, busy timeout, errors naming the file) through libsql. */
export function openLibsqlDatabase(path: string, opts: { busyTimeoutMs?: number; readonly?: boolean } = {}): Db {
  assertSqliteFile(path);
  // Loaded here, not at the top: every command imports the store opener, few open a libsql store.
  const Libsql = createRequire(import.meta.url)('libsql') as new (p: string, o: object) => Db;
  let db: Db;
  try {
    db = new Libsql(path, { fileMustExist: true, readonly: opts.readonly ?? false });
  } catch (err) {
    throw storeError(`open ${path}: ${(err as Error).message}`, err);
  }
  try {
    db.pragma('foreign_keys = ON');
    db.pragma(`busy_timeout = ${Math.min(TIMER_MAX_MS, Math.max(0, Math.floor(opts.busyTimeoutMs ?? 5000)))}`);
    db.prepare('SELECT 1 FROM sqlite_schema LIMIT 0').all();
  } catch (err) {
    db.close();
    const notDb = (err as { code?: string }).code === 'SQLITE_NOTADB';
    throw storeError(notDb ? `${path}: not a SQLite database` : `open ${path}: ${(err as Error).message}`, err);
  }
  return db;
}
