import type { StoreHandle } from '../contract.js';
import type { Instant } from '../../time/instants.js';
import { createdAtOf, expirationOf, mem0Confirm, mem0Handle, mem0ReviewDue, sourceOf, subjectOf, textOf, updatedAtOf } from './memories.js';
import type { MemoryUnderReview } from '../../verifiers/types.js';
import { appliedOf, type Applied, type ConfirmOptions, type CurrentMemory, type Decision, type VerdictLog } from '../contract.js';
import { usageError } from '../../core/errors.js';

/**
 * Drift on a mem0 deployment (docs/mem0-layout.md). The queue is mem0's memories by `updated_at`; a confirmation
 * sets `updated_at` (src/layouts/mem0/memories.ts). mem0 has no superseded_by, so a contradiction always goes to a person,
 * with the proposed replacement in the evidence; nothing else is written to mem0.
 */
export async function mem0Queue(store: StoreHandle, now: Instant, afterDays: number, batch: number, exclude: readonly string[]): Promise<MemoryUnderReview[]> {
  const skip = new Set(exclude);
  const { batch: found } = await mem0ReviewDue(store, now, afterDays, batch + skip.size);
  return found
    .filter((m) => !skip.has(m.id))
    .slice(0, batch)
    .map((m) => ({ id: m.id, subject: m.subject, fact: m.fact, source: m.source, confirmed_at: m.confirmed_at ?? '' }));
}

export async function applyMem0Decision(store: StoreHandle, log: VerdictLog, d: Decision, now: Instant): Promise<Applied> {
  const out = appliedOf(d);
  const record = { store: store.name, memoryId: d.memory.id, verdict: d.verdict, verifier: d.verifier, evidence: d.evidence, fingerprint: d.fingerprint, checkedAt: now, needsPerson: d.needsPerson };
  if (d.verdict === 'confirmed') {
    // Recorded only once the point is updated: a failed write to Qdrant records nothing and is retried next run.
    if (!(await mem0Confirm(store, d.memory.id, now))) {
      const gone = 'the memory was deleted while it was being verified';
      log.record({ ...record, verdict: 'unverifiable', evidence: { reason: gone }, fingerprint: null, needsPerson: false });
      return { ...out, verdict: 'unverifiable', skipped: gone, reason: gone };
    }
  }
  if (d.verdict === 'contradicted' && d.supersede) {
    const evidence = { ...d.evidence, note: 'mem0 has no superseded_by: a person applies the replacement' };
    log.record({ ...record, evidence, needsPerson: true });
    return { ...out, needsPerson: true };
  }
  log.record(record);
  return out;
}

/**
 * mem0: the stamp goes through mem0's own update (no shared transaction with the state db), then the record. mem0
 * has no transaction to guard in: the guard reads the point just before the update.
 */
export async function confirmMem0(store: StoreHandle, { id, now, log, decided, guard }: ConfirmOptions): Promise<number> {
  if (guard) guard(await mem0Current(store, id));
  if (!(await mem0Confirm(store, id, now))) throw usageError(`no memory ${JSON.stringify(id)} in store ${store.name}`);
  return log.together(null, decided);
}

/** The point as the review page shows it: text, who it is about, its source, its stamp and its expiry as stored. */
export async function mem0Current(store: StoreHandle, id: string): Promise<CurrentMemory> {
  const h = mem0Handle(store);
  const [p] = await h.points.retrieve(h.collection, [id]);
  if (!p) return null;
  const expiry = expirationOf(p);
  return {
    id: p.id, subject: subjectOf(p), fact: textOf(p) ?? '', source: sourceOf(p.payload.actor_id, p.payload.role),
    confirmed_at: updatedAtOf(p) ?? createdAtOf(p) ?? '', superseded_by: null,
    expires_at: expiry === undefined || expiry === null ? null : typeof expiry === 'string' ? expiry : JSON.stringify(expiry),
  };
}
