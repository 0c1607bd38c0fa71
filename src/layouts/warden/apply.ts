import { randomUUID } from 'node:crypto';
import type { Db } from '../../store/sqlite.js';
import { toCanonical, type Instant } from '../../time/instants.js';
import { appliedOf, type Applied, type Decision, type VerdictLog } from '../contract.js';

export type { Applied } from '../contract.js';

interface CurrentRow {
  fact: string;
  source: string;
  superseded_by: string | null;
}

/**
 * Write one decision: the store change and its record together (log.together). The row is read again
 * inside the transaction; if the agent changed or superseded it meanwhile, nothing is written to the store.
 *  - confirmed: confirmed_at = now
 *  - contradicted with autoSupersede: insert the replacement, point the old row's superseded_by at it
 *  - otherwise nothing changes in the store; changed, contradicted without autoSupersede, refused and rows no rule
 *    matches are left for a person.
 */
export function applyDecision(storeDb: Db, log: VerdictLog, store: string, d: Decision, now: Instant): Applied {
  const at = toCanonical(now);
  return log.together(storeDb, (): Applied => {
    const out = appliedOf(d);
    const row = storeDb.prepare(`SELECT fact, source, superseded_by FROM memory WHERE id = ?`).get(d.memory.id) as CurrentRow | undefined;
    const moved = !row ? 'the row was deleted while it was being verified'
      : row.superseded_by !== null ? 'the row was superseded while it was being verified'
      : row.fact !== d.memory.fact || row.source !== d.memory.source ? 'the row was rewritten while it was being verified'
      : undefined;
    if (moved) {
      log.record({ store, memoryId: d.memory.id, verdict: 'unverifiable', verifier: d.verifier, evidence: { reason: moved }, checkedAt: now });
      return { ...out, verdict: 'unverifiable', needsPerson: false, skipped: moved, reason: moved };
    }
    const record = { store, memoryId: d.memory.id, verdict: d.verdict, verifier: d.verifier, evidence: d.evidence, fingerprint: d.fingerprint, checkedAt: now, needsPerson: d.needsPerson };
    if (d.verdict === 'confirmed') {
      storeDb.prepare(`UPDATE memory SET confirmed_at = ? WHERE id = ?`).run(at, d.memory.id);
      log.record(record);
    } else if (d.verdict === 'contradicted' && d.supersede) {
      // Another live row of this subject may already say it (rows sharing a source): point at it, insert no twin.
      const existing = sameReplacement(storeDb, d.memory.id, d.supersede);
      if (existing) storeDb.prepare(`UPDATE memory SET superseded_by = ? WHERE id = ?`).run(existing, d.memory.id);
      const newId = existing ?? supersedeRow(storeDb, d.memory.id, d.supersede, now);
      log.record({ ...record, resolvedAt: now, resolution: `superseded:${newId}` });
      // The new row starts from the reading that produced it, so "changed" is measured from there next time.
      if (!existing) log.record({ store, memoryId: newId, verdict: 'confirmed', verifier: d.verifier, evidence: { supersedes: d.memory.id, current: d.evidence.current }, fingerprint: d.fingerprint, checkedAt: now });
      out.supersededBy = newId;
    } else {
      log.record(record);
    }
    return out;
  });
}

/** A live, non-expiring row of the same subject that already says what the replacement says. */
function sameReplacement(storeDb: Db, oldId: string, next: { fact: string; source: string }): string | undefined {
  const hit = storeDb
    .prepare(
      `SELECT n.id FROM memory n JOIN memory o ON o.id = ? AND n.subject = o.subject
       WHERE n.id <> o.id AND n.fact = ? AND n.source = ? AND n.superseded_by IS NULL AND n.expires_at IS NULL ORDER BY n.created_at, n.id LIMIT 1`,
    )
    .get(oldId, next.fact, next.source) as { id: string } | undefined;
  return hit?.id;
}

/**
 * The correction pair of BRIEF.md: insert the new fact (same subject, confirmed now, no expiry) and point the old
 * row at it. Call inside a write transaction. Returns the new id.
 */
export function supersedeRow(storeDb: Db, oldId: string, next: { fact: string; source: string }, now: Instant): string {
  const old = storeDb.prepare(`SELECT subject FROM memory WHERE id = ? AND superseded_by IS NULL`).get(oldId) as { subject: string } | undefined;
  if (!old) throw new Error(`${oldId}: no live row to supersede`);
  const newId = `m_${randomUUID()}`;
  const at = toCanonical(now);
  storeDb
    .prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at, expires_at, superseded_by) VALUES (?, ?, ?, ?, ?, ?, NULL, NULL)`)
    .run(newId, old.subject, next.fact, next.source, at, at);
  storeDb.prepare(`UPDATE memory SET superseded_by = ? WHERE id = ?`).run(newId, oldId);
  return newId;
}
