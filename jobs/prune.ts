import { z } from 'zod';
import { defineJob, type JobContext } from '../src/job.js';
import { openStore, type StoreHandle } from '../src/store/open.js';
import { cascadeClosure, deleteWithCascade, type DoomedRow } from '../src/store/delete.js';
import { pruneReason, qualifiesForPrune, supersededCutoff, type PruneRules, type PruneReason } from '../src/store/rules.js';
import { CANONICAL_GLOB, textUpperBound, toCanonical } from '../src/time.js';
import { withMaintenanceLock } from '../src/store/lock.js';

export const payloadSchema = z.strictObject({
  store: z.string().min(1),
  dryRun: z.boolean().default(false),
});
export type PrunePayload = z.infer<typeof payloadSchema>;

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

/**
 * Candidates of both rules in one read. Canonical timestamps are compared as text on the index; any other
 * form goes through warden_epoch (an instant), and the text bound keeps that to rows near the boundary.
 * The final word is the exact check in JS (qualifiesForPrune) inside each write transaction.
 */
const EXPIRED_SQL = `
SELECT rowid, id, expires_at, superseded_by, created_at FROM memory
WHERE expires_at < @upper
  AND ((expires_at GLOB @glob AND datetime(expires_at) = expires_at AND expires_at <= @nowText)
    OR (NOT expires_at GLOB @glob AND warden_epoch(expires_at) <= @nowMs))`;

const SUPERSEDED_SQL = `
SELECT rowid, id, expires_at, superseded_by, created_at FROM memory
WHERE superseded_by IS NOT NULL AND created_at < @upper
  AND ((created_at GLOB @glob AND datetime(created_at) = created_at AND created_at < @cutText)
    OR (NOT created_at GLOB @glob AND warden_epoch(created_at) < @cutMs))`;

type Candidate = DoomedRow & { rowid: number };

/**
 * Candidates in rowid order: consecutive batches then touch neighbouring table pages, so each page is written
 * to the WAL about once instead of once per batch (4x faster on a large store than index order).
 */
export function pruneCandidates(store: Pick<StoreHandle, 'db'>, rules: PruneRules): Candidate[] {
  const found = new Map<string, Candidate>();
  const glob = CANONICAL_GLOB;
  if (rules.expired) {
    const rows = store.db.prepare(EXPIRED_SQL).all({ upper: textUpperBound(rules.now), glob, nowText: toCanonical(rules.now), nowMs: rules.now });
    for (const r of rows as Candidate[]) found.set(r.id, r);
  }
  const cut = supersededCutoff(rules);
  const rows = store.db.prepare(SUPERSEDED_SQL).all({ upper: textUpperBound(cut), glob, cutText: toCanonical(cut), cutMs: cut });
  for (const r of rows as Candidate[]) found.set(r.id, r);
  return [...found.values()].sort((a, b) => a.rowid - b.rowid);
}

function tally(result: PruneResult, rows: DoomedRow[], rules: PruneRules): void {
  for (const row of rows) {
    const reason: PruneReason = pruneReason(row, rules);
    result[reason] += 1;
    result.deleted += 1;
    if (result.ids.length < ID_CAP) result.ids.push(row.id);
    else result.idsTruncated = true;
  }
}

export async function prune(payload: PrunePayload, ctx: JobContext): Promise<PruneResult> {
  const started = Date.now();
  const { prune: opts } = ctx.config;
  const rules: PruneRules = { now: ctx.now(), expired: opts.expired, supersededAfterDays: opts.supersededAfterDays };
  const result: PruneResult = {
    store: payload.store, now: toCanonical(rules.now), dryRun: payload.dryRun,
    deleted: 0, expired: 0, superseded: 0, cascaded: 0, batches: 0, ids: [], idsTruncated: false, durationMs: 0,
  };
  const store = openStore(ctx.config, payload.store);
  try {
    const candidates = pruneCandidates(store, rules);
    if (payload.dryRun) {
      tally(result, cascadeClosure(store.db, candidates.map((r) => r.id)), rules);
    } else if (candidates.length > 0) {
      await withMaintenanceLock(store.path, 'prune', async () => {
        // Batches are sized to take about batchMs each, so the agent never waits long for the write lock.
        let size = opts.batchSize;
        for (let i = 0; i < candidates.length; ) {
          if (ctx.signal.aborted) {
            ctx.log.warn({ store: store.name, done: result.deleted }, 'prune interrupted; the next run finishes it');
            break;
          }
          const roots = candidates.slice(i, i + size).map((r) => r.id);
          i += roots.length;
          const started = performance.now();
          const deleted = await deleteWithCascade(store.db, roots, {
            vectors: store.vectors,
            stillQualifies: (row) => qualifiesForPrune(row, rules),
          });
          tally(result, deleted, rules);
          result.batches += 1;
          const took = Math.max(1, performance.now() - started);
          size = Math.max(50, Math.min(opts.batchSize, Math.round((size * opts.batchMs) / took)));
          // Leave the write lock free for a moment so the agent's next write gets in between batches.
          if (opts.pauseMs > 0) await new Promise((r) => setTimeout(r, opts.pauseMs));
        }
      });
    }
  } finally {
    store.close();
  }
  result.durationMs = Date.now() - started;
  ctx.log.info({ deleted: result.deleted, expired: result.expired, superseded: result.superseded, cascaded: result.cascaded, dryRun: result.dryRun }, 'prune done');
  return result;
}

export default defineJob({ name: 'prune', writes: true, schema: payloadSchema, run: prune });
