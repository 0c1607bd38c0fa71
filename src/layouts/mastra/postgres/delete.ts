import type { PostgresStoreHandle } from '../../contract.js';
import { LEFTOVER_CODES, leftoverCounts, noneDeleted, type Deleted, type Leftover, type LeftoverCode } from '../delete.js';
import { MESSAGES, OBSERVATIONS, tableOf, THREADS, schemaOf } from './names.js';
import { deleteEmbeddings, together, type Queryable, type VectorSide } from './vectors.js';

// prune's and erase's deletes on PostgreSQL, in the order of the libsql form (src/layouts/mastra/delete.ts):
// embeddings first, then the rows, each in a short transaction under SET LOCAL lock_timeout.

export interface PgFiles {
  store: PostgresStoreHandle;
  /** The store's schema, unquoted. */
  schema: string;
  v: VectorSide;
  /** Whether PostgresStore made its observational-memory table. */
  observations: boolean;
  lockTimeoutMs: number;
  t(table: string): string;
}

export async function pgFiles(store: PostgresStoreHandle, v: VectorSide): Promise<PgFiles> {
  const schema = schemaOf(store);
  const observations = (await store.pg.query(`SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`, [schema, OBSERVATIONS])).rows.length > 0;
  return { store, schema, v, observations, lockTimeoutMs: store.config.postgres!.lockTimeoutMs, t: (table) => tableOf(schema, table) };
}

/** Messages by id with their embeddings; their thread and resource stay. */
export async function deleteMessagesPg(f: PgFiles, ids: readonly string[]): Promise<Deleted> {
  if (ids.length === 0) return noneDeleted();
  const { embeddings, result } = await together(f.store, f.v, f.lockTimeoutMs, (q) => deleteEmbeddings(q, f.v, 'message_id', ids),
    async (q) => (await q.query(`DELETE FROM ${f.t(MESSAGES)} WHERE id = ANY($1::text[])`, [ids])).rowCount ?? 0);
  return { ...noneDeleted(), messages: result ?? 0, embeddings };
}

/**
 * What deleteThreadPg of each of `threads` and deleteMessagesPg of `messages` would delete with them, changing
 * nothing (prune --dry-run): the embeddings deleteEmbeddings takes by thread_id and by message_id, on the vectors'
 * server, each row once, and the threads' observation records.
 */
export async function plannedWithPg(f: PgFiles, threads: readonly string[], messages: readonly string[]): Promise<{ embeddings: number; observations: number }> {
  let embeddings = 0;
  for (const t of f.v.tables) {
    embeddings += Number((await f.v.pg.query<{ n: string }>(`SELECT count(*) AS n FROM ${f.v.table(t)}
      WHERE metadata->>'thread_id' = ANY($1::text[]) OR metadata->>'message_id' = ANY($2::text[])`, [threads, messages])).rows[0]!.n);
  }
  const observations = threads.length > 0 && f.observations
    ? Number((await f.store.pg.query<{ n: string }>(`SELECT count(*) AS n FROM ${f.t(OBSERVATIONS)} WHERE "threadId" = ANY($1::text[])`, [threads])).rows[0]!.n) : 0;
  return { embeddings, observations };
}

/**
 * A thread whole: its embeddings, messages, thread-scoped observations and the row. `stillDoomed` (a condition on
 * the thread's row, SQL over `t`, with `params` from $2) is asked first, then again inside the store's transaction,
 * the row locked and the messages' table locked against writes, before any embedding goes: an agent that wrote to the
 * thread since keeps it whole. Mastra's saveMessages inserts a thread's messages and then stamps the thread, in one
 * transaction: the table lock waits for every such transaction under way (its stamp is then seen), and one that
 * starts meanwhile waits for this one; without it, a message inserted before the thread's delete but committed after
 * it stayed behind without its thread.
 */
export async function deleteThreadPg(f: PgFiles, id: string, stillDoomed = 'true', params: unknown[] = []): Promise<Deleted> {
  const doomed = async (q: Queryable, lock: boolean) =>
    (await q.query(`SELECT 1 FROM ${f.t(THREADS)} t WHERE t.id = $1 AND (${stillDoomed})${lock ? ' FOR UPDATE' : ''}`, [id, ...params])).rows.length > 0;
  if (!(await doomed(f.store.pg, false))) return noneDeleted();
  const { embeddings, result } = await together(f.store, f.v, f.lockTimeoutMs,
    async (q) => deleteEmbeddings(q, f.v, 'thread_id', [id]),
    async (q) => {
      const messages = (await q.query(`DELETE FROM ${f.t(MESSAGES)} WHERE thread_id = $1`, [id])).rowCount ?? 0;
      const observations = f.observations ? (await q.query(`DELETE FROM ${f.t(OBSERVATIONS)} WHERE "threadId" = $1`, [id])).rowCount ?? 0 : 0;
      const threads = (await q.query(`DELETE FROM ${f.t(THREADS)} WHERE id = $1`, [id])).rowCount ?? 0;
      return { messages, observations, threads };
    },
    async (q) => {
      await q.query(`LOCK TABLE ${f.t(MESSAGES)} IN SHARE ROW EXCLUSIVE MODE`);
      return doomed(q, true);
    });
  return result ? { ...result, embeddings } : { ...noneDeleted(), embeddings };
}

