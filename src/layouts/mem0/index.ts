import { existsSync } from 'node:fs';
import type { Layout } from '../contract.js';
import type { StoreConfig } from '../../store/config.js';
import { detectDialect } from './history.js';
import { collectionOf, entityCollectionOf, entityVectorDbOf, mem0Of } from './names.js';
import { openDatabase } from '../../store/sqlite.js';
import { expandHome } from '../../config/read.js';

/**
 * mem0: every job the way mem0's own code would do it (docs/mem0-layout.md). The registry loads this module for
 * every command; each job's code (and zod, for the mem0 section's schema) is imported when a job of a mem0 store
 * runs.
 */
export const mem0Layout: Layout = {
  name: 'mem0',
  schemaOwner: { by: 'sdk', sdk: "mem0's SDK" },
  assertSchema: (db, store) => void detectDialect(db, store.db, store.mem0?.historyTable ?? 'auto'),
  collections(store) {
    const mem0 = mem0Of(store);
    if (mem0.vectorStore !== 'qdrant') return [...new Set(store.qdrant?.collections ?? [])];
    const table = historyTableOf(store);
    return [...new Set([...(store.qdrant?.collections ?? []), collectionOf(mem0, table), entityCollectionOf(mem0, table)])];
  },
  vectorFiles(store) {
    const mem0 = mem0Of(store);
    if (mem0.vectorStore !== 'sqlite') return [];
    return [...new Set([expandHome(mem0.vectorDb), expandHome(entityVectorDbOf(mem0))])].filter((f) => existsSync(f));
  },
  vectorTables(storeName, store) {
    const mem0 = mem0Of(store);
    const pgv = mem0.pgvector;
    if (mem0.vectorStore !== 'pgvector' || !pgv) return undefined;
    const table = historyTableOf(store);
    const tables = [collectionOf(mem0, table), entityCollectionOf(mem0, table)];
    // pg and the PostgreSQL engine's artifact code load when a snapshot or restore of such a store runs.
    const side = async () => (await import('./pgvector-tables.js')).mem0VectorTables(storeName, pgv, tables);
    return {
      describe: `postgres schema ${pgv.schema}: ${tables.join(', ')}`,
      take: async (folder) => (await side()).take(folder),
      verify: async (folder) => (await side()).verify(folder),
      restore: async (folder) => (await side()).restore(folder),
    };
  },
  // History keeps every memory's id (deleted ones too); the conversation kept for the extractor names its user.
  copyNames: [{ table: 'history', ids: [{ column: 'memory_id' }] }, { table: 'messages', ids: [], scopedUsers: 'session_scope' }],
  // Each memory the prune deletes goes to opts.beforeDelete with its user first (erase's ledger, from the prune job).
  prune: async (store, { ctx, dryRun, beforeDelete }) => (await import('./memories.js')).mem0Prune(store, ctx, { dryRun, ...(beforeDelete ? { beforeDelete } : {}) }),
  async check(store, { ctx }) {
    const [{ mem0CheckReport }, { mem0ReviewDue }] = await Promise.all([import('./check.js'), import('./memories.js')]);
    const report = await mem0CheckReport(store, { now: ctx.now() });
    // The same count `review list` shows: one function decides what is due (nothing to read without the collection).
    const readable = !report.problems.some((p) => p.code === 'mem0_no_collection');
    report.reviewDue = readable ? (await mem0ReviewDue(store, ctx.now(), ctx.config.review.afterDays, 0)).due : 0;
    return report;
  },
  newRows: async (store, { period, maxRows, lookTwice }) => (await import('./new-rows.js')).mem0NewRows(store, period, maxRows, lookTwice),
  async reviewDue(store, opts) {
    const [{ mem0ReviewDue }, { mem0Queue }] = await Promise.all([import('./memories.js'), import('./drift.js')]);
    const { due } = await mem0ReviewDue(store, opts.now, opts.afterDays, 0);
    return { due, batch: await mem0Queue(store, opts.now, opts.afterDays, opts.limit ?? Number.MAX_SAFE_INTEGER, opts.exclude ?? []) };
  },
  applyDrift: async (store, { decision, now, log }) => (await import('./drift.js')).applyMem0Decision(store, log, decision, now),
  confirm: async (store, opts) => (await import('./drift.js')).confirmMem0(store, opts),
  currentMemory: async (store, id) => (await import('./drift.js')).mem0Current(store, id),
  erase: async (store, { selector, dryRun, ...opts }) => (await import('./erase.js')).eraseMem0(store, selector, dryRun, opts),
  erasedIn: async (store, ledger) => (await import('./erased-in.js')).mem0ErasedIn(store, ledger),
};

/** Which SDK wrote the history file, for its default collection names (read-only; a missing file reads as Python). */
function historyTableOf(store: StoreConfig): 'history' | 'memory_history' {
  const wanted = store.mem0?.historyTable ?? 'auto';
  if (wanted !== 'auto') return wanted;
  if (store.mem0?.collection) return 'history'; // named explicitly: the default is not used
  try {
    const db = openDatabase(expandHome(store.db), { readonly: true });
    try {
      return detectDialect(db, store.db, 'auto').table;
    } finally {
      db.close();
    }
  } catch {
    return 'history';
  }
}
