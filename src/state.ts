import { chmodSync, existsSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { ensurePrivateFile, openHandle, type Db } from './store/sqlite.js';
import { toCanonical, type Instant } from './time.js';
import { DELIVERIES_DDL } from './digest/deliveries.js';
import { redactSecrets, redactText } from './secrets.js';

/**
 * memory-warden's own records, kept apart from the agent's store (we never add tables to it): job runs and
 * their outcome, and whatever later features must remember across restarts (digest deliveries, drift
 * verdicts, erase receipts). Durable on disk: Redis here may keep nothing.
 */
export function openStateDb(path: string): Db {
  const dir = dirname(path);
  if (!existsSync(dir)) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    chmodSync(dir, 0o700); // whatever the umask
  }
  ensurePrivateFile(path);
  const db = openHandle(path, { timeout: 5000 });
  db.pragma('foreign_keys = ON');
  db.pragma('journal_mode = WAL');
  migrateState(db);
  return db;
}

/** Each feature adds its tables here, always `IF NOT EXISTS`, never altering an older one in place. */
const MIGRATIONS: string[] = [
  `CREATE TABLE IF NOT EXISTS job_runs (
     id          INTEGER PRIMARY KEY,
     job         TEXT NOT NULL,
     store       TEXT,
     started_at  TEXT NOT NULL,
     finished_at TEXT,
     outcome     TEXT NOT NULL CHECK (outcome IN ('running', 'ok', 'failed')),
     result      TEXT,
     error       TEXT
   )`,
  `CREATE INDEX IF NOT EXISTS job_runs_by_time ON job_runs(finished_at)`,
  `CREATE INDEX IF NOT EXISTS job_runs_by_job ON job_runs(job, store, outcome, finished_at)`,
  // Drift: every verdict a verifier (or a person) gave, kept so "changed" can be detected next time and the
  // digest can list what waits for a person (needs_person = 1 AND resolved_at IS NULL).
  `CREATE TABLE IF NOT EXISTS drift_verdicts (
     id           INTEGER PRIMARY KEY,
     store        TEXT NOT NULL,
     memory_id    TEXT NOT NULL,
     verdict      TEXT NOT NULL CHECK (verdict IN ('confirmed', 'contradicted', 'changed', 'unverifiable', 'refused', 'manual')),
     verifier     TEXT,
     evidence     TEXT,
     fingerprint  TEXT,
     checked_at   TEXT NOT NULL,
     needs_person INTEGER NOT NULL DEFAULT 0,
     resolved_at  TEXT,
     resolution   TEXT
   )`,
  `CREATE INDEX IF NOT EXISTS drift_verdicts_by_memory ON drift_verdicts(store, memory_id, checked_at)`,
  `CREATE INDEX IF NOT EXISTS drift_verdicts_pending ON drift_verdicts(store, needs_person, resolved_at)`,
  // Digest: one row per (recipient list, day) with the period it covered and whether the server accepted it.
  DELIVERIES_DDL,
];

function migrateState(db: Db): void {
  db.transaction(() => MIGRATIONS.forEach((sql) => db.exec(sql)))();
}

export function addStateMigration(sql: string): void {
  if (!MIGRATIONS.includes(sql)) MIGRATIONS.push(sql);
}

export interface JobRun {
  id: number;
  job: string;
  store: string | null;
  started_at: string;
  finished_at: string | null;
  outcome: 'running' | 'ok' | 'failed';
  result: string | null;
  error: string | null;
}

export function recordRunStart(db: Db, job: string, store: string | null, at: Instant): number {
  return Number(db.prepare(`INSERT INTO job_runs (job, store, started_at, outcome) VALUES (?, ?, ?, 'running')`).run(job, store, toCanonical(at)).lastInsertRowid);
}

export function recordRunEnd(db: Db, id: number, at: Instant, outcome: 'ok' | 'failed', detail: unknown): void {
  // A job's result or error may carry a value from the environment (a verifier's URL): never stored as such.
  const text = outcome === 'ok' ? JSON.stringify(redactSecrets(detail ?? null)) : null;
  const error = outcome === 'failed' ? redactText(String(detail)) : null;
  db.prepare(`UPDATE job_runs SET finished_at = ?, outcome = ?, result = ?, error = ? WHERE id = ?`).run(toCanonical(at), outcome, text, error, id);
}

/** Runs that finished at or after `since` (canonical UTC text), newest first. */
export function runsSince(db: Db, since: string, outcome?: 'ok' | 'failed'): JobRun[] {
  const sql = `SELECT * FROM job_runs WHERE finished_at >= ? ${outcome ? 'AND outcome = ?' : ''} ORDER BY finished_at DESC, id DESC`;
  return db.prepare(sql).all(...(outcome ? [since, outcome] : [since])) as JobRun[];
}

export function lastRun(db: Db, job: string, store: string, outcome: 'ok' | 'failed' = 'ok'): JobRun | undefined {
  return db.prepare(`SELECT * FROM job_runs WHERE job = ? AND store = ? AND outcome = ? ORDER BY finished_at DESC, id DESC LIMIT 1`).get(job, store, outcome) as JobRun | undefined;
}
