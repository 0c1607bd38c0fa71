import { existsSync } from 'node:fs';
import type { Layout } from '../contract.js';
import type { StoreConfig } from '../../store/config.js';
import { storeError } from '../../core/errors.js';
import { expandHome } from '../../config/read.js';
import { MASTRA_COPY_NAMES, REQUIRED } from './names.js';

/**
 * Mastra: an agent framework's memory in `@mastra/libsql`'s file (docs/mastra-layout.md). Read and written with
 * libsql's own driver; each job's code is imported when a job of a Mastra store runs.
 */
export const mastraLayout: Layout = {
  name: 'mastra',
  schemaOwner: { by: 'sdk', sdk: "Mastra's SDK" },
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
  // On PostgreSQL a snapshot takes the tables of the store's schema, PgVector's there with them; PgVector's elsewhere
  // are taken on their own server first (docs/mastra-layout.md, "snapshot / restore").
  snapshotRefused: async (store, storeName) => {
    const pgv = store.mastra?.pgvector;
    if (store.engine !== 'postgres' || !pgv || !store.postgres) return undefined;
    if (pgv.url === undefined) {
      if (pgv.schema === undefined || pgv.schema === store.postgres.schema) return undefined;
      return { field: 'mastra.pgvector.schema', why: 'PgVector\'s tables in another schema of the store\'s database are restored on the store\'s connection, where the erase ledger cannot rewrite them: give mastra.pgvector.url (the same database) so they are taken on their own' };
    }
    if ((pgv.schema ?? 'public') !== store.postgres.schema) return undefined;
    // Two URLs can name one database in many ways (host names, ports, proxies): the servers say whether they are one.
    const { sameDatabase } = await import('./postgres/vectors.js');
    if (!(await sameDatabase(storeName, store.postgres, pgv as { url: string; caFile?: string }))) return undefined;
    return { field: 'mastra.pgvector.url', why: 'names the store\'s own database and schema, whose snapshot holds PgVector\'s tables already: leave url out' };
  },
  vectorTables(storeName, store) {
    const where = vectorsApart(store);
    if (!where) return undefined;
    // pg and the PostgreSQL engine's artifact code load when a snapshot or restore of such a store runs.
    const side = async () => (await import('./postgres/snapshot.js')).mastraVectorTables(storeName, where);
    return {
      describe: `PgVector's tables in postgres schema ${where.schema}${where.own ? ' of mastra.pgvector.url' : ''}`,
      take: async (folder) => (await side()).take(folder),
      verify: async (folder) => (await side()).verify(folder),
      restore: async (folder) => (await side()).restore(folder),
    };
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

/**
 * Where a Mastra store's PgVector tables are when a snapshot of its own schema does not hold them: another database
 * (`mastra.pgvector.url`). Undefined: in the store's schema, or not on PostgreSQL (another schema of the store's
 * database without a url is refused: snapshotRefused).
 */
function vectorsApart(store: StoreConfig): { url: string; caFile?: string; schema: string; own: boolean } | undefined {
  const pgv = store.mastra?.pgvector;
  if (store.engine !== 'postgres' || pgv?.url === undefined) return undefined;
  return { url: pgv.url, ...(pgv.caFile !== undefined ? { caFile: pgv.caFile } : {}), schema: pgv.schema ?? 'public', own: true };
}
