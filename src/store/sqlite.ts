import Database from 'better-sqlite3';
import { closeSync, openSync, readSync, statSync } from 'node:fs';
import { storeError } from '../errors.js';
import { parseInstant } from '../time.js';

export type Db = Database.Database;

export interface OpenOptions {
  busyTimeoutMs?: number;
  readonly?: boolean;
  /** Only `init --create` may make a new file; every other caller gets an error for a missing path. */
  create?: boolean;
}

const SQLITE_HEADER = Buffer.from('SQLite format 3\0', 'latin1');

/** Refuse a path that is missing, not a file, or not SQLite, before SQLite itself touches it. */
export function assertSqliteFile(path: string): void {
  let size: number;
  try {
    const st = statSync(path);
    if (!st.isFile()) throw storeError(`${path}: not a file`);
    size = st.size;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      throw storeError(`${path}: no such store (init --create makes a new one)`);
    }
    if ((err as { kind?: string }).kind) throw err;
    throw storeError(`${path}: cannot read (${(err as NodeJS.ErrnoException).code})`, err);
  }
  if (size === 0) throw storeError(`${path}: empty file, not a SQLite database`);
  const head = Buffer.alloc(16);
  const fd = openSync(path, 'r');
  try {
    readSync(fd, head, 0, 16, 0);
  } finally {
    closeSync(fd);
  }
  if (!head.equals(SQLITE_HEADER)) throw storeError(`${path}: not a SQLite database`);
}

/**
 * Every connection the project opens goes through here: foreign keys on first (per connection, or ON DELETE
 * CASCADE silently does nothing), a busy timeout so a held agent lock means waiting, not failing, and the
 * time functions that compare timestamps as instants.
 */
export function openDatabase(path: string, opts: OpenOptions = {}): Db {
  if (!opts.create) assertSqliteFile(path);
  let db: Db;
  try {
    db = new Database(path, { fileMustExist: !opts.create, readonly: opts.readonly ?? false });
  } catch (err) {
    throw storeError(`open ${path}: ${(err as Error).message}`, err);
  }
  try {
    db.pragma('foreign_keys = ON');
    db.pragma(`busy_timeout = ${Math.max(0, Math.floor(opts.busyTimeoutMs ?? 5000))}`);
    if (db.pragma('foreign_keys', { simple: true }) !== 1) throw storeError(`${path}: foreign keys could not be enabled`);
    registerTimeFunctions(db);
  } catch (err) {
    db.close();
    throw err instanceof Error && 'kind' in err ? err : storeError(`open ${path}: ${(err as Error).message}`, err);
  }
  return db;
}

/** `warden_epoch(text)`: epoch ms of any ISO-8601 instant, NULL when unparseable (so it never compares true). */
export function registerTimeFunctions(db: Db): void {
  db.function('warden_epoch', { deterministic: true }, (v: unknown) => parseInstant(v));
}

export function journalMode(db: Db): string {
  return String(db.pragma('journal_mode', { simple: true })).toLowerCase();
}

/** Run `fn` inside BEGIN IMMEDIATE … COMMIT: the write lock is taken up front, never upgraded mid-way. */
export function writeTransaction<T>(db: Db, fn: () => T): T {
  return db.transaction(fn).immediate();
}
