import Database from 'better-sqlite3';
import { statSync } from 'node:fs';
import { storeError } from '../core/errors.js';
import { parseInstant } from '../time/instants.js';
import { TIMER_MAX_MS } from '../time/timer-limit.js';

export type Db = Database.Database;

export interface OpenOptions {
  busyTimeoutMs?: number;
  readonly?: boolean;
  /** Only `init --create` may make a new file; every other caller gets an error for a missing path. */
  create?: boolean;
}

/**
 * Refuse a path that is missing, not a file, or empty, before SQLite itself touches it (SQLite would take an
 * empty file as a new database; a one-byte file openHandle refuses). Whether it is SQLite at all is asked of SQLite once open (`openDatabase`): this
 * process never opens a descriptor of its own on a store, because closing one drops every POSIX lock the process
 * holds on the file, SQLite's included (another thread's reader, a second job's connection): "How To Corrupt An
 * SQLite Database File", 2.2.
 */
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
    db = openHandle(path, { fileMustExist: !opts.create, readonly: opts.readonly ?? false });
  } catch (err) {
    throw storeError((err as Error).message, err);
  }
  try {
    db.pragma('foreign_keys = ON');
    db.pragma(`busy_timeout = ${Math.min(TIMER_MAX_MS, Math.max(0, Math.floor(opts.busyTimeoutMs ?? 5000)))}`);
    if (db.pragma('foreign_keys', { simple: true }) !== 1) throw storeError(`${path}: foreign keys could not be enabled`);
    if (!opts.create) assertSqliteHeader(db, path);
    registerTimeFunctions(db);
  } catch (err) {
    db.close();
    // SQLite's own errors keep their code (a busy store stays retryable); they already name the file.
    throw err instanceof Error && ('kind' in err || err instanceof Database.SqliteError) ? err : storeError(`open ${path}: ${(err as Error).message}`, err);
  }
  return db;
}

/** The first read of the file: its header, checked by SQLite (SQLITE_NOTADB when it is not a database). */
function assertSqliteHeader(db: Db, path: string): void {
  try {
    db.prepare('SELECT 1 FROM sqlite_schema LIMIT 0').all();
  } catch (err) {
    if ((err as { code?: string }).code === 'SQLITE_NOTADB') throw storeError(`${path}: not a SQLite database`, err);
    throw err;
  }
}

const NAMED = Symbol('memory-warden.named');

/**
 * SQLite's own messages (`database disk image is malformed`, `database is locked`) name no file. Rewrite one
 * thrown by a handle on `path` in place to `<doing> <path>: <message>`: class and code stay, so a caller's
 * `code === 'SQLITE_BUSY'` and the transient classification still hold. Anything else passes through untouched.
 */
export function nameSqliteError(err: unknown, doing: string, path: string): unknown {
  if (err instanceof Database.SqliteError && !(err as unknown as Record<symbol, boolean>)[NAMED]) {
    err.message = `${doing} ${path}: ${err.message}`;
    Object.defineProperty(err, NAMED, { value: true });
  }
  return err;
}

type AnyFn = (...args: any[]) => any;

function named<F extends AnyFn>(fn: F, doing: string, path: string, then?: (result: any) => any): F {
  return function (this: unknown, ...args: unknown[]) {
    try {
      const result = fn.apply(this, args);
      return then ? then(result) : result;
    } catch (err) {
      throw nameSqliteError(err, doing, path);
    }
  } as F;
}

/**
 * The one mechanism by which every SQLite error names its file: every handle the project opens (stores, the
 * state db, lock sidecars; snapshot copies name their source themselves) goes through here: each statement it
 * prepares, each iteration step (a corrupt page can be met halfway through), each exec, pragma and transaction
 * (BEGIN/COMMIT meet locks) rewrites what it throws.
 */
export function nameErrors(db: Db, path: string): Db {
  const statement = (stmt: Database.Statement) => {
    const doing = stmt.reader ? 'read' : 'write';
    for (const m of ['run', 'get', 'all'] as const) (stmt as any)[m] = named((stmt as any)[m], doing, path);
    (stmt as any).iterate = named(stmt.iterate, doing, path, (it: Iterator<unknown>) => {
      it.next = named(it.next, doing, path);
      return it;
    });
    return stmt;
  };
  db.prepare = named(db.prepare, 'read', path, statement);
  db.exec = named(db.exec, 'write', path);
  db.pragma = named(db.pragma, 'pragma', path);
  const transaction = db.transaction;
  db.transaction = function (fn: AnyFn) {
    const tx = transaction.call(db, fn) as any;
    const variants = ['deferred', 'immediate', 'exclusive'] as const;
    const wrapped = named(tx, 'write', path) as any;
    for (const v of variants) wrapped[v] = named(tx[v], 'write', path);
    wrapped.default = wrapped;
    return wrapped;
  } as Db['transaction'];
  return db;
}

/**
 * SQLite's unix VFS reports a one-byte file as empty (a workaround for an old filesystem's bug), so it would take
 * one as a new database and write over that byte (a store under `init`, the state db); every other short file it
 * refuses itself (SQLITE_NOTADB). A stat, never a descriptor of our own (see assertSqliteFile).
 */
