import { existsSync } from 'node:fs';
import type { Layout } from '../contract.js';
import { storeError } from '../../core/errors.js';
import { expandHome } from '../../config/read.js';
import { MASTRA_COPY_NAMES, REQUIRED } from './names.js';

/**
 * Mastra: an agent framework's memory in `@mastra/libsql`'s file (docs/mastra-layout.md). Read and written with
 * libsql's own driver; each job's code is imported when a job of a Mastra store runs.
 */
export const mastraLayout: Layout = {
  name: 'mastra',
  // Reading sqlite_schema is safe through plain SQLite; only the vector tables need libsql.
  assertSchema(db, store) {
    const have = new Set((db.prepare(`SELECT name FROM sqlite_schema WHERE type = 'table'`).all() as { name: string }[]).map((r) => r.name));
    const missing = REQUIRED.filter((t) => !have.has(t));
    if (missing.length > 0) throw storeError(`${store.db}: not a Mastra memory store (no ${missing.join(', ')}; layout: mastra wants LibSQLStore's file)`);
  },
  collections: () => [],
  vectorFiles(store) {
    const v = store.mastra?.vectorDb;
    return v && expandHome(v) !== expandHome(store.db) && existsSync(expandHome(v)) ? [expandHome(v)] : [];
  },
  scrubsOwnFiles: true,
  copyNames: MASTRA_COPY_NAMES,
  sqliteEngine: 'libsql',
  prune: async (store, { ctx, dryRun, beforeDelete }) => (await import('./prune.js')).mastraPrune(store, ctx, { dryRun, ...(beforeDelete ? { beforeDelete } : {}) }),
  async check(store, { ctx }) {
    const [{ mastraCheckReport }, { mastraReviewDue }] = await Promise.all([import('./check.js'), import('./review.js')]);
    const report = mastraCheckReport(store, ctx.now());
    report.reviewDue = mastraReviewDue(store, ctx.now(), ctx.config.review.afterDays, 0, []).due;
    return report;
  },
  newRows: async (store, { period, maxRows, lookTwice, texts }) => (await import('./digest.js')).mastraNewRows(store, period, maxRows, lookTwice, texts),
  reviewDue: async (store, o) => (await import('./review.js')).mastraReviewDue(store, o.now, o.afterDays, o.limit ?? Number.MAX_SAFE_INTEGER, o.exclude ?? []),
  applyDrift: async (store, { decision, now, log }) => (await import('./review.js')).applyMastraDecision(store, log, decision, now),
  confirm: async (store, opts) => (await import('./review.js')).confirmMastra(store, opts),
  currentMemory: async (store, id) => (await import('./review.js')).mastraCurrent(store, id),
  correct: async (store, opts) => (await import('./correct.js')).correctMastra(store, opts),
  corrects: ['supersede', 'delete'],
  erase: async (store, { selector, dryRun, ...opts }) => (await import('./erase.js')).eraseMastra(store, selector, dryRun, opts),
  erasedIn: async (store, ledger) => (await import('./erased-in.js')).mastraErasedIn(store, ledger),
};
