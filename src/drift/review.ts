import { jobsOf } from '../layouts/registry.js';
import { userInfo } from 'node:os';
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Config } from '../config/config.js';
import { withStoreLock } from '../layouts/open.js';
import type { AnyStoreHandle } from '../layouts/contract.js';
import type { Db } from '../store/sqlite.js';
import { usageError } from '../core/errors.js';
import { LAST_INSTANT, parseDuration, toCanonical, type Instant } from '../time/instants.js';
import { pendingItems, pendingMemoryIds, recordVerdict, resolvePending, verdictLog, type VerdictRow } from './record.js';
import type { MemoryUnderReview } from '../verifiers/types.js';
import type { Correction, CurrentMemory, DecisionGuard } from '../layouts/contract.js';

/**
 * What a person does with the review queue. Each decision is one transaction on the store with its record in
 * the state db (verdict `manual`, with the resolution), and it resolves whatever of that memory waited for a person.
 */

export interface PendingItem {
  id: number;
  memoryId: string;
  verdict: VerdictRow['verdict'];
  verifier: string | null;
  checkedAt: string;
  evidence: unknown;
  /** The row as it is now; null when it no longer exists. */
  memory: CurrentMemory;
}

export interface ReviewList {
  store: string;
  now: string;
  /** Every live row due for review, waiting ones included. */
  dueTotal: number;
  /** What the next drift run takes (at most review.batch), oldest first. */
  next: MemoryUnderReview[];
  /** What waits for a person, with its evidence. */
  pending: PendingItem[];
}

export async function listReview(store: AnyStoreHandle, state: Db, config: Config, now: Instant): Promise<ReviewList> {
  const { afterDays, batch } = config.review;
  const waiting = pendingMemoryIds(state, store.name);
  const layout = await jobsOf(store);
  const { due: dueTotal, batch: next } = await layout.reviewDue(store, { now, afterDays, limit: batch, exclude: waiting });
  const pending: PendingItem[] = [];
  for (const p of pendingItems(state, store.name)) {
    pending.push({
      id: p.id,
      memoryId: p.memory_id,
      verdict: p.verdict,
      verifier: p.verifier,
      checkedAt: p.checked_at,
      evidence: p.evidence ? JSON.parse(p.evidence) : null,
      memory: await layout.currentMemory(store, p.memory_id),
    });
  }
  return { store: store.name, now: toCanonical(now), dueTotal, next, pending };
}

export interface ReviewDecision {
  store: string;
  id: string;
  action: 'confirm' | 'supersede' | 'expire' | 'delete';
  /** drift_verdicts.resolution: confirmed, superseded:<new id> (replaced: in place), expires:<time>, deleted */
  resolution: string;
  /** Items that were waiting for a person and are now resolved. */
  resolved: number;
  newId?: string;
  expiresAt?: string;
  deleted?: string[];
}

const decider = new AsyncLocalStorage<string>();

/** Run decisions as a named person (the review page's signed-in user); the CLI's decisions are the OS user's. */
export function asPerson<T>(name: string, fn: () => T): T {
  return decider.run(name, fn);
}

const person = () => {
  const named = decider.getStore();
  if (named !== undefined) return named;
  try {
    return userInfo().username;
  } catch {
    return process.env.USER ?? 'unknown';
  }
};


/** The manual record, resolving the pending items. Inside the state transaction. */
function recordManual(state: Db, store: string, id: string, now: Instant, resolution: string, detail: Record<string, unknown>): number {
  const waiting = pendingItems(state, store, id);
  // A person accepting a reading makes it the one "changed" is measured from next time.
  const reading = [...waiting].reverse().find((p) => p.fingerprint !== null);
  recordVerdict(state, {
    store, memoryId: id, verdict: 'manual', verifier: reading?.verifier ?? null,
    evidence: { by: person(), ...detail, ...(reading ? { current: JSON.parse(reading.evidence ?? '{}').current } : {}) },
    fingerprint: resolution === 'confirmed' ? reading?.fingerprint ?? null : null,
    checkedAt: now, resolvedAt: now, resolution,
  });
  return resolvePending(state, store, id, now, resolution);
}

/** How a decision is made: `guard` (the review page's) may refuse it on the row as it reads just before the write. */
export interface DecisionOptions {
  guard?: DecisionGuard;
}

export async function confirmMemory(store: AnyStoreHandle, state: Db, id: string, now: Instant, opts: DecisionOptions = {}): Promise<ReviewDecision> {
  const layout = await jobsOf(store);
  return withStoreLock(store, 'review confirm', async () => {
    const record = () => recordManual(state, store.name, id, now, 'confirmed', { action: 'confirm' });
    const resolved = await layout.confirm(store, { id, now, log: verdictLog(state), decided: record, ...opts });
    return { store: store.name, id, action: 'confirm' as const, resolution: 'confirmed', resolved };
  });
}




export async function supersedeMemory(store: AnyStoreHandle, state: Db, id: string, next: { fact: string; source: string }, now: Instant, opts: DecisionOptions = {}): Promise<ReviewDecision> {
  if (next.fact.trim() === '') throw usageError('review supersede: --fact must not be empty');
  if (next.source.trim() === '') throw usageError('review supersede: --source must not be empty (a fact that cannot be traced cannot be re-checked)');
  return correctMemory(store, state, id, { action: 'supersede', fact: next.fact, source: next.source }, now, opts);
}

/** The fact decays after all: give it an expiry (the next prune deletes it) instead of reviewing it again. */
export async function expireMemory(store: AnyStoreHandle, state: Db, id: string, inText: string, now: Instant, opts: DecisionOptions = {}): Promise<ReviewDecision> {
  const ms = parseDuration(inText);
  if (ms === null) throw usageError(`review expire: --in "${inText}" is not a duration like 7d, 12h, 30m`);
  if (now + ms > LAST_INSTANT) throw usageError(`review expire: --in "${inText}" is too far: the expiry would fall after 9999-12-31`);
  return correctMemory(store, state, id, { action: 'expire', expiresAt: toCanonical(now + ms) }, now, opts);
}

/** Delete through both stores, with what the layout deletes along with it (older versions pointing at it). */
export async function deleteMemory(store: AnyStoreHandle, state: Db, id: string, now: Instant, opts: DecisionOptions = {}): Promise<ReviewDecision> {
  return correctMemory(store, state, id, { action: 'delete' }, now, opts);
}

/** A correction through the store's layout, each memory it touches recorded as the person's decision. */
async function correctMemory(store: AnyStoreHandle, state: Db, id: string, correction: Correction, now: Instant, opts: DecisionOptions): Promise<ReviewDecision> {
  const layout = await jobsOf(store);
  if (!layout.correct) throw usageError(`review ${correction.action}: a ${layout.name} store cannot be corrected here; correct it through its own API (erase --ids deletes)`);
  const correct = layout.correct.bind(layout);
  return withStoreLock(store, `review ${correction.action}`, async () => {
    const done = await correct(store, {
      id, now, correction, log: verdictLog(state), ...opts,
      decided: (memoryId, resolution, detail) => recordManual(state, store.name, memoryId, now, resolution, detail),
    });
    return { store: store.name, id, action: correction.action, ...done };
  });
}
