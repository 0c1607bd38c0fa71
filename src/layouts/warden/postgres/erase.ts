import pg from 'pg';
import type { Mem0Point, PointStore } from '../../../vectors/contract.js';
import { rowVectorsFor, VECTOR_STORES, type PgvectorRows } from '../../../vectors/registry.js';
import { sqlState } from '../../../engines/postgres/session.js';
import { transientError } from '../../../core/errors.js';
import { sweepCollections } from '../../erase-sweep.js';
import { lockedClosure, vectorsInTransaction } from './vectors.js';
import { ledgerSelectors, type EraseOptions, type EraseSelector, type Erased, type ErasedFields, type ErasedLedger, type LayoutEraseOptions, type PostgresStoreHandle } from '../../contract.js';

/**
 * The warden layout's erase on PostgreSQL (src/erase/erase.ts runs it, then has the engine vacuum and read back the
 * tables it names in `Erased.tables`). The same decisions as on SQLite (src/layouts/warden/erase.ts): the same
 * roots for each selector (`--subject` matched ASCII case-insensitively in subject or fact, as SQLite's lower() and
 * instr() do), every older version whose supersede chain leads to one of them, the points of every deleted row and
 * the points still holding an erased text. Deleted in short transactions of `batchSize` roots under
 * `SET LOCAL lock_timeout`, beside agents writing over their own connections: a batch that meets an agent's lock is
 * rolled back and tried again, never waits longer than that. Each batch locks its roots and their older versions
 * (FOR UPDATE) and deletes them in one statement, so a chain of any depth goes without the cascade recursing. kill -9
 * at any point rolls the open batch back; the next erase finds what is left.
 */

/** The tables this erase deletes from: what the engine vacuums and reads back afterwards. */
export const ERASE_TABLES = ['memory'] as const;

/** A batch that met an agent's lock past lock_timeout is tried again this many times, then the erase fails (transient). */
const LOCK_RETRIES = 50;
/** A batch whose chains an agent extended meanwhile (a row whose points were not deleted first) is tried again this often. */
const CHAIN_ATTEMPTS = 5;

/** ASCII lower case, as SQLite's lower() folds: PostgreSQL's lower() also folds non-ASCII letters, which SQLite does not. */
const asciiLowerSql = (e: string) => `translate(${e}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')`;

async function hasUserColumn(q: Queryable, store: PostgresStoreHandle): Promise<boolean> {
  const r = await q.query(`SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'user_id' AND attnum > 0 AND NOT attisdropped`, [`${store.schema}.memory`]);
  return r.rows.length > 0;
}

/** A pooled connection or the store's session: both take a query with its parameters. */
type Queryable = { query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<pg.QueryResult<R>> };

/** Which rows the selector names (the roots), as warden's erase on SQLite finds them: a condition on `memory` and its parameters. */
async function rootsWhere(q: Queryable, store: PostgresStoreHandle, sel: EraseSelector): Promise<{ where: string; params: unknown[] }> {
  if ('ids' in sel) return { where: 'id = ANY($1::text[])', params: [sel.ids] };
  if ('user' in sel) {
    // The brief's table has no user column: a per-user store's subject names the person. A user_id column wins.
    return { where: (await hasUserColumn(q, store)) ? 'user_id = $1' : 'subject = $1', params: [sel.user] };
  }
  const needle = asciiLowerSql('$1::text');
  return { where: `strpos(${asciiLowerSql('subject')}, ${needle}) > 0 OR strpos(${asciiLowerSql('fact')}, ${needle}) > 0`, params: [sel.subject] };
}

/** The rows the selector names (the roots). */
async function roots(q: Queryable, store: PostgresStoreHandle, sel: EraseSelector): Promise<string[]> {
  const { where, params } = await rootsWhere(q, store, sel);
  return (await q.query<{ id: string }>(`SELECT id FROM ${store.schema}.memory WHERE ${where}`, params)).rows.map((r) => r.id);
}

