import type { Layout } from '../contract.js';
import { checkStoreConcurrently } from './check.js';
import { withConsistency } from './consistency.js';
import { assertWardenSchema } from './schema.js';
import { pruneWarden } from './prune.js';
import { newRows } from './new-rows.js';
import { reviewDue, reviewDueCount } from './queue.js';
import { applyDecision } from './apply.js';
import { eraseWarden } from './erase.js';
import { confirmWarden, currentWardenRow } from './review.js';
import { correctWarden } from './correct.js';

/** The memory table of the brief, with an optional Qdrant side. */
export const wardenLayout: Layout = {
  name: 'warden',
  assertSchema: (db, store) => assertWardenSchema(db, store.db),
  collections: (store) => [...new Set(store.qdrant?.collections ?? [])],
  vectorFiles: () => [],
  prune: (store, { ctx, dryRun }) => pruneWarden(store, ctx, { dryRun }),
  async check(store, { ctx }) {
    const now = ctx.now();
    const sqlite = await checkStoreConcurrently(store, {
      now,
      reviewAfterDays: ctx.config.review.afterDays,
      supersededAfterDays: ctx.config.prune.supersededAfterDays,
      progress: ctx.progress,
    });
    // With a Qdrant side: orphan points, rows without a point, payload text differing (streamed, page by page).
    return withConsistency(sqlite, store, { now, signal: ctx.signal, progress: ctx.progress });
  },
  newRows: async (store, { period, maxRows, lookTwice }) => newRows(store.db, period, maxRows, lookTwice),
  reviewDue: async (store, opts) => ({
    due: reviewDueCount(store.db, { ...opts, exclude: [] }),
    batch: reviewDue(store.db, opts),
  }),
  applyDrift: async (store, { decision, now, log }) => applyDecision(store.db, log, store.name, decision, now),
  confirm: async (store, opts) => confirmWarden(store, opts),
  currentMemory: (store, id) => currentWardenRow(store, id),
  correct: correctWarden,
  erase: (store, { selector, dryRun, ...opts }) => eraseWarden(store, selector, dryRun, opts),
};
