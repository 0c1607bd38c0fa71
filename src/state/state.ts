import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { setJournalMode, type Db } from '../store/sqlite.js';
import { ensurePrivateDir, openPrivateDb } from '../store/private-file.js';
import { parseInstant, toCanonical, type Instant } from '../time/instants.js';
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
  /** The scheduled run it was (scheduler and due time), null for a run started by hand. */
  scheduled_run: string | null;
  /** The process that ran it (null before version 8). */
  pid: number | null;
}

export function recordRunStart(db: Db, job: string, store: string | null, at: Instant): number {
  return Number(db.prepare(`INSERT INTO job_runs (job, store, started_at, outcome, pid) VALUES (?, ?, ?, 'running', ?)`).run(job, store, toCanonical(at), process.pid).lastInsertRowid);
}

/** What claimScheduledRun found: a new 'running' row to fill in, or why the run does not start. */
export type ScheduledRunClaim =
  | { runId: number }
  | { alreadyRan: { runId: number; finishedAt: string } }
  | { inProgress: { runId: number; pid: number } };

/**
 * Start a scheduled run on this host, at most once: if the state db already has it finished 'ok', it is not
 * started again; if it has it 'running' in a process that is still alive, it is not started beside it. A 'running'
 * row of a dead process (killed before it finished) does not count: that run never finished, so this is not a
 * second one. The look and the INSERT are one BEGIN IMMEDIATE, so two processes of one host cannot both pass.
 */
export function claimScheduledRun(db: Db, job: string, store: string | null, scheduledRun: string, at: Instant, pid = process.pid): ScheduledRunClaim {
  return db.transaction((): ScheduledRunClaim => {
    const done = db.prepare(`SELECT id, finished_at FROM job_runs WHERE scheduled_run = ? AND outcome = 'ok' ORDER BY id LIMIT 1`).get(scheduledRun) as { id: number; finished_at: string } | undefined;
    if (done) return { alreadyRan: { runId: done.id, finishedAt: done.finished_at } };
    const running = db.prepare(`SELECT id, pid, started_at FROM job_runs WHERE scheduled_run = ? AND outcome = 'running' AND pid IS NOT NULL ORDER BY id`).all(scheduledRun) as { id: number; pid: number; started_at: string }[];
    const live = running.find((r) => processRunsSince(r.pid, parseInstant(r.started_at)));
    if (live) return { inProgress: { runId: live.id, pid: live.pid } };
    const runId = db.prepare(`INSERT INTO job_runs (job, store, started_at, outcome, scheduled_run, pid) VALUES (?, ?, ?, 'running', ?, ?)`).run(job, store, toCanonical(at), scheduledRun, pid).lastInsertRowid;
    return { runId: Number(runId) };
  }).immediate();
}

/**
 * Whether process `pid` is alive and is the one that started a run at `since`: a process that began well after it
 * (its start time from /proc, where there is one) got the pid of a dead one reused, and does not count.
 */
export function processRunsSince(pid: number, since: Instant | null): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'; // alive, another user's
  }
  const started = processStartedAt(pid);
  // started_at is whole seconds and the boot time too: two seconds of slack.
  return started === null || since === null || started <= since + 2000;
}

/** When a process started, from /proc (Linux: boot time + its start in clock ticks, 100 a second); null elsewhere. */
function processStartedAt(pid: number): Instant | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const ticks = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]); // field 22; the name may hold spaces
    const boot = Number(/^btime (\d+)$/m.exec(readFileSync('/proc/stat', 'utf8'))?.[1]);
    return Number.isFinite(ticks) && Number.isFinite(boot) ? boot * 1000 + ticks * 10 : null;
  } catch {
    return null;
  }
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

/**
 * When each job last succeeded, by store (`*` for a job of every store, the digest), as job_runs says: canonical UTC.
 * The one record of it: /healthz and the worker's metric read it here, and each worker publishes its host's part
 * to Redis for `fleet` (src/queue/fleet.ts publishSuccesses). A dry run is never in job_runs (src/job/runner.ts).
 */
export function lastSuccesses(db: Db): Record<string, Record<string, string>> {
  const rows = db
    .prepare(`SELECT job, coalesce(store, '*') AS store, max(finished_at) AS at FROM job_runs WHERE outcome = 'ok' GROUP BY job, store`)
    .all() as { job: string; store: string; at: string }[];
  const out: Record<string, Record<string, string>> = {};
  for (const r of rows) (out[r.store] ??= {})[r.job] = r.at;
  return out;
}

export function lastRun(db: Db, job: string, store: string, outcome: 'ok' | 'failed' = 'ok'): JobRun | undefined {
  return db.prepare(`SELECT * FROM job_runs WHERE job = ? AND store = ? AND outcome = ? ORDER BY finished_at DESC, id DESC LIMIT 1`).get(job, store, outcome) as JobRun | undefined;
}

/**
 * Note that work went through the queue under `prefix` (a worker started, a job was sent): Redis may then hold memory
 * text, and an erase that cannot reach it says so rather than "nothing left" (migration 010, src/erase/redis.ts).
 */
export function recordQueueUse(path: string, prefix: string, what: 'worker' | 'job sent', at: Instant): void {
  const db = openStateDb(path);
  try {
    const t = toCanonical(at);
    db.prepare(`INSERT INTO queue_use (prefix, first_at, last_at, what) VALUES (?, ?, ?, ?)
                ON CONFLICT (prefix) DO UPDATE SET last_at = excluded.last_at, what = excluded.what`).run(prefix, t, t, what);
  } finally {
    db.close();
  }
}

/**
 * Whether this state db records work that went through the queue: a worker started or a job sent (queue_use), or,
 * from before that was recorded, a scheduled run (only the worker runs those).
 */
export function queueUsed(db: Db): { used: boolean; why: string } {
  const row = db.prepare(`SELECT prefix, what, last_at FROM queue_use ORDER BY last_at DESC LIMIT 1`).get() as { prefix: string; what: string; last_at: string } | undefined;
  if (row) return { used: true, why: `${row.what === 'worker' ? 'a worker ran' : 'a job was sent'} through the queue here (prefix ${row.prefix}, last ${row.last_at})` };
  const run = db.prepare(`SELECT job, store, started_at FROM job_runs WHERE scheduled_run IS NOT NULL ORDER BY id DESC LIMIT 1`).get() as { job: string; store: string | null; started_at: string } | undefined;
  if (run) return { used: true, why: `a worker ran scheduled jobs here (the last: ${run.job}${run.store ? ` ${run.store}` : ''} at ${run.started_at})` };
  return { used: false, why: 'no worker ran here and no job was sent through the queue' };
}