/**
 * The roots and every older version of them with their fields, in one statement (the plan: what the erase will take,
 * read before anything changes). A row reached both as a root and through a chain (a ring) comes twice: kept once.
 */
async function planRows(q: Queryable, store: PostgresStoreHandle, sel: EraseSelector): Promise<{ rows: FieldsOf[]; roots: number }> {
  const s = store.schema;
  const { where, params } = await rootsWhere(q, store, sel);
  const res = await q.query<FieldsOf & { root: boolean }>(`WITH RECURSIVE c(id, fact, subject, source, root) AS (
      SELECT id, fact, subject, source, true FROM ${s}.memory WHERE ${where}
      UNION SELECT m.id, m.fact, m.subject, m.source, false FROM ${s}.memory m JOIN c ON m.superseded_by = c.id)
    SELECT id, fact, subject, source, root FROM c`, params);
  const byId = new Map<string, FieldsOf>();
  const rootIds = new Set<string>();
  for (const { root, ...row } of res.rows) {
    byId.set(row.id, row);
    if (root) rootIds.add(row.id);
  }
  return { rows: [...byId.values()], roots: rootIds.size };
}

/** The roots and every row whose supersede chain leads to one of them (what ON DELETE CASCADE takes), rings once. */
const CLOSURE = (s: string) => `WITH RECURSIVE c(id) AS (
  SELECT id FROM ${s}.memory WHERE id = ANY($1::text[])
  UNION SELECT m.id FROM ${s}.memory m JOIN c ON m.superseded_by = c.id)
SELECT id FROM c`;

async function closureOf(q: Queryable, s: string, rootIds: readonly string[]): Promise<string[]> {
  if (rootIds.length === 0) return [];
  return (await q.query<{ id: string }>(CLOSURE(s), [rootIds])).rows.map((r) => r.id);
}

interface FieldsOf {
  id: string;
  fact: string;
  subject: string;
  source: string;
}

export async function eraseWardenPg(store: PostgresStoreHandle, sel: EraseSelector, dryRun: boolean, opts: Omit<LayoutEraseOptions, 'selector' | 'dryRun'>): Promise<Erased> {
  // The vector tables beside memory too: VACUUM FULL and the byte check read them (their payloads may repeat the text).
  const tables = [...ERASE_TABLES, ...(store.config.postgres?.vectors?.tables ?? [])];
  if (dryRun) {
    const { rows, roots: rootCount } = await planRows(store.pg, store, sel);
    const closure = rows.map((r) => r.id);
    const texts = rows.map((r) => r.fact);
    return {
      ids: closure, counts: { rows: closure.length, cascaded: closure.length - rootCount, strayPoints: opts.plan ? 0 : await sweepStray(store, sel, texts, opts, true) },
      texts, fields: await fieldsOf(store, rows, closure), tables,
    };
  }
  const planned = await roots(store.pg, store, sel);
  const counts: Record<string, number> = { rows: 0, cascaded: 0, strayPoints: 0 };
  if (planned.length === 0) return { ids: [], counts, texts: [], tables };
  const cfg = store.config.postgres!;
  const deleted: FieldsOf[] = [];
  const vectorsGone = new Set<string>();
  const client = await store.pg.connect();
  try {
    opts.progress?.start('erase', planned.length, 'rows');
    for (let i = 0; i < planned.length; i += cfg.batchSize) {
      const batch = planned.slice(i, i + cfg.batchSize);
      for (const row of await deleteBatch(client, store, batch, vectorsGone, cfg.lockTimeoutMs)) deleted.push(row);
      opts.afterCommit?.();
      opts.progress?.set(Math.min(planned.length, i + batch.length));
    }
    opts.progress?.done();
  } finally {
    client.release();
  }
  counts.rows = deleted.length;
  counts.cascaded = deleted.length - planned.length;
  const texts = deleted.map((r) => r.fact);
  counts.strayPoints = await sweepStray(store, sel, texts, opts, false);
  return { ids: deleted.map((r) => r.id), counts, texts, fields: await fieldsOf(store, deleted, [], opts.planned?.fields), tables };
}

