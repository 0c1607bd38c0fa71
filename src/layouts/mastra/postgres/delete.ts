import type { PostgresStoreHandle } from '../../contract.js';
import { noneDeleted, type Deleted, type OrphanEmbedding } from '../delete.js';
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

/**
 * Embeddings whose message is gone (what Mastra's own deletes leave: docs/mastra-layout.md), as libsql's
 * orphanEmbeddings finds them: the messages looked up after the embeddings are read, in the same statement when
 * PgVector is in the store's schema (Mastra's own sweep after `storage.prune`, `pruneOrphanedVectorRows`, is this
 * statement), else read on the vectors' server, then looked up in the store's.
 */
export async function orphanEmbeddingsPg(f: PgFiles): Promise<OrphanEmbedding[]> {
  const out: OrphanEmbedding[] = [];
  for (const table of f.v.tables) {
    if (f.v.together) {
      const rows = (await f.store.pg.query<{ id: string; message: string }>(
        `SELECT v.vector_id::text AS id, v.metadata->>'message_id' AS message FROM ${f.v.table(table)} v
         WHERE v.metadata->>'message_id' IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ${f.t(MESSAGES)} m WHERE m.id = v.metadata->>'message_id')`)).rows;
      for (const r of rows) out.push({ table, ...r });
      continue;
    }
    const seen = (await f.v.pg.query<{ id: string; message: string }>(
      `SELECT vector_id::text AS id, metadata->>'message_id' AS message FROM ${f.v.table(table)} WHERE metadata->>'message_id' IS NOT NULL`)).rows;
    const have = await messagesPresent(f, seen.map((s) => s.message));
    for (const s of seen) if (!have.has(s.message)) out.push({ table, ...s });
  }
  return out;
}

async function messagesPresent(f: PgFiles, ids: string[]): Promise<Set<string>> {
  const messages = [...new Set(ids)];
  const have = new Set<string>();
  for (let i = 0; i < messages.length; i += 5000) {
    for (const r of (await f.store.pg.query<{ id: string }>(`SELECT id FROM ${f.t(MESSAGES)} WHERE id = ANY($1::text[])`, [messages.slice(i, i + 5000)])).rows) have.add(r.id);
  }
  return have;
}

/**
 * Those of `found` whose message is still missing, deleted by id and message (an embedding rewritten meanwhile for
 * another message stays): the message looked up again in the delete's own statement when PgVector is in the store's
 * schema, else just before it on the store's server.
 */
export async function deleteOrphanEmbeddingsPg(f: PgFiles, found: OrphanEmbedding[]): Promise<number> {
  let n = 0;
  for (const table of new Set(found.map((o) => o.table))) {
    const mine = found.filter((o) => o.table === table);
    for (let i = 0; i < mine.length; i += 5000) {
      let page = mine.slice(i, i + 5000);
      if (!f.v.together) {
        const have = await messagesPresent(f, page.map((o) => o.message));
        page = page.filter((o) => !have.has(o.message));
        if (page.length === 0) continue;
      }
      const stillGone = f.v.together ? ` AND NOT EXISTS (SELECT 1 FROM ${f.t(MESSAGES)} m WHERE m.id = g.message)` : '';
      n += (await together(f.store, f.v, f.lockTimeoutMs, async (q) => (await q.query(
        `DELETE FROM ${f.v.table(table)} v USING unnest($1::text[], $2::text[]) AS g(id, message)
         WHERE v.vector_id::text = g.id AND v.metadata->>'message_id' = g.message${stillGone}`,
        [page.map((o) => o.id), page.map((o) => o.message)])).rowCount ?? 0, async () => 0)).embeddings;
    }
  }
  return n;
}
