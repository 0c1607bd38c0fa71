import { usageError } from '../../../core/errors.js';
import type { PostgresLayout, PostgresStoreHandle } from '../../contract.js';
import { assertWardenSchemaPg, initWardenPg } from './schema.js';

/** A job this layout does not do on PostgreSQL yet: refused before it could do anything (docs/postgres.md). */
const notYet = (what: string) => async (store: PostgresStoreHandle): Promise<never> => {
  throw usageError(`store ${store.name}: ${what} does not support PostgreSQL stores yet (docs/postgres.md)`);
};

/**
 * The memory table of the brief in a PostgreSQL schema: init, check, prune and erase, beside agents writing over their own
 * connections. Each job's code is loaded when that job asks for it.
 */
export const wardenOnPostgres: PostgresLayout = {
  name: 'warden',
  assertSchema: assertWardenSchemaPg,
  init: initWardenPg,
  collections: (store) => [...new Set(store.qdrant?.collections ?? [])],
  prune: async (store, opts) => (await import('./prune.js')).prunePg(store, opts),
  check: async (store, opts) => (await import('./check.js')).checkWardenPg(store, opts),
  newRows: notYet('the digest'),
  reviewDue: notYet('review'),
  applyDrift: notYet('drift'),
  confirm: notYet('review confirm'),
  currentMemory: notYet('review'),
  erase: async (store, { selector, dryRun, ...opts }) => (await import('./erase.js')).eraseWardenPg(store, selector, dryRun, opts),
  erasedIn: async (store, ledger) => (await import('./erase.js')).wardenErasedInPg(store, ledger),
};
