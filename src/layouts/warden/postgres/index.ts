import type { PostgresLayout } from '../../contract.js';
import { assertWardenSchemaPg, initWardenPg } from './schema.js';

/**
 * The memory table of the brief in a PostgreSQL schema: init, check, prune, the digest's rows, review, drift, erase
 * and the repairs, beside agents writing over their own connections. Each job's code is loaded when that job asks for it.
 */
export const wardenOnPostgres: PostgresLayout = {
  name: 'warden',
  assertSchema: assertWardenSchemaPg,
  init: initWardenPg,
  collections: (store) => [...new Set(store.qdrant?.collections ?? [])],
  // The erase ledger's hook is not passed on, as on SQLite (../index.ts): a warden row carries no user, so the ledger
  // would record nothing of it, and a prune told nothing before each commit takes its quicker way (prune.ts).
  prune: async (store, { ctx, dryRun }) => (await import('./prune.js')).prunePg(store, { ctx, dryRun }),
  check: async (store, opts) => {
    const report = await (await import('./check.js')).checkWardenPg(store, opts);
    const { ctx } = opts;
    if (store.config.postgres?.vectors) return (await import('./consistency.js')).withPgvectorConsistency(report, store, ctx.now());
    if (!store.vectors) return report;
    return (await import('./consistency.js')).withQdrantConsistency(report, store, { now: ctx.now(), signal: ctx.signal, progress: ctx.progress });
  },
  newRows: async (store, opts) => (await import('./new-rows.js')).newRowsPg(store, opts),
  reviewDue: async (store, opts) => (await import('./review.js')).reviewDuePg(store, opts),
  applyDrift: async (store, opts) => (await import('./apply.js')).applyDriftPg(store, opts),
  confirm: async (store, opts) => (await import('./review.js')).confirmPg(store, opts),
  currentMemory: async (store, id) => (await import('./review.js')).currentRowPg(store.pg, store.schema, id),
  correct: async (store, opts) => (await import('./correct.js')).correctPg(store, opts),
  erase: async (store, { selector, dryRun, ...opts }) => (await import('./erase.js')).eraseWardenPg(store, selector, dryRun, opts),
  erasedIn: async (store, ledger) => (await import('./erase.js')).wardenErasedInPg(store, ledger),
  repairDangling: async (store) => (await import('./repair.js')).repairDanglingPg(store),
  repairTimestamps: async (store) => (await import('./repair.js')).repairTimestampsPg(store),
  repairOrphans: async (store, opts) => (await import('./repair.js')).repairOrphansPg(store, opts),
};
