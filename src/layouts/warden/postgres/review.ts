import type pg from 'pg';
import { usageError } from '../../../core/errors.js';
import { toCanonical } from '../../../time/instants.js';
import type { MemoryUnderReview } from '../../../verifiers/types.js';
import type { ConfirmOptions, CurrentMemory, OlderVersion, PostgresStoreHandle, ReviewDueOptions } from '../../contract.js';
import { reviewCutoff } from '../rules.js';
import { canon, decideOnPg, utc } from './decision.js';
import { DUE } from './check.js';

/** Something that runs a query: the store's pool, or a connection inside a transaction. */
export interface Querier {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<pg.QueryResult<R>>;
}

/**
 * The review queue on PostgreSQL, as on SQLite (src/layouts/warden/queue.ts): live rows with no expiry, confirmed
 * before the cutoff, oldest first, then by id in byte order. Every time is a timestamptz, an instant by type, so no row
 * is left out as unreadable and every expiry ends its row. The count (`exclude` or not) and the batch from one
 * statement, one snapshot.
 */
export async function reviewDuePg(store: PostgresStoreHandle, opts: ReviewDueOptions): Promise<{ due: number; batch: MemoryUnderReview[] }> {
  const s = store.schema;
  const cutoff = new Date(reviewCutoff(opts.now, opts.afterDays));
  const r = await store.pg.query<{ due: number; batch: MemoryUnderReview[] }>(
    `WITH due AS MATERIALIZED (SELECT id, confirmed_at FROM ${s}.memory WHERE ${DUE('$1')}),
     b AS (SELECT id, confirmed_at FROM due WHERE NOT (id = ANY($2::text[])) ORDER BY confirmed_at, id COLLATE "C" LIMIT $3)
     SELECT (SELECT count(*) FROM due)::int AS due,
       coalesce((SELECT json_agg(json_build_object('id', m.id, 'subject', m.subject, 'fact', m.fact, 'source', m.source,
         'confirmed_at', ${canon('m.confirmed_at')}) ORDER BY b.confirmed_at, b.id COLLATE "C") FROM b JOIN ${s}.memory m ON m.id = b.id), '[]') AS batch`,
    [cutoff, [...(opts.exclude ?? [])], opts.limit ?? null]);
  return r.rows[0]!;
}

/** The columns a decision reads, of the table aliased `t` (or unaliased). */
const rowColumns = (t = '') =>
  `${t}id AS id, ${t}subject AS subject, ${t}fact AS fact, ${t}source AS source, ${canon(`${t}confirmed_at`)} AS confirmed_at, ${canon(`${t}expires_at`)} AS expires_at, ${t}superseded_by AS superseded_by`;

/** The row as a person's decision sees it, times as canonical text, with every older version whose chain leads to it. */
export async function currentRowPg(q: Querier, s: string, id: string): Promise<CurrentMemory> {
  const row = (await q.query<NonNullable<CurrentMemory>>(`SELECT ${rowColumns()} FROM ${s}.memory WHERE id = $1`, [id])).rows[0];
  if (!row) return null;
  // UNION (not UNION ALL): a chain that loops is read once, not forever.
  const olderVersions = (await q.query<OlderVersion>(
    `WITH RECURSIVE older(id) AS (SELECT id FROM ${s}.memory WHERE superseded_by = $1 UNION SELECT m.id FROM ${s}.memory m JOIN older o ON m.superseded_by = o.id)
     SELECT ${rowColumns('m.')} FROM older JOIN ${s}.memory m ON m.id = older.id WHERE m.id <> $1 ORDER BY m.id COLLATE "C"`,
    [id])).rows;
  return { ...row, olderVersions };
}

/** The row locked until the commit, and a usage error saying why it cannot be decided on unless it is live. */
export async function lockLiveRow(q: Querier, store: PostgresStoreHandle, id: string): Promise<void> {
  const row = (await q.query<{ superseded_by: string | null }>(`SELECT superseded_by FROM ${store.schema}.memory WHERE id = $1`, [id])).rows[0];
  if (!row) throw usageError(`no memory ${JSON.stringify(id)} in store ${store.name}`);
  if (row.superseded_by !== null) throw usageError(`memory ${id} is already superseded by ${row.superseded_by}; review that one`);
}

/** Takes the row's lock (an agent's write to it commits before or after the decision, never between). */
export const lockRow = (q: Querier, s: string, id: string) => q.query(`SELECT 1 FROM ${s}.memory WHERE id = $1 FOR UPDATE`, [id]);

/** A person confirms: the stamp (canonical, whole seconds, as on SQLite) and its record, the guard inside. */
export async function confirmPg(store: PostgresStoreHandle, { id, now, log, decided, guard }: ConfirmOptions): Promise<number> {
  return decideOnPg(store, log, 'review confirm', async (client) => {
    await lockRow(client, store.schema, id);
    guard?.(await currentRowPg(client, store.schema, id));
    await lockLiveRow(client, store, id);
    await client.query(`UPDATE ${store.schema}.memory SET confirmed_at = ${utc('$1')} WHERE id = $2`, [toCanonical(now), id]);
    return decided;
  });
}
