import { createRequire } from 'node:module';
import { assertSqliteFile, type Db } from './sqlite.js';
import { storeError } from '../core/errors.js';
import { TIMER_MAX_MS } from '../time/timer-limit.js';

// Stores whose layout reads them with libsql's engine (Layout.sqliteEngine): one SQLite library per file in this
// process. Two libraries on one file do not see each other's connections: either one's close can checkpoint and
// delete the WAL the other still reads, and closing a descriptor drops the other's POSIX locks.
//
// libsql's driver aborts the whole process (a Rust panic: `Utf8Error`, SIGABRT, no exception) when a row it hands
// to JavaScript holds a TEXT value that is not UTF-8, and when a Buffer is bound as a parameter. Any writer can put
// such a byte in a store (an agent in Go or C, a damaged page), so every connection made here reads each text value
// as a blob and decodes it in JavaScript, U+FFFD for what is not UTF-8: no store content can abort the process.

type Row = Record<string, unknown>;
interface RawStatement {
  reader: boolean;
  columns(): { name: string }[];
  run(...params: unknown[]): { changes: number; lastInsertRowid: number | bigint };
  get(...params: unknown[]): Row | undefined;
  all(...params: unknown[]): Row[];
  iterate(...params: unknown[]): IterableIterator<Row>;
}
interface RawLibsql {
  prepare(sql: string): RawStatement;
  pragma(source: string, options?: { simple?: boolean }): unknown;
}
type LibsqlClass = new (path: string, opts: object) => RawLibsql;

const utf8 = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });
/** A text value read as bytes, as JavaScript sees it: what is not UTF-8 becomes U+FFFD. */
export const decodeText = (b: Uint8Array): string => utf8.decode(b);

/** Statements that return rows and can be a CTE's body (a PRAGMA, or anything with RETURNING, cannot). */
const QUERY = /^(?:\s|--[^\n]*\n|\/\*[\s\S]*?\*\/)*(?:SELECT|WITH|VALUES)\b/i;

/** Pragmas whose rows can quote the schema's own names (any bytes): read through their table-valued function. */
const NAMING_PRAGMAS = new Set(['integrity_check', 'quick_check', 'table_info', 'table_xinfo', 'index_list', 'index_info', 'index_xinfo', 'foreign_key_list', 'foreign_key_check']);

/**
 * A statement whose rows carry no TEXT value: each column comes back as two, the text one cast to a blob (`t<i>`)
 * and any other (`v<i>`), and is put together here under its own name.
 */
class TextSafeStatement {
  private plucked = false;
  constructor(private readonly stmt: RawStatement, private readonly names: string[]) {}
  get reader(): boolean {
    return true;
  }
  columns() {
    return this.names.map((name) => ({ name }));
  }
  pluck(on = true): this {
    this.plucked = on;
    return this;
  }
  raw(): never {
    throw new Error('raw mode is not offered on a libsql store connection');
  }
  private row(r: Row): unknown {
    const at = (i: number) => {
      const t = r[`t${i}`];
      if (t !== null && t !== undefined) return decodeText(t instanceof ArrayBuffer ? new Uint8Array(t) : (t as Uint8Array));
      const v = r[`v${i}`];
      // A blob is a Buffer from get() and an ArrayBuffer from all() and iterate(): a Buffer, whichever read it.
      return v instanceof ArrayBuffer ? Buffer.from(v) : v;
    };
    if (this.plucked) return at(0);
    const out: Row = {};
    this.names.forEach((name, i) => (out[name] = at(i)));
    return out;
  }
  get(...params: unknown[]): unknown {
    const r = this.stmt.get(...params);
    return r === undefined ? undefined : this.row(r);
  }
  all(...params: unknown[]): unknown[] {
    return this.stmt.all(...params).map((r) => this.row(r));
  }
  *iterate(...params: unknown[]): IterableIterator<unknown> {
    for (const r of this.stmt.iterate(...params)) yield this.row(r);
  }
  run(...params: unknown[]) {
    return this.stmt.run(...params);
  }
}

function withoutTrailingSemicolon(sql: string): string {
  return sql.replace(/[\s;]+$/, '');
}

/** The statement, or, when it returns rows, the same query wrapped so that no row carries a TEXT value. */
function textSafe(prepare: (sql: string) => RawStatement, sql: string): RawStatement | TextSafeStatement {
  const stmt = prepare(sql);
  if (!stmt.reader || !QUERY.test(sql)) return stmt;
  const names = stmt.columns().map((c) => c.name);
  if (names.length === 0) return stmt;
  const cols = names.map((_, i) => `c${i}`);
  const picks = cols.map((c, i) => `CASE WHEN typeof(${c}) = 'text' THEN CAST(${c} AS BLOB) END AS t${i}, CASE WHEN typeof(${c}) <> 'text' THEN ${c} END AS v${i}`);
  // A CTE read once is flattened into the outer SELECT, which has no ORDER BY of its own: the query's order stays.
  return new TextSafeStatement(prepare(`WITH _mw_rows(${cols.join(', ')}) AS (\n${withoutTrailingSemicolon(sql)}\n) SELECT ${picks.join(', ')} FROM _mw_rows`), names);
}

let safeClass: LibsqlClass | undefined;

/** libsql's Database with prepare and pragma made text-safe; loaded when first used (few commands open a libsql store). */
function libsqlClass(): LibsqlClass {
  if (safeClass) return safeClass;
  const Libsql = createRequire(import.meta.url)('libsql') as LibsqlClass;
  safeClass = class TextSafeLibsql extends Libsql {
    override prepare(sql: string): RawStatement {
      return textSafe((s) => super.prepare(s), sql) as RawStatement;
    }
    override pragma(source: string, options: { simple?: boolean } = {}): unknown {
      const m = /^\s*(\w+)\s*(?:\(([^)]*)\))?\s*;?\s*$/.exec(source);
      if (!m || !NAMING_PRAGMAS.has(m[1]!.toLowerCase())) return super.pragma(source, options);
      const stmt = this.prepare(`SELECT * FROM pragma_${m[1]!.toLowerCase()}(${m[2] ?? ''})`);
      return options.simple ? (stmt as unknown as TextSafeStatement).pluck().get() : stmt.all();
    }
  };
  return safeClass;
}

/**
 * A libsql connection whose reads cannot abort the process (above): each row's text values decoded from bytes.
 * Parameters are JavaScript values; a Buffer must not be bound (libsql aborts): pass hex and `unhex(?)` instead.
 */
export function openLibsql(path: string, opts: { readonly?: boolean; fileMustExist?: boolean } = {}): Db {
  const Libsql = libsqlClass();
  return new Libsql(path, { fileMustExist: opts.fileMustExist ?? true, readonly: opts.readonly ?? false }) as unknown as Db;
}

/** openDatabase's promises (file checked first, foreign keys on, busy timeout, errors naming the file) through libsql. */
export function openLibsqlDatabase(path: string, opts: { busyTimeoutMs?: number; readonly?: boolean } = {}): Db {
  assertSqliteFile(path);
  let db: Db;
  try {
    db = openLibsql(path, { readonly: opts.readonly ?? false });
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
