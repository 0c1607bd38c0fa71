import type { JobContext } from './job.js';
import type { StoreHandle } from './store/open.js';
import { cascadeClosure, deleteWithCascade, type DeletedRow } from './store/delete.js';
import { EXPIRED_SQL, LONG_SUPERSEDED_SQL, PRUNABLE_SQL, pruneParams, type PruneRules } from './store/rules.js';
import { toCanonical } from './time.js';

type PruneReason = 'expired' | 'superseded' | 'cascaded';
import { withMaintenanceLock } from './store/lock.js';

export interface PruneResult {
  store: string;
  now: string;
  dryRun: boolean;
  deleted: number;
  expired: number;
  superseded: number;
  cascaded: number;
  batches: number;
  /** The deleted (or, dry run, doomed) ids, at most ID_CAP of them. */
  ids: string[];
  idsTruncated: boolean;
  durationMs: number;
}

const ID_CAP = 1000;

interface Candidate {
  rowid: number;
  reason: PruneReason;
}

/**
 * Both rules' candidates, read from the indexes. In rowid order: consecutive batches then touch neighbouring
 * table pages, so each page is written to the WAL about once instead of once per batch.
 */
export function pruneCandidates(store: Pick<StoreHandle, 'db'>, rules: PruneRules): Candidate[] {
  const params = pruneParams(rules);
  const found = new Map<number, Candidate>();
  const add = (reason: PruneReason, sql: string) => {
    for (const rowid of store.db.prepare(sql).pluck().all(params) as number[]) if (!found.has(rowid)) found.set(rowid, { rowid, reason });
  };
  // Rowids only: the expiry index covers the expired rule, so those candidates cost no table lookup at all.
  if (rules.expired) add('expired', `SELECT rowid FROM memory WHERE ${EXPIRED_SQL}`);
  add('superseded', `SELECT rowid FROM memory WHERE ${LONG_SUPERSEDED_SQL}`);
  return [...found.values()].sort((a, b) => a.rowid - b.rowid);
}

/** Each deleted row counts under the rule that selected it; one no rule selected went with the cascade. */
function tally(result: PruneResult, rows: DeletedRow[], reasons: Map<number, PruneReason>): void {
  for (const row of rows) {
    result[reasons.get(row.rowid) ?? 'cascaded'] += 1;
    result.deleted += 1;
    if (result.ids.length < ID_CAP) result.ids.push(row.id);
    else result.idsTruncated = true;
  }
}

/** Prune of the brief's memory table (with its Qdrant side when configured), in short batches. */
export async function pruneWarden(store: StoreHandle, ctx: JobContext, { dryRun }: { dryRun: boolean }): Promise<PruneResult> {
  const started = Date.now();
  const opts = ctx.config.prune;
  const rules: PruneRules = { now: ctx.now(), expired: opts.expired, supersededAfterDays: opts.supersededAfterDays };
  const result: PruneResult = {
    store: store.name, now: toCanonical(rules.now), dryRun,
    deleted: 0, expired: 0, superseded: 0, cascaded: 0, batches: 0, ids: [], idsTruncated: false, durationMs: 0,
  };
  const candidates = pruneCandidates(store, rules);
  const reasons = new Map(candidates.map((c) => [c.rowid, c.reason]));
  if (dryRun) {
    tally(result, cascadeClosure(store.db, candidates.map((r) => r.rowid), 'rowid'), reasons);
  } else if (candidates.length > 0) {
    await withMaintenanceLock(store.path, 'prune', () => deleteInBatches(store, ctx, candidates, rules, result, reasons));
  }
  result.durationMs = Date.now() - started;
  return result;
}

/** Batches are sized to take about `batchMs` each, with a pause after each, so the agent never waits long. */
async function deleteInBatches(
  store: StoreHandle, ctx: JobContext, candidates: Candidate[], rules: PruneRules, result: PruneResult, reasons: Map<number, PruneReason>,
): Promise<void> {
  const opts = ctx.config.prune;
  const rule = { sql: PRUNABLE_SQL, params: pruneParams(rules) };
  // Start small (the first batch meets a cold cache) and let the measured time size the next, at most doubling.
  let size = Math.min(opts.batchSize, 100);
  for (let i = 0; i < candidates.length; ) {
    if (ctx.signal.aborted) {
      ctx.log.warn({ store: store.name, done: result.deleted }, 'prune interrupted; the next run finishes it');
      return;
    }
    const roots = candidates.slice(i, i + size).map((r) => r.rowid);
    i += roots.length;
    const t0 = performance.now();
    const deleted = await deleteWithCascade(store.db, roots, { key: 'rowid', vectors: store.vectors, recheck: rule });
    tally(result, deleted, reasons);
    result.batches += 1;
    const took = Math.max(1, performance.now() - t0);
    size = Math.max(50, Math.min(opts.batchSize, 2 * size, Math.round((size * opts.batchMs) / took)));
    // A little jitter, so the pause never falls into step with the agent's busy-handler sleeps.
    if (opts.pauseMs > 0) await new Promise((r) => setTimeout(r, opts.pauseMs * (1 + Math.random())));
  }
}
