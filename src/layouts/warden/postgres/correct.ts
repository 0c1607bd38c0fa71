import { randomUUID } from 'node:crypto';
import { transientError, usageError } from '../../../core/errors.js';
import { toCanonical, type Instant } from '../../../time/instants.js';
import type { CorrectOptions, Corrected, PostgresStoreHandle } from '../../contract.js';
import { decideOnPg, utc } from './decision.js';
import { currentRowPg, lockLiveRow, lockRow, type Querier } from './review.js';

/**
 * The correction pair of BRIEF.md on PostgreSQL, as on SQLite (src/layouts/warden/apply.ts supersedeRow): the new
 * fact (same subject, created and confirmed now as canonical text, no expiry) and the old row pointed at it. Inside
 * the decision's transaction. Returns the new id.
 */
export async function supersedeRowPg(q: Querier, s: string, oldId: string, next: { fact: string; source: string }, now: Instant): Promise<string> {
  const newId = `m_${randomUUID()}`;
  const at = toCanonical(now);
  const inserted = await q.query(
    `INSERT INTO ${s}.memory (id, subject, fact, source, created_at, confirmed_at, expires_at, superseded_by)
     SELECT $1, subject, $2, $3, ${utc('$4')}, ${utc('$4')}, NULL, NULL FROM ${s}.memory WHERE id = $5 AND superseded_by IS NULL`,
    [newId, next.fact, next.source, at, oldId]);
  if (inserted.rowCount !== 1) throw new Error(`${oldId}: no live row to supersede`);
  await q.query(`UPDATE ${s}.memory SET superseded_by = $1 WHERE id = $2`, [newId, oldId]);
  return newId;
}

/** Every row whose supersede chain leads to $1 (rings read once), in byte order of id. */
const olderIds = (s: string) => `WITH RECURSIVE c(id) AS (
  SELECT id FROM ${s}.memory WHERE superseded_by = $1 UNION SELECT m.id FROM ${s}.memory m JOIN c ON m.superseded_by = c.id)
SELECT id FROM c WHERE id <> $1 ORDER BY id COLLATE "C"`;

/**
 * A person's correction on PostgreSQL, as on SQLite (src/layouts/warden/correct.ts): supersede and expire in one short
 * transaction with their record; a delete takes the row and every older version whose chain leads to it (what ON
 * DELETE CASCADE takes), their vectors first, then the rows in one statement of one transaction (the cascade's
 * triggers then find nothing left: no recursion, whatever the depth), each deleted memory's decision recorded.
 */
export async function correctPg(store: PostgresStoreHandle, { id, now, correction, log, decided, guard }: CorrectOptions): Promise<Corrected> {
  const s = store.schema;
  switch (correction.action) {
    case 'supersede':
      return decideOnPg(store, log, 'review supersede', async (client) => {
        await lockRow(client, s, id);
        guard?.(await currentRowPg(client, s, id));
        await lockLiveRow(client, store, id);
        const newId = await supersedeRowPg(client, s, id, correction, now);
        const resolution = `superseded:${newId}`;
        return () => ({ resolution, resolved: decided(id, resolution, { action: 'supersede', newId, fact: correction.fact, source: correction.source }), newId });
      });
    case 'expire':
      return decideOnPg(store, log, 'review expire', async (client) => {
        await lockRow(client, s, id);
        guard?.(await currentRowPg(client, s, id));
        await lockLiveRow(client, store, id);
        await client.query(`UPDATE ${s}.memory SET expires_at = ${utc('$1')} WHERE id = $2`, [correction.expiresAt, id]);
        const resolution = `expires:${correction.expiresAt}`;
        return () => ({ resolution, resolved: decided(id, resolution, { action: 'expire', expiresAt: correction.expiresAt }), expiresAt: correction.expiresAt });
      });
    case 'delete':
      return deletePg(store, { id, log, decided, guard });
  }
}

/** How many times the delete starts again when an agent attached a version to the chain after its vectors went. */
const GREW_RETRIES = 5;

async function deletePg(store: PostgresStoreHandle, { id, log, decided, guard }: Pick<CorrectOptions, 'id' | 'log' | 'decided' | 'guard'>): Promise<Corrected> {
  const s = store.schema;
  const row = await currentRowPg(store.pg, s, id);
  if (!row) throw usageError(`no memory ${JSON.stringify(id)} in store ${store.name}`);
  // The guard looks before the vectors go, and again inside the transaction, on the rows as they will be deleted.
  guard?.(row);
  const vectorsGone = new Set<string>();
  const dropVectors = async (ids: string[]) => {
    const gone = ids.filter((v) => !vectorsGone.has(v));
    if (store.vectors && gone.length > 0) await store.vectors.deleteForRows(gone);
    gone.forEach((v) => vectorsGone.add(v));
  };
  await dropVectors([id, ...(await store.pg.query<{ id: string }>(olderIds(s), [id])).rows.map((r) => r.id)]);
  for (let attempt = 0; ; attempt++) {
    type Outcome = { grew: string[] } | { deleted: string[]; resolved: number };
    const outcome = await decideOnPg<Outcome>(store, log, 'review delete', async (client) => {
      const locked = await lockRow(client, s, id);
      if (guard) guard(await currentRowPg(client, s, id));
      if (locked.rowCount === 0) return () => ({ deleted: [] as string[], resolved: 0 });
      // The older versions, locked, then read again: one an agent re-pointed before the lock is not taken.
      const first = (await client.query<{ id: string }>(olderIds(s), [id])).rows.map((r) => r.id);
      if (first.length > 0) await client.query(`SELECT 1 FROM ${s}.memory WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`, [first]);
      const versions = (await client.query<{ id: string }>(olderIds(s), [id])).rows.map((r) => r.id);
      const grew = versions.filter((v) => !vectorsGone.has(v));
      if (store.vectors && grew.length > 0) return () => ({ grew });
      const gone = new Set((await client.query<{ id: string }>(`DELETE FROM ${s}.memory WHERE id = ANY($1::text[]) RETURNING id`, [[id, ...versions]])).rows.map((r) => r.id));
      const deleted = [id, ...versions].filter((v) => gone.has(v));
      return () => {
        let resolved = 0;
        for (const v of deleted) resolved += decided(v, 'deleted', { action: 'delete', ...(v !== id ? { cascadedFrom: id } : {}) });
        return { deleted, resolved };
      };
    });
    if ('grew' in outcome) {
      // Nothing was written or recorded: the newcomers' vectors go, and the delete starts again.
      if (attempt >= GREW_RETRIES) throw transientError(`review delete: the supersede chain of ${id} kept changing; try again`);
      await dropVectors(outcome.grew);
      continue;
    }
    if (outcome.deleted.length === 0) throw usageError(`memory ${id} was ${guard ? 'changed or ' : ''}deleted by someone else meanwhile`);
    return { resolution: 'deleted', resolved: outcome.resolved, deleted: outcome.deleted };
  }
}