/** The points still holding an erased text, deleted or (`dryRun`) counted: as on SQLite (../erase.ts, sweepStray). */
async function sweepStray(store: PostgresStoreHandle, sel: EraseSelector, texts: readonly string[], opts: EraseOptions, dryRun: boolean): Promise<number> {
  const points = pointsOf(store, opts);
  const collections = store.config.qdrant?.collections ?? store.config.postgres?.vectors?.tables;
  if (!points || !collections) return 0;
  const vectors = store.vectors ?? rowVectorsFor(store.config)!;
  const keep = async (p: Mem0Point) => {
    const rowIds = vectors.rowIdsOf({ id: p.id, payload: p.payload });
    if (rowIds.length === 0) return false;
    return (await store.pg.query(`SELECT 1 FROM ${store.schema}.memory WHERE id = ANY($1::text[]) LIMIT 1`, [rowIds])).rows.length > 0;
  };
  return sweepCollections(points, collections, new Set(), texts, 'subject' in sel ? sel.subject : undefined, 256, keep, dryRun ? { gone: new Set() } : undefined);
}

class ChainGrew extends Error {}

/**
 * One batch of roots with their older versions, in one short transaction: points first (outside it: an agent never
 * waits on a network call), then the roots and versions locked and deleted in one statement. A version an agent added
 * to a doomed chain in between has points still there: the transaction is rolled back, its points deleted, the batch
 * tried again.
 */
async function deleteBatch(client: pg.PoolClient, store: PostgresStoreHandle, batch: readonly string[], vectorsGone: Set<string>, lockTimeoutMs: number): Promise<FieldsOf[]> {
  const s = store.schema;
  const inTx = vectorsInTransaction(store, client);
  for (let attempt = 1, locked = 0; ; ) {
    if (store.vectors && !inTx) {
      const planned = (await closureOf(client, s, batch)).filter((id) => !vectorsGone.has(id));
      if (planned.length > 0) {
        await store.vectors.deleteForRows(planned);
        planned.forEach((id) => vectorsGone.add(id));
      }
    }
    try {
      // One round trip holds its own BEGIN and COMMIT: not on a connection inside a restore's transaction.
      if (!store.vectors && !store.pg.nested) return await oneTripBatch(client, s, batch, lockTimeoutMs);
      await client.query('BEGIN');
      // Erase commits durably (no synchronous_commit = off, unlike prune): what it reports gone stays gone.
      await client.query(`SET LOCAL lock_timeout = ${Math.floor(lockTimeoutMs)}`);
      const rootIds = (await client.query<{ id: string }>(`SELECT id FROM ${s}.memory WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`, [batch])).rows.map((r) => r.id);
      // Older versions locked, then read again: one re-pointed before the lock is not taken; one an agent points at a
      // doomed row after it goes with the foreign key's cascade, as ON DELETE CASCADE says.
      let doomed: string[];
      if (inTx) {
        // Vectors in this transaction (pgvector): every version locked, so the cascade takes exactly the rows whose
        // vectors go here, first.
        doomed = rootIds.length === 0 ? [] : await lockedClosure(client, s, rootIds);
        await inTx.deleteForRows(doomed);
      } else {
        const first = (await closureOf(client, s, rootIds)).filter((id) => !rootIds.includes(id));
        if (first.length > 0) await client.query(`SELECT id FROM ${s}.memory WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`, [first]);
        doomed = await closureOf(client, s, rootIds);
      }
      const gone = doomed.length === 0 ? [] : (await client.query<FieldsOf>(
        `DELETE FROM ${s}.memory WHERE id = ANY($1::text[]) RETURNING id, fact, subject, source`, [doomed])).rows;
      if (store.vectors && !inTx && gone.some((r) => !vectorsGone.has(r.id))) throw new ChainGrew();
      await client.query('COMMIT');
      return gone;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      if (err instanceof ChainGrew) {
        if (++attempt > CHAIN_ATTEMPTS) throw transientError('erase: supersede chains kept changing during the attempts; try again');
        continue;
      }
      // An agent held a row's lock past lock_timeout (55P03), or a deadlock was broken (40P01): let it finish.
      if ((sqlState(err) === '55P03' || sqlState(err) === '40P01') && ++locked <= LOCK_RETRIES) {
        await new Promise((r) => setTimeout(r, 5 + Math.random() * 20));
        continue;
      }
      throw store.pg.explain(err, 'erase');
    }
  }
}

