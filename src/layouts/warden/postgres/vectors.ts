import type pg from 'pg';
import type { PostgresStoreHandle } from '../../contract.js';
import type { VectorSink } from '../../../vectors/sink.js';

/**
 * The vectors of the rows a prune or erase batch deletes, on PostgreSQL. Vectors in pgvector tables of the store's
 * own schema are deleted in the batch's transaction, on its connection, before its rows: one commit takes both, a
 * rollback (a lock timeout, kill -9) keeps both. Vectors elsewhere (Qdrant) cannot join it: they are deleted before
 * the transaction begins, as on SQLite.
 */
export const vectorsInTransaction = (store: PostgresStoreHandle, client: pg.PoolClient): VectorSink | undefined => store.vectors?.inTransaction?.(client);

/**
 * Every row whose supersede chain leads to one of `rootIds` (locked by the caller), the roots included, locked FOR
 * UPDATE until reading the chains again finds no row not yet locked. A locked row cannot gain a new older version (the
 * agent's foreign-key check waits for the lock) nor be re-pointed, so what the DELETE's cascade takes is exactly this
 * set: its vectors are the ones deleted.
 */
export async function lockedClosure(client: pg.PoolClient, s: string, rootIds: readonly string[]): Promise<string[]> {
  const locked = new Set(rootIds);
  for (;;) {
    const chain = (await client.query<{ id: string }>(`WITH RECURSIVE c(id) AS (
      SELECT id FROM ${s}.memory WHERE superseded_by = ANY($1::text[])
      UNION SELECT m.id FROM ${s}.memory m JOIN c ON m.superseded_by = c.id)
    SELECT id FROM c`, [rootIds])).rows.map((r) => r.id);
    const fresh = chain.filter((id) => !locked.has(id));
    if (fresh.length === 0) return [...locked];
    await client.query(`SELECT id FROM ${s}.memory WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`, [fresh]);
    for (const id of fresh) locked.add(id); // one deleted meanwhile is simply not there: the DELETE skips it
  }
}
