import { journalMode, truncateWal, type Db } from '../store/sqlite.js';
import { coerceError, isTransient, storeError } from '../core/errors.js';
import { STATE_MIGRATIONS, type StateMigration } from './migrations/index.js';

/**
 * Brings a state db to this build's schema: the steps after its `PRAGMA user_version`, in order, then the new
 * version, all inside one BEGIN IMMEDIATE. The version is read again under that write lock, so two processes
 * opening a new state db together queue there and the second finds nothing left to do; a kill -9 halfway leaves
 * the old version, migrated whole by the next open. An up-to-date db (every open but the first) takes no lock.
 * `migrations` is there for tests of steps this build does not have yet.
 *
 * A step that drops data (unkeyed hashes, 009) runs with secure_delete on, and asks in `state_compaction` for the
 * file to be compacted: VACUUM, then the WAL truncated, so no page, free page or WAL frame keeps what it dropped.
 * That is done after the commit, and again by every open until it has been done (a kill -9 in between, or a reader
 * holding the WAL): only then is the request deleted.
 */
export function migrateState(db: Db, path: string, migrations: readonly StateMigration[] = STATE_MIGRATIONS): number {
  const version = migrateSteps(db, path, migrations);
  compactIfAsked(db, path);
  return version;
}

function migrateSteps(db: Db, path: string, migrations: readonly StateMigration[]): number {
  const known = migrations.length;
  const versionNow = () => {
    const version = db.pragma('user_version', { simple: true }) as number;
    if (version > known) {
      throw storeError(`open state db ${path}: its schema is version ${version}, newer than this memory-warden knows (${known}); run the newer memory-warden that wrote it`);
    }
    return version;
  };
  if (versionNow() === known) return known;
  db.pragma('secure_delete = ON');
  return db.transaction(() => {
    const version = versionNow();
    for (const step of migrations.slice(version)) {
      try {
        db.exec(step.sql);
      } catch (err) {
        // coerceError keeps a busy lock transient (retried); anything else is a bug of the step, named.
        throw coerceError(err, `migrate state db to version ${step.version} (${step.file})`);
      }
    }
    if (version < known) db.pragma(`user_version = ${known}`);
    return known;
  }).immediate();
}

/** The compaction a step asked for (above); left asked for while another process keeps it from being done. */
function compactIfAsked(db: Db, path: string): void {
  const table = db.prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'state_compaction'`).get() !== undefined;
  const reasons = table ? (db.prepare(`SELECT reason FROM state_compaction`).pluck().all() as string[]) : [];
  if (reasons.length === 0) return;
  try {
    db.pragma('secure_delete = ON');
    db.exec('VACUUM');
    if (journalMode(db) === 'wal' && !truncateWal(db)) return;
  } catch (err) {
    if (isTransient(err)) return; // another process writes: the next open does it
    throw coerceError(err, `compact state db ${path} (${reasons.join('; ')})`);
  }
  db.exec('DELETE FROM state_compaction');
}

/** The tables and views the state migrations create. */
function stateTables(): Set<string> {
  const names = STATE_MIGRATIONS.flatMap((m) => [...m.sql.matchAll(/CREATE\s+(?:TABLE|VIEW)\s+(?:IF\s+NOT\s+EXISTS\s+)?["`]?(\w+)/gi)].map((x) => x[1]!.toLowerCase()));
  return new Set(names);
}

const tablesOf = (db: Db): string[] =>
  db.prepare(`SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'`).pluck().all() as string[];

/**
 * A state db not yet up to date holds nothing but what the migrations make (an older build's tables, or none): a
 * file with other tables is someone's data (an agent's store named as stateDb some way the config check missed),
 * and memory-warden's tables never go into it. openStateDb asks before anything of the file changes.
 */
export function assertNoForeignTables(db: Db, path: string): void {
  // Up to date (or newer: refused when migrated): nothing will be made in it. A foreign file's own user_version
  // (agents and mem0 set theirs) is no reason to skip the look: the steps after it would run.
  if ((db.pragma('user_version', { simple: true }) as number) >= STATE_MIGRATIONS.length) return;
  const ours = stateTables();
  const foreign = tablesOf(db).filter((t) => !ours.has(t.toLowerCase()));
  if (foreign.length > 0) {
    throw storeError(`open state db ${path}: the file holds tables memory-warden did not make (${foreign.slice(0, 5).join(', ')}${foreign.length > 5 ? ', …' : ''}): it is not a state db; give stateDb a file of its own`);
  }
}

/** Whether `db` is memory-warden's state db: it holds every table the state migrations make. */
export function isStateDb(db: Db): boolean {
  const tables = new Set(tablesOf(db).map((t) => t.toLowerCase()));
  const ours = [...stateTables()];
  return ours.length > 0 && ours.every((t) => tables.has(t));
}
