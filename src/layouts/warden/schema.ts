import { setJournalMode, tableExists, type Db } from '../../store/sqlite.js';
import { storeError } from '../../core/errors.js';
import { instantShapeSql } from '../../time/instants.js';

/** The store of BRIEF.md. */
export const MEMORY_DDL = `
CREATE TABLE IF NOT EXISTS memory (
  id            TEXT PRIMARY KEY,
  subject       TEXT NOT NULL,
  fact          TEXT NOT NULL,
  source        TEXT NOT NULL,
  created_at    TEXT NOT NULL DEFAULT (datetime('now')),
  confirmed_at  TEXT NOT NULL DEFAULT (datetime('now')),
  expires_at    TEXT,
  superseded_by TEXT REFERENCES memory(id) ON DELETE CASCADE,
  last_used_at  TEXT
);`;

export const INDEXES: Record<string, string> = {
  memory_expires: 'CREATE INDEX IF NOT EXISTS memory_expires ON memory(expires_at)',
  memory_superseded: 'CREATE INDEX IF NOT EXISTS memory_superseded ON memory(superseded_by)',
};

/**
 * The brief's view, with the expiry compared as an instant (julianday reads `T`, `Z` and `+HH:MM` forms) rather
 * than as text, by the rule of src/time/instants.ts: what is not an instant there (julianday() cannot read it, or it is no
 * calendar date, a julian day number, `now`) is kept live, as prune keeps it. Plain SQL: the agent's own
 * connections evaluate it, without memory-warden's functions.
 */
export const LIVE_VIEW = `
CREATE VIEW IF NOT EXISTS live_memory AS
SELECT id, subject, fact, source, confirmed_at, expires_at
FROM memory
WHERE superseded_by IS NULL
  AND (expires_at IS NULL OR NOT ${instantShapeSql('expires_at')} OR julianday(expires_at) IS NULL
       OR julianday(expires_at) > julianday('now'));`;

/**
 * Earlier definitions `init` replaces: the brief's (text comparison, wrong for `T`/`Z` forms all day) and the
 * first julianday one (which hid `now`, julian day numbers and Feb 30 that prune never deletes). A view that is
 * none of these was written by someone else: left alone, and reported by check.
 */
const OLD_LIVE_VIEWS = [
  `CREATE VIEW live_memory AS SELECT id, subject, fact, source, confirmed_at, expires_at FROM memory WHERE superseded_by IS NULL AND (expires_at IS NULL OR expires_at > datetime('now'))`,
  `CREATE VIEW live_memory AS SELECT id, subject, fact, source, confirmed_at, expires_at FROM memory WHERE superseded_by IS NULL AND (expires_at IS NULL OR julianday(expires_at) IS NULL OR julianday(expires_at) > julianday('now'))`,
];

const normalizeSql = (sql: string) => sql.replace(/IF NOT EXISTS\s+/i, '').replace(/\s+/g, ' ').replace(/\s*([(),;])\s*/g, '$1').replace(/;$/, '').trim().toLowerCase();

export type LiveViewState = 'current' | 'missing' | 'old' | 'foreign';

export function liveViewState(db: Db): LiveViewState {
  const row = db.prepare(`SELECT sql FROM sqlite_schema WHERE type = 'view' AND name = 'live_memory'`).get() as { sql: string } | undefined;
  if (!row) return 'missing';
  const sql = normalizeSql(row.sql);
  if (sql === normalizeSql(LIVE_VIEW)) return 'current';
  return OLD_LIVE_VIEWS.some((old) => normalizeSql(old) === sql) ? 'old' : 'foreign';
}

/** Columns without which the store cannot be a memory store at all: a migration cannot invent them. */
export const CORE_COLUMNS = ['id', 'subject', 'fact'] as const;
/** Columns every job relies on; `init` adds them to a store already in use. */
export const REQUIRED_COLUMNS = ['id', 'subject', 'fact', 'source', 'created_at', 'confirmed_at', 'expires_at', 'superseded_by'] as const;

/**
 * How `init` adds each column to an existing table. ALTER TABLE cannot add a column with a non-constant default,
 * so the time columns are added plain, backfilled, and a trigger stamps new rows that leave them out.
 */
