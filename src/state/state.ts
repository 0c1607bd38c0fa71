import { dirname } from 'node:path';
import { setJournalMode, type Db } from '../store/sqlite.js';
import { ensurePrivateDir, openPrivateDb } from '../store/private-file.js';
import { toCanonical, type Instant } from '../time/instants.js';
import { assertNoForeignTables, migrateState } from './migrate.js';
import { redactSecrets, redactText } from '../text/secrets.js';

/**
 * memory-warden's own records, kept apart from the agent's store (we never add tables to it): job runs and
 * their outcome, and whatever later features must remember across restarts (digest deliveries, drift
 * verdicts, erase receipts). Durable on disk: Redis here may keep nothing.
 */
export function openStateDb(path: string): Db {
  ensurePrivateDir(dirname(path), false);
  // Only a regular file of its own, and one that holds someone else's tables (an agent's store) is refused before
  // anything of it changes: its mode, its journal (src/store/private-file.ts).
  const db = openPrivateDb(path, { name: 'open state db', fix: 'give stateDb a file of its own', check: (d) => assertNoForeignTables(d, path), options: { timeout: 5000 } });
  try {
    db.pragma('foreign_keys = ON');
    setJournalMode(db, 'wal'); // busy at once, without the timeout, while another process creates it too
    migrateState(db, path); // its tables: src/state/migrations/, in order
  } catch (err) {
    db.close();
    throw err;
  }
  return db;
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