/**
 * A batch of a store without vectors in one round trip, as one simple query with the ids as escaped literals (the
 * server parses them; nothing of them is ever executed): the transaction opened, the roots locked (no agent can point
 * a row at one of them until the commit: its foreign key check waits on the lock), then
 * - the common batch: no row outside it points at one of its roots (so it has no older version). One statement asks
 *   that and, only if so, deletes the roots, as prune's gated delete does;
 * - else their older versions locked and the closure read again and deleted, as the batch above does (a version
 *   re-pointed before its lock is not taken). After the gated delete took the roots these find nothing;
 * then the commit. The batch above took seven round trips, each of which waits for both processes to be scheduled
 * again under load while the locks are held, and read the closure twice: this makes the batch shorter for the agents
 * too.
 */
async function oneTripBatch(client: pg.PoolClient, s: string, batch: readonly string[], lockTimeoutMs: number): Promise<FieldsOf[]> {
  const ids = `ARRAY[${batch.map((id) => pg.escapeLiteral(id)).join(',')}]::text[]`;
  const closure = CLOSURE(s).replace('$1::text[]', () => ids); // a function: `$'` in an id is not a replacement pattern
  const results = await client.query([
    'BEGIN',
    `SET LOCAL lock_timeout = ${Math.floor(lockTimeoutMs)}`,
    `SELECT id FROM ${s}.memory WHERE id = ANY(${ids}) ORDER BY id FOR UPDATE`,
    `WITH gate AS (SELECT NOT EXISTS (SELECT 1 FROM ${s}.memory WHERE superseded_by = ANY(${ids}) AND NOT (id = ANY(${ids}))) AS alone)
     DELETE FROM ${s}.memory WHERE id = ANY(${ids}) AND (SELECT alone FROM gate) RETURNING id, fact, subject, source`,
    `SELECT v.id FROM ${s}.memory v WHERE v.id IN (${closure}) AND NOT (v.id = ANY(${ids})) ORDER BY v.id FOR UPDATE OF v`,
    `DELETE FROM ${s}.memory WHERE id IN (${closure}) RETURNING id, fact, subject, source`,
    'COMMIT',
  ].join(';\n')) as unknown as pg.QueryResult<FieldsOf>[];
  return [...results[3]!.rows, ...results[5]!.rows];
}

/** What fieldsOf asked the store: the subjects and sources it looked for, and which of them another row had there. */
interface FieldAnswers {
  subjects: ReadonlySet<string>;
  sources: ReadonlySet<string>;
  sharedSubjects: ReadonlySet<string>;
  sharedSources: ReadonlySet<string>;
}
/** The answers behind each ErasedFields this layout made: the erase after its plan takes those that still hold. */
const answersOf = new WeakMap<ErasedFields, FieldAnswers>();

/**
 * The subjects and sources of the erased rows, and which of them no row left in the store has (`excluded`: rows of a
 * dry run's plan, still there): one pass over the table for both columns, as on SQLite. Made at once (the contract's
 * `onlyTheirs` is synchronous; the database answers asynchronously).
 *
 * After a plan (`before`: the dry run's fields, read moments earlier) only what it did not settle is asked: a value it
 * found in no other row is taken as theirs again (a row an agent wrote with it since is still there: the byte check
 * counts the value as held by a remaining row, not as a finding), one it found shared is asked again (that row may
 * have gone), and a value of rows the plan did not see is asked. Most erases then skip the second pass over the table.
 */