/** Where each kind of embedding leftover is (libsql's KINDS, delete.ts), and what it names that is gone. */
const KINDS = {
  mastra_embedding_without_message: { where: `metadata->>'message_id' IS NOT NULL`, key: 'message_id', parent: MESSAGES },
  mastra_embedding_without_thread: { where: `metadata->>'message_id' IS NULL AND metadata->>'thread_id' IS NOT NULL`, key: 'thread_id', parent: THREADS },
} as const;

/**
 * What Mastra's own deletes left (LEFTOVER_CODES, delete.ts), as libsql's `leftovers` finds them: the messages and
 * threads looked up after the rows naming them are read, in the same statement when PgVector is in the store's
 * schema (Mastra's own sweep after `storage.prune`, `pruneOrphanedVectorRows`, asks the same of message embeddings),
 * else read on the vectors' server, then looked up in the store's.
 */
export async function leftoversPg(f: PgFiles): Promise<Leftover[]> {
  const out: Leftover[] = [];
  if (f.observations) {
    const rows = (await f.store.pg.query<{ id: string; of: string }>(
      `SELECT o.id::text AS id, o."threadId" AS of FROM ${f.t(OBSERVATIONS)} o
       WHERE o."threadId" IS NOT NULL AND o."threadId" <> '' AND NOT EXISTS (SELECT 1 FROM ${f.t(THREADS)} t WHERE t.id = o."threadId")`)).rows;
    for (const r of rows) out.push({ code: 'mastra_observation_without_thread', table: OBSERVATIONS, ...r });
  }
  for (const table of f.v.tables) {
    for (const [code, k] of Object.entries(KINDS) as [keyof typeof KINDS, (typeof KINDS)[keyof typeof KINDS]][]) {
      const of = `v.metadata->>'${k.key}'`;
      if (f.v.together) {
        const rows = (await f.store.pg.query<{ id: string; of: string }>(
          `SELECT v.vector_id::text AS id, ${of} AS of FROM ${f.v.table(table)} v
           WHERE ${k.where.replaceAll('metadata', 'v.metadata')} AND NOT EXISTS (SELECT 1 FROM ${f.t(k.parent)} p WHERE p.id = ${of})`)).rows;
        for (const r of rows) out.push({ code, table, ...r });
        continue;
      }
      const seen = (await f.v.pg.query<{ id: string; of: string }>(`SELECT v.vector_id::text AS id, ${of} AS of FROM ${f.v.table(table)} v WHERE ${k.where.replaceAll('metadata', 'v.metadata')}`)).rows;
      const have = await present(f, k.parent, seen.map((r) => r.of));
      for (const r of seen) if (!have.has(r.of)) out.push({ code, table, ...r });
    }
  }
  return out;
}

async function present(f: PgFiles, table: string, ids: string[]): Promise<Set<string>> {
  const all = [...new Set(ids)];
  const have = new Set<string>();
  for (let i = 0; i < all.length; i += 5000) {
    for (const r of (await f.store.pg.query<{ id: string }>(`SELECT id FROM ${f.t(table)} WHERE id = ANY($1::text[])`, [all.slice(i, i + 5000)])).rows) have.add(r.id);
  }
  return have;
}

/**
 * Those of `found` whose message or thread is still missing, deleted by id and what they name (a row rewritten
 * meanwhile for another stays): looked up again in the delete's own statement when the rows are in the store's
 * schema, else just before it on the store's server. Each page in a transaction under `lock_timeout` (vectors.ts).
 */
export async function deleteLeftoversPg(f: PgFiles, found: Leftover[]): Promise<Record<LeftoverCode, number>> {
  const n = leftoverCounts();
  const del = async (code: LeftoverCode, target: string, of: string, parent: string, page: Leftover[], onStore: boolean) => {
    const stillGone = onStore ? ` AND NOT EXISTS (SELECT 1 FROM ${f.t(parent)} p WHERE p.id = g.of)` : '';
    const sql = `DELETE FROM ${target} x USING unnest($1::text[], $2::text[]) AS g(id, of) WHERE x.${of} AND x.${code === 'mastra_observation_without_thread' ? 'id::text' : 'vector_id::text'} = g.id${stillGone}`;
    const run = async (q: Queryable) => (await q.query(sql, [page.map((l) => l.id), page.map((l) => l.of)])).rowCount ?? 0;
    // Observation records are in the store's schema: one transaction there (as `together` runs it when the vectors
    // are with the store, under lock_timeout and its retries), with no vectors' part.
    const r = code === 'mastra_observation_without_thread'
      ? (await together(f.store, { ...f.v, together: true }, f.lockTimeoutMs, async () => 0, run)).result ?? 0
      : (await together(f.store, f.v, f.lockTimeoutMs, run, async () => 0)).embeddings;
    n[code] += r;
  };
  for (const code of LEFTOVER_CODES) {
    for (const table of new Set(found.filter((l) => l.code === code).map((l) => l.table))) {
      const mine = found.filter((l) => l.code === code && l.table === table);
      for (let i = 0; i < mine.length; i += 5000) {
        let page = mine.slice(i, i + 5000);
        if (code === 'mastra_observation_without_thread') {
          await del(code, f.t(OBSERVATIONS), `"threadId" = g.of`, THREADS, page, true);
          continue;
        }
        const k = KINDS[code];
        if (!f.v.together) {
          const have = await present(f, k.parent, page.map((l) => l.of));
          page = page.filter((l) => !have.has(l.of));
          if (page.length === 0) continue;
        }
        await del(code, f.v.table(table), `metadata->>'${k.key}' = g.of`, k.parent, page, f.v.together);
      }
    }
  }
  return n;
}
