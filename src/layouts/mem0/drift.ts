import type { StoreHandle } from '../contract.js';
import type { Instant } from '../../time.js';
import { mem0Confirm, mem0ReviewDue } from './memories.js';
import type { MemoryUnderReview } from '../../verifiers/types.js';
import type { Applied, ConfirmOptions, Decision, VerdictLog } from '../contract.js';
import { usageError } from '../../errors.js';

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
  const out: Applied = { id: d.memory.id, verdict: d.verdict, verifier: d.verifier, needsPerson: d.needsPerson };
  if (typeof d.evidence.reason === 'string') out.reason = d.evidence.reason;
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

/** mem0: the stamp goes through mem0's own update (no shared transaction with the state db), then the record. */
export async function confirmMem0(store: StoreHandle, { id, now, log, decided }: ConfirmOptions): Promise<number> {
  if (!(await mem0Confirm(store, id, now))) throw usageError(`no memory ${JSON.stringify(id)} in store ${store.name}`);
  return log.together(null, decided);
}