async function fieldsOf(store: PostgresStoreHandle, rows: readonly FieldsOf[], excluded: readonly string[], before?: ErasedFields): Promise<ErasedFields> {
  const inSubjects = new Set<string>();
  const inSources = new Set<string>();
  for (const r of rows) {
    if (typeof r.subject === 'string' && r.subject !== '') inSubjects.add(r.subject);
    if (typeof r.source === 'string' && r.source !== '') inSources.add(r.source);
  }
  const subjects = [...inSubjects];
  const sources = [...inSources];
  const values = [...new Set([...subjects, ...sources])];
  const prior = before ? answersOf.get(before) : undefined;
  const askSubjects = prior ? subjects.filter((v) => !prior.subjects.has(v) || prior.sharedSubjects.has(v)) : subjects;
  const askSources = prior ? sources.filter((v) => !prior.sources.has(v) || prior.sharedSources.has(v)) : sources;
  const sharedSubjects = new Set<string>();
  const sharedSources = new Set<string>();
  if (askSubjects.length + askSources.length > 0) {
    const r = await store.pg.query<{ subject: string | null; source: string | null }>(
      `SELECT DISTINCT CASE WHEN subject = ANY($1::text[]) THEN subject END AS subject, CASE WHEN source = ANY($2::text[]) THEN source END AS source
         FROM ${store.schema}.memory WHERE (subject = ANY($1::text[]) OR source = ANY($2::text[])) AND NOT (id = ANY($3::text[]))`, [askSubjects, askSources, excluded]);
    for (const row of r.rows) {
      if (row.subject !== null) sharedSubjects.add(row.subject);
      if (row.source !== null) sharedSources.add(row.source);
    }
  }
  // As on SQLite: theirs when, in a column the erased rows have it in, no other row has it there.
  // (Sets: 10,000 sources looked up in an array of 10,000 took 0.45 s of CPU.)
  const theirs = new Set(values.filter((v) => (inSubjects.has(v) && !sharedSubjects.has(v)) || (inSources.has(v) && !sharedSources.has(v))));
  const fields: ErasedFields = { values, onlyTheirs: () => theirs };
  answersOf.set(fields, { subjects: inSubjects, sources: inSources, sharedSubjects, sharedSources });
  return fields;
}

function pointsOf(store: PostgresStoreHandle, opts: EraseOptions): PointStore | undefined {
  if (opts.points) return opts.points;
  const tables = store.config.postgres?.vectors?.tables;
  // The vector tables in the schema the handle reads (a restore's staging schema while the ledger is re-applied).
  if (tables) return VECTOR_STORES.pgvector({ pg: { sql: store.pg, schema: (store.vectors as PgvectorRows | undefined)?.schema ?? store.config.postgres!.schema, tables } });
  return store.vectors || store.config.qdrant ? VECTOR_STORES.qdrant({ open: store.vectors, qdrant: store.config.qdrant }) : undefined;
}

/**
 * The warden layout's part of every restore of a PostgreSQL store: the memory ids the erase ledger names, and the
 * people it names as erase --user takes them here (the user_id column, else the subject). Reads only, a page of ids
 * at a time.
 */
export async function wardenErasedInPg(store: PostgresStoreHandle, ledger: ErasedLedger): Promise<EraseSelector[]> {
  const s = store.schema;
  const idList: string[] = [];
  for (let after: string | null = null; ;) {
    const page: string[] = (await store.pg.query<{ id: string }>(
      `SELECT id FROM ${s}.memory WHERE $1::text IS NULL OR id > $1 ORDER BY id LIMIT 10000`, [after])).rows.map((r) => r.id);
    for (const id of page) if (ledger.id(id)) idList.push(id);
    if (page.length < 10000) break;
    after = page[page.length - 1]!;
  }
  const col = (await hasUserColumn(store.pg, store)) ? 'user_id' : 'subject';
  const users = (await store.pg.query<{ u: string }>(`SELECT DISTINCT ${col}::text AS u FROM ${s}.memory WHERE ${col} IS NOT NULL`)).rows.map((r) => r.u);
  return ledgerSelectors(idList, users, ledger);
}