const ADD_COLUMN: Record<string, { ddl: string; backfill?: string }> = {
  source: { ddl: `ALTER TABLE memory ADD COLUMN source TEXT NOT NULL DEFAULT ''` },
  created_at: { ddl: `ALTER TABLE memory ADD COLUMN created_at TEXT`, backfill: `UPDATE memory SET created_at = datetime('now') WHERE created_at IS NULL` },
  confirmed_at: { ddl: `ALTER TABLE memory ADD COLUMN confirmed_at TEXT`, backfill: `UPDATE memory SET confirmed_at = COALESCE(created_at, datetime('now')) WHERE confirmed_at IS NULL` },
  expires_at: { ddl: `ALTER TABLE memory ADD COLUMN expires_at TEXT` },
  superseded_by: { ddl: `ALTER TABLE memory ADD COLUMN superseded_by TEXT REFERENCES memory(id) ON DELETE CASCADE` },
  last_used_at: { ddl: `ALTER TABLE memory ADD COLUMN last_used_at TEXT` },
};

const STAMP_TRIGGER = `
CREATE TRIGGER IF NOT EXISTS memory_stamp_times AFTER INSERT ON memory
WHEN NEW.created_at IS NULL OR NEW.confirmed_at IS NULL
BEGIN
  UPDATE memory SET created_at = COALESCE(NEW.created_at, datetime('now')),
                    confirmed_at = COALESCE(NEW.confirmed_at, NEW.created_at, datetime('now'))
  WHERE rowid = NEW.rowid;
END;`;

export function objectExists(db: Db, type: 'index' | 'view' | 'trigger', name: string): boolean {
  return db.prepare(`SELECT 1 FROM sqlite_schema WHERE type = ? AND name = ?`).get(type, name) !== undefined;
}

export function memoryColumns(db: Db): Set<string> {
  return new Set((db.prepare(`SELECT name FROM pragma_table_info('memory')`).all() as { name: string }[]).map((r) => r.name));
}

/** Throws a store error naming the file and what is missing; writes nothing. */
export function assertWardenSchema(db: Db, path: string): void {
  if (!tableExists(db, 'memory')) {
    throw storeError(`${path}: no table "memory" (not a memory store; init --db ${path} adds one)`);
  }
  const cols = memoryColumns(db);
  const missing = REQUIRED_COLUMNS.filter((c) => !cols.has(c));
  if (missing.length > 0) {
    throw storeError(`${path}: table memory is missing columns ${missing.join(', ')} (init --db ${path} migrates it)`);
  }
}

export interface InitResult {
  createdTable: boolean;
  addedColumns: string[];
  addedIndexes: string[];
  addedView: boolean;
  /** An earlier definition of live_memory was replaced by the current one. */
  replacedView: boolean;
  addedTrigger: boolean;
  journalMode: string;
}

/** Create or migrate, in one transaction, without losing a row. Idempotent: a second run changes nothing. */
export function initSchema(db: Db, path: string): InitResult {
  const result: InitResult = { createdTable: false, addedColumns: [], addedIndexes: [], addedView: false, replacedView: false, addedTrigger: false, journalMode: '' };
  db.transaction(() => {
    if (!tableExists(db, 'memory')) {
      db.exec(MEMORY_DDL);
      result.createdTable = true;
    } else {
      const cols = memoryColumns(db);
      const missingCore = CORE_COLUMNS.filter((c) => !cols.has(c));
      if (missingCore.length > 0) {
        throw storeError(`${path}: table memory has no ${missingCore.join(', ')} column; cannot migrate it to a memory store`);
      }
      for (const [col, how] of Object.entries(ADD_COLUMN)) {
        if (cols.has(col)) continue;
        db.exec(how.ddl);
        if (how.backfill) db.exec(how.backfill);
        result.addedColumns.push(col);
      }
      if (result.addedColumns.some((c) => c === 'created_at' || c === 'confirmed_at')) {
        db.exec(STAMP_TRIGGER);
        result.addedTrigger = true;
      }
    }
    for (const [name, ddl] of Object.entries(INDEXES)) {
      if (!objectExists(db, 'index', name)) {
        db.exec(ddl);
        result.addedIndexes.push(name);
      }
    }
    const view = liveViewState(db);
    if (view === 'old') {
      db.exec('DROP VIEW live_memory');
      result.replacedView = true;
    }
    if (view === 'missing' || view === 'old') {
      db.exec(LIVE_VIEW);
      result.addedView = view === 'missing';
    }
  }).immediate();
  result.journalMode = setJournalMode(db, 'wal');
  return result;
}
