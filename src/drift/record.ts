import type { Db } from '../store/sqlite.js';
import { toCanonical, type Instant } from '../time/instants.js';
import { redactSecrets, redactText } from '../text/secrets.js';

/**
 * drift_verdicts in the state db: every verdict a verifier or a person gave. An item "awaits a person" while
 * needs_person = 1 AND resolved_at IS NULL (the digest reads exactly that); a person's decision resolves it.
 */
export type { RecordedVerdict, VerdictRecord } from '../layouts/contract.js';
import type { RecordedVerdict, VerdictLog, VerdictRecord } from '../layouts/contract.js';


export interface VerdictRow {
  id: number;
  store: string;
  memory_id: string;
  verdict: RecordedVerdict;
  verifier: string | null;
  evidence: string | null;
  fingerprint: string | null;
  checked_at: string;
  needs_person: number;
  resolved_at: string | null;
  resolution: string | null;
}

/** Evidence and resolution pass the secrets redactor: a value from the environment is never stored. */
export function recordVerdict(state: Db, r: VerdictRecord): number {
  const sql = `INSERT INTO drift_verdicts (store, memory_id, verdict, verifier, evidence, fingerprint, checked_at, needs_person, resolved_at, resolution)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`;
  return Number(
    state
      .prepare(sql)
      .run(
        r.store, r.memoryId, r.verdict, r.verifier ?? null, r.evidence === undefined ? null : JSON.stringify(redactSecrets(r.evidence)),
        r.fingerprint ?? null, toCanonical(r.checkedAt), r.needsPerson ? 1 : 0,
        r.resolvedAt != null ? toCanonical(r.resolvedAt) : null, r.resolution != null ? redactText(r.resolution) : null,
      ).lastInsertRowid,
  );
}

/** What waits for a person in this store, oldest first. */
export function pendingItems(state: Db, store: string, memoryId?: string): VerdictRow[] {
  const where = `store = ? AND needs_person = 1 AND resolved_at IS NULL${memoryId !== undefined ? ' AND memory_id = ?' : ''}`;
  return state.prepare(`SELECT * FROM drift_verdicts WHERE ${where} ORDER BY checked_at, id`).all(...(memoryId !== undefined ? [store, memoryId] : [store])) as VerdictRow[];
}

export function pendingMemoryIds(state: Db, store: string): string[] {
  return (state.prepare(`SELECT DISTINCT memory_id FROM drift_verdicts WHERE store = ? AND needs_person = 1 AND resolved_at IS NULL`).all(store) as { memory_id: string }[]).map((r) => r.memory_id);
}

/** Close every pending item of one memory with the person's (or the job's) decision. */
export function resolvePending(state: Db, store: string, memoryId: string, at: Instant, resolution: string): number {
  return state
    .prepare(`UPDATE drift_verdicts SET resolved_at = ?, resolution = ? WHERE store = ? AND memory_id = ? AND needs_person = 1 AND resolved_at IS NULL`)
    .run(toCanonical(at), resolution, store, memoryId).changes;
}

/**
 * The last reading this verifier's source was accepted at: a confirmed verdict (the baseline a rule without `expect`
 * takes on its first read is one), or a person's decision on a reading. "changed" is measured against it, and a
 * contradiction with this same reading is not raised again. (Baselines recorded `unverifiable` by older versions count.)
 */
export function acceptedReading(state: Db, store: string, memoryId: string, verifier: string): VerdictRow | undefined {
  return state
    .prepare(
      `SELECT * FROM drift_verdicts
       WHERE store = ? AND memory_id = ? AND verifier = ? AND fingerprint IS NOT NULL
         AND (verdict IN ('confirmed', 'manual') OR (verdict = 'unverifiable' AND json_extract(evidence, '$.baseline') = 1))
       ORDER BY checked_at DESC, id DESC LIMIT 1`,
    )
    .get(store, memoryId, verifier) as VerdictRow | undefined;
}

/** Did drift write this row, as the replacement of a contradicted one (applyDecision records `supersedes`)? */
export function madeByDrift(state: Db, store: string, memoryId: string): boolean {
  return state.prepare(`SELECT 1 FROM drift_verdicts WHERE store = ? AND memory_id = ? AND json_extract(evidence, '$.supersedes') IS NOT NULL LIMIT 1`).get(store, memoryId) !== undefined;
}

export function verdictsFor(state: Db, store: string, memoryId: string): VerdictRow[] {
  return state.prepare(`SELECT * FROM drift_verdicts WHERE store = ? AND memory_id = ? ORDER BY checked_at, id`).all(store, memoryId) as VerdictRow[];
}

/**
 * A write to the agent's store and its record in the state db, committed together as far as two files allow:
 * the state transaction is opened first and committed last, so a failed store write records nothing.
 */
export function inBothTransactions<T>(state: Db, store: Db, fn: () => T): T {
  return state.transaction(() => store.transaction(fn).immediate()).immediate();
}

/** The state db as the VerdictLog a layout records through (src/layouts/contract.ts): layouts never hold the db. */
export function verdictLog(state: Db): VerdictLog {
  return {
    record: (v) => recordVerdict(state, v),
    together: (storeDb, fn) => (storeDb ? inBothTransactions(state, storeDb, fn) : state.transaction(fn).immediate()),
    begin: () => state.exec('BEGIN IMMEDIATE'),
    commit: () => {
      if (state.inTransaction) state.exec('COMMIT');
    },
    rollback: () => {
      if (state.inTransaction) state.exec('ROLLBACK');
    },
  };
}
