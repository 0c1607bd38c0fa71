import type { Layout } from './index.js';
import { checkStore } from '../check.js';
import { withConsistency } from '../store/consistency.js';
import { assertWardenSchema } from '../store/schema.js';
import { pruneWarden } from '../prune.js';
import { newRows } from '../digest/collect.js';
import { reviewDue, reviewDueCount } from '../drift/queue.js';
import { applyDecision } from '../drift/apply.js';
import { eraseWarden } from '../erase.js';
import { confirmWarden, currentWardenRow } from '../drift/review.js';

// Wrappers, not references: the modules they call import this one's registry back (resolved at call time).
/** The memory table of the brief, with an optional Qdrant side. */
export const wardenLayout: Layout = {
  name: 'warden',
  assertSchema: (db, store) => assertWardenSchema(db, store.db),
  collections: (store) => [...new Set(store.qdrant?.collections ?? [])],
  vectorFiles: () => [],
  prune: (store, ctx, opts) => pruneWarden(store, ctx, opts),
  async check(store, ctx) {
    const now = ctx.now();
    const sqlite = checkStore(store, {
      now,
      reviewAfterDays: ctx.config.review.afterDays,
      supersededAfterDays: ctx.config.prune.supersededAfterDays,
      progress: ctx.progress,
    });
    // With a Qdrant side: orphan points, rows without a point, payload text differing (streamed, page by page).
    return withConsistency(sqlite, store, { now, signal: ctx.signal, progress: ctx.progress });
  },
  newRows: async (store, period, maxRows, rules) => newRows(store.db, period, maxRows, rules),
  reviewDue: async (store, opts) => ({
    due: reviewDueCount(store.db, { ...opts, exclude: [] }),
    batch: reviewDue(store.db, opts),
  }),
  applyDrift: async (store, state, decision, now) => applyDecision(store.db, state, store.name, decision, now),
  confirm: async (store, state, id, now, record) => confirmWarden(store, state, id, now, record),
  currentMemory: (store, id) => currentWardenRow(store, id),
  corrections: true,
  erase: (store, sel, dryRun, opts) => eraseWarden(store, sel, dryRun, opts),
};
