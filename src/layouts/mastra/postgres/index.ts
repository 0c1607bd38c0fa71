import type { PostgresLayout } from '../../contract.js';
import { assertMastraSchemaPg, initMastraPg } from './schema.js';

/**
 * Mastra's memory in @mastra/pg's PostgresStore tables, its semantic-recall vectors in PgVector's tables (the same
 * schema, another, or another database: `mastra.pgvector`), docs/mastra-layout.md#on-postgresql. Each job's code is
 * loaded when that job asks for it.
 */
export const mastraOnPostgres: PostgresLayout = {
  name: 'mastra',
  assertSchema: assertMastraSchemaPg,
  init: initMastraPg,
  collections: () => [],
  prune: async (store, opts) => (await import('./prune.js')).mastraPrunePg(store, opts),
  check: async (store, opts) => (await import('./check.js')).mastraCheckPg(store, opts),
  newRows: async (store, opts) => (await import('./digest.js')).mastraNewRowsPg(store, opts),
  reviewDue: async (store, opts) => (await import('./review.js')).reviewDuePg(store, opts),
  applyDrift: async (store, opts) => (await import('./review.js')).applyMastraDecisionPg(store, opts),
  confirm: async (store, opts) => (await import('./review.js')).confirmMastraPg(store, opts),
  currentMemory: async (store, id) => (await import('./review.js')).currentPg(store, id),
  correct: async (store, opts) => (await import('./review.js')).correctMastraPg(store, opts),
  corrects: ['supersede', 'delete'],
  erase: async (store, { selector, dryRun, ...opts }) => (await import('./erase.js')).eraseMastraPg(store, selector, dryRun, opts),
  erasedIn: async (store, ledger) => (await import('./erase.js')).mastraErasedInPg(store, ledger),
};
