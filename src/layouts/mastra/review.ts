import { appliedOf, type Applied, type ConfirmOptions, type CurrentMemory, type Decision, type StoreHandle, type VerdictLog } from '../contract.js';
import type { MemoryUnderReview } from '../../verifiers/types.js';
import { DAY_MS, type Instant } from '../../time/instants.js';
import { usageError } from '../../core/errors.js';
import { openMastra } from './files.js';
import { stampConfirmed, underReview, workingMemories, type WorkingMemory } from './working-memory.js';

// Review and drift over Mastra's working memory: due when not updated for afterDays; a confirmation
// stamps updatedAt; a contradiction goes to a person (Mastra keeps no superseded version); nothing else is written.

function withFiles<T>(store: StoreHandle, fn: (all: WorkingMemory[], f: ReturnType<typeof openMastra>) => T): T {
  const f = openMastra(store);
  try {
    return fn(workingMemories(f.db), f);
  } finally {
    f.close();
  }
}

/** Oldest first; an unparseable updatedAt counts as due (unknown is not fresh), ordered first. */
export function mastraReviewDue(store: StoreHandle, now: Instant, afterDays: number, limit: number, exclude: readonly string[]): { due: number; batch: MemoryUnderReview[] } {
  const skip = new Set(exclude);
  return withFiles(store, (all) => {
    const due = all.filter((m) => m.at === null || m.at <= now - afterDays * DAY_MS).sort((a, b) => (a.at ?? -Infinity) - (b.at ?? -Infinity) || a.id.localeCompare(b.id));
    return { due: due.length, batch: due.filter((m) => !skip.has(m.id)).slice(0, limit).map(underReview) };
  });
}

export function mastraCurrent(store: StoreHandle, id: string): CurrentMemory {
  return withFiles(store, (_all, f) => {
    const [m] = workingMemories(f.db, id);
    return m ? { ...underReview(m), superseded_by: null, expires_at: null } : null;
  });
}

export function confirmMastra(store: StoreHandle, { id, now, log, decided, guard }: ConfirmOptions): number {
  return withFiles(store, (_all, f) => {
    const [m] = workingMemories(f.db, id);
    if (guard) guard(m ? { ...underReview(m), superseded_by: null, expires_at: null } : null);
    if (!m || !stampConfirmed(f.db, m, now)) throw usageError(`no memory ${JSON.stringify(id)} in store ${store.name} (no working memory with that resource or thread id, or it changed meanwhile)`);
    return log.together(null, decided);
  });
}

export function applyMastraDecision(store: StoreHandle, log: VerdictLog, d: Decision, now: Instant): Applied {
  const stamped = d.verdict !== 'confirmed' ? null : withFiles(store, (_all, f) => {
    const [m] = workingMemories(f.db, d.memory.id);
    return m !== undefined && m.text === d.memory.fact && stampConfirmed(f.db, m, now);
  });
  return recordDecision(store.name, log, d, now, stamped);
}

/**
 * A verifier's decision on a working memory, recorded (both engines): `stamped`, for a confirmation, whether the
 * working memory was still the one verified and its confirmation written (null for any other verdict). Mastra keeps
 * no superseded version, so a contradiction that would supersede goes to a person.
 */
export function recordDecision(storeName: string, log: VerdictLog, d: Decision, now: Instant, stamped: boolean | null): Applied {
  const out = appliedOf(d);
  const record = { store: storeName, memoryId: d.memory.id, verdict: d.verdict, verifier: d.verifier, evidence: d.evidence, fingerprint: d.fingerprint, checkedAt: now, needsPerson: d.needsPerson };
  if (stamped === false) {
    const gone = 'the working memory changed or went while it was being verified';
    log.record({ ...record, verdict: 'unverifiable', evidence: { reason: gone }, fingerprint: null, needsPerson: false });
    return { ...out, verdict: 'unverifiable', skipped: gone, reason: gone };
  }
  if (d.verdict === 'contradicted' && d.supersede) {
    log.record({ ...record, evidence: { ...d.evidence, note: 'Mastra keeps no superseded version: a person replaces the working memory' }, needsPerson: true });
    return { ...out, needsPerson: true };
  }
  log.record(record);
  return out;
}
