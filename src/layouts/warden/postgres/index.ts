import { usageError } from '../../../core/errors.js';
import type { PostgresLayout, PostgresStoreHandle } from '../../contract.js';
import { assertWardenSchemaPg, initWardenPg } from './schema.js';

/** A job this layout does not do on PostgreSQL yet: refused before it could do anything (docs/postgres.md). */
const notYet = (what: string) => async (store: PostgresStoreHandle): Promise<never> => {
  throw usageError(`store ${store.name}: ${what} does not support PostgreSQL stores yet (docs/postgres.md)`);
};

/**
 * The memory table of the brief in a PostgreSQL schema: init, check and prune, the digest's rows, review and drift,
 * beside agents writing over their own connections. Each job's code is loaded when that job asks for it.
 */
export const wardenOnPostgres: PostgresLayout = {
  name: 'warden',
  assertSchema: assertWardenSchemaPg,
  init: initWardenPg,
  collections: (store) => [...new Set(store.qdrant?.collections ?? [])],
  prune: async (store, opts) => (await import('./prune.js')).prunePg(store, opts),
  check: async (store, opts) => (await import('./check.js')).checkWardenPg(store, opts),
  newRows: async (store, opts) => (await import('./new-rows.js')).newRowsPg(store, opts),
  reviewDue: async (store, opts) => (await import('./review.js')).reviewDuePg(store, opts),
  applyDrift: async (store, opts) => (await import('./apply.js')).applyDriftPg(store, opts),
  confirm: async (store, opts) => (await import('./review.js')).confirmPg(store, opts),
  currentMemory: async (store, id) => (await import('./review.js')).currentRowPg(store.pg, store.schema, id),
  correct: async (store, opts) => (await import('./correct.js')).correctPg(store, opts),
  erase: notYet('erase'),
  erasedIn: notYet('restore'),
};
