import type { Layout } from '../contract.js';
import { assertWardenSchema } from './schema.js';
import { currentWardenRow } from './review.js';
import { reviewQueueConcurrently } from './queue.js';

/**
 * The memory table of the brief, with an optional Qdrant side. Each job's code is imported when that job asks for
 * it: `check` loads the check, not prune's deletes, erase's sweeps or the Qdrant consistency check of a store
 * that has no Qdrant (test/cli-startup.test.ts lists what `check` loads).
 */
export const wardenLayout: Layout = {
  name: 'warden',
  schemaOwner: { by: 'memory-warden' },
  assertSchema: (db, store) => assertWardenSchema(db, store.db),
  collections: (store) => [...new Set(store.qdrant?.collections ?? [])],
  vectorFiles: () => [],
  copyNames: [{ table: 'memory', ids: [{ column: 'id' }], users: [{ column: 'user_id' }, { column: 'subject' }] }],
  prune: async (store, { ctx, dryRun }) => (await import('./prune.js')).pruneWarden(store, ctx, { dryRun }),
  async check(store, { ctx }) {
    const now = ctx.now();
    const { checkStoreConcurrently } = await import('./check.js');
    const sqlite = await checkStoreConcurrently(store, {
      now,
      reviewAfterDays: ctx.config.review.afterDays,
      supersededAfterDays: ctx.config.prune.supersededAfterDays,
      progress: ctx.progress,
    });
    if (!store.vectors) return sqlite; // what withConsistency returns too, with nothing to compare
    // With a Qdrant side: orphan points, rows without a point, payload text differing (streamed, page by page).
    const { withConsistency } = await import('./consistency.js');
    return withConsistency(sqlite, store, { now, signal: ctx.signal, progress: ctx.progress });
  },
  newRows: async (store, { period, maxRows, lookTwice }) => (await import('./new-rows.js')).newRows(store.db, period, maxRows, lookTwice),
  // Not imported when asked: the scan goes to the store thread as the call is made, before the caller reads on.
  reviewDue: (store, opts) => reviewQueueConcurrently(store, opts),
  applyDrift: async (store, { decision, now, log }) => (await import('./apply.js')).applyDecision(store.db, log, store.name, decision, now),
  confirm: async (store, opts) => (await import('./review.js')).confirmWarden(store, opts),
  currentMemory: async (store, id) => currentWardenRow(store, id),
  correct: async (store, opts) => (await import('./correct.js')).correctWarden(store, opts),
  erase: async (store, { selector, dryRun, ...opts }) => (await import('./erase.js')).eraseWarden(store, selector, dryRun, opts),
  erasedIn: async (store, ledger) => (await import('./erased-in.js')).wardenErasedIn(store, ledger),
  repairDangling: async (store) => (await import('./repair.js')).repairDangling(store),
  repairTimestamps: async (store) => (await import('./repair.js')).repairTimestamps(store),
  repairOrphans: async (store, opts) => (await import('./consistency.js')).repairOrphans(store, opts),
};