function refuseOneByte(path: string): void {
  let size = -1;
  try {
    size = statSync(path).size;
  } catch {
    // nothing there (SQLite makes the file, or says why not)
  }
  if (size === 1) throw storeError(`${path}: one byte, not a SQLite database`);
}

/** `new Database` for every handle (stores through openDatabase, the state db, lock sidecars): errors name the file. */
export function openHandle(path: string, options?: Database.Options): Db {
  refuseOneByte(path);
  let db: Db;
  try {
    db = new Database(path, options);
  } catch (err) {
    if (err instanceof Database.SqliteError) throw nameSqliteError(err, 'open', path);
    throw storeError(`open ${path}: ${(err as Error).message}`, err);
  }
  return nameErrors(db, path);
}

/** `warden_epoch(text)`: epoch ms of any ISO-8601 instant, NULL when unparseable (so it never compares true). */
export function registerTimeFunctions(db: Db): void {
  db.function('warden_epoch', { deterministic: true }, (v: unknown) => parseInstant(v));
}

/** The connection's busy_timeout in ms (0: none). A second connection to the same store (a thread's) takes it too. */
export function busyTimeoutMs(db: Db): number {
  return Number(db.pragma('busy_timeout', { simple: true })) || 0;
}

/**
 * wal_checkpoint(TRUNCATE), tried again while SQLite answers busy, for as long as the connection's busy_timeout:
 * TRUNCATE waits for writers and readers through the busy handler, but not for another connection's checkpoint
 * (an agent's autocheckpoint after a big commit, a VACUUM's), which makes it return busy at once. True when the
 * WAL was emptied and truncated. (The store thread's compact, src/store/thread.ts, does the same in its own code.)
 */
export function truncateWal(db: Db): boolean {
  const done = whileBusy(db, () => {
    const [r] = db.pragma('wal_checkpoint(TRUNCATE)') as { busy: number; log: number }[];
    if (r === undefined) return false;
    return r.busy === 0 ? r.log === 0 : BUSY;
  });
  return done === BUSY ? false : done;
}

/**
 * `PRAGMA journal_mode = <mode>`, tried again while SQLite answers busy, for as long as the connection's
 * busy_timeout. Changing the mode writes the file header under a write lock taken while a read lock is held, and
 * SQLite does not call the busy handler for that upgrade (two upgraders would deadlock): with another connection
 * writing (an agent on a rollback-journal store, a second process creating the same state db) it is busy at
 * once, whatever the timeout. The mode now in force, lower case; the last busy error once the timeout is spent.
 */
export function setJournalMode(db: Db, mode: 'wal' | 'delete'): string {
  let busy: unknown;
  const set = whileBusy(db, () => {
    try {
      return String(db.pragma(`journal_mode = ${mode}`, { simple: true })).toLowerCase();
    } catch (err) {
      if (!String((err as { code?: unknown }).code).startsWith('SQLITE_BUSY')) throw err;
      busy = err;
      return BUSY;
    }
  });
  if (set === BUSY) throw busy;
  return set;
}

/** For what SQLite answers busy at once, without its busy handler: `attempt` again, 10 ms apart, until the timeout. */
function whileBusy<T>(db: Db, attempt: () => T | typeof BUSY): T | typeof BUSY {
  const deadline = Date.now() + busyTimeoutMs(db);
  for (;;) {
    const result = attempt();
    if (result !== BUSY || Date.now() >= deadline) return result;
    Atomics.wait(SLEEPER, 0, 0, 10);
  }
}
const BUSY = Symbol('busy');
const SLEEPER = new Int32Array(new SharedArrayBuffer(4));

/**
 * Writers that rewrite much of a file (init, repair, erase, the digest's claim) refuse a store SQLite itself finds
 * damaged, before their first write: a migration or VACUUM over a corrupt page would bake the damage in.
 */
export function assertIntact(db: Db, path: string, how: 'integrity_check' | 'quick_check' = 'quick_check'): void {
  assertIntactLines((db.pragma(`${how}(5)`) as Record<string, unknown>[]).map((r) => String(Object.values(r)[0])), path, how);
}

/** assertIntact for lines a check run elsewhere (another connection, a worker thread) returned. */
export function assertIntactLines(found: readonly string[], path: string, how: 'integrity_check' | 'quick_check'): void {
  if (found.length === 1 && found[0] === 'ok') return;
  const said = found.join('; ').replace(/\s+/g, ' ').slice(0, 300);
  throw storeError(`${path}: ${how} failed (${said}); nothing was changed: restore a snapshot or recover the file first`);
}

export function tableExists(db: Db, name: string): boolean {
  return db.prepare(`SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?`).get(name) !== undefined;
}

export function journalMode(db: Db): string {
  return String(db.pragma('journal_mode', { simple: true })).toLowerCase();
}

/** Run `fn` inside BEGIN IMMEDIATE … COMMIT: the write lock is taken up front, never upgraded mid-way. */
export function writeTransaction<T>(db: Db, fn: () => T): T {
  return db.transaction(fn).immediate();
}
