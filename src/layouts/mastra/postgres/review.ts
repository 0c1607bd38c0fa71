import type { Applied, ApplyDriftOptions, ConfirmOptions, CorrectOptions, Corrected, CurrentMemory, PostgresStoreHandle, ReviewDueOptions } from '../../contract.js';
import { assertReplaces } from '../correct.js';
import { recordDecision } from '../review.js';
import type { MemoryUnderReview } from '../../../verifiers/types.js';
import { DAY_MS, type Instant } from '../../../time/instants.js';
import { usageError } from '../../../core/errors.js';
import { underReview, type WorkingMemory } from '../working-memory.js';
import { RESOURCES, tableOf, THREADS, schemaOf } from './names.js';
import { workingMemoriesPg } from './working-memory.js';
import type { Queryable } from './vectors.js';

// Review and drift over Mastra's working memory on PostgreSQL, as on libsql (src/layouts/mastra/review.ts): due when
// not updated for afterDays; a confirmation stamps updatedAt (and its timestamptz mirror) only if the text is still
// the one reviewed; a contradiction goes to a person.

export async function reviewDuePg(store: PostgresStoreHandle, o: ReviewDueOptions): Promise<{ due: number; batch: MemoryUnderReview[] }> {
  const skip = new Set(o.exclude ?? []);
  const all = await workingMemoriesPg(store.pg, store);
  const due = all.filter((m) => m.at === null || m.at <= o.now - o.afterDays * DAY_MS).sort((a, b) => (a.at ?? -Infinity) - (b.at ?? -Infinity) || a.id.localeCompare(b.id));
  return { due: due.length, batch: due.filter((m) => !skip.has(m.id)).slice(0, o.limit ?? Number.MAX_SAFE_INTEGER).map(underReview) };
}

export async function currentPg(store: PostgresStoreHandle, id: string): Promise<CurrentMemory> {
  const [m] = await workingMemoriesPg(store.pg, store, id);
  return m ? { ...underReview(m), superseded_by: null, expires_at: null } : null;
}

/** Stamp confirmed at `now` in the open transaction of `q`, the row locked, only if it still reads as `m`. */
async function stamp(q: Queryable, store: PostgresStoreHandle, m: WorkingMemory, now: Instant): Promise<boolean> {
  const table = tableOf(schemaOf(store), m.scope === 'resource' ? RESOURCES : THREADS);
  await q.query(`SELECT 1 FROM ${table} WHERE id = $1 FOR UPDATE`, [m.id]);
  const current = (await workingMemoriesPg(q, store, m.id)).find((x) => x.scope === m.scope);
  if (!current || current.text !== m.text) return false;
  const at = new Date(now);
  // Mastra writes the UTC wall time in "updatedAt" and the instant in its mirror.
  const r = await q.query(`UPDATE ${table} SET "updatedAt" = ($2::timestamptz AT TIME ZONE 'UTC'), "updatedAtZ" = $2::timestamptz WHERE id = $1`, [m.id, at.toISOString()]);
  return (r.rowCount ?? 0) === 1;
}

async function inTransaction<T>(store: PostgresStoreHandle, fn: (q: Queryable) => Promise<T>): Promise<T> {
  const c = await store.pg.connect();
  try {
    await c.query('BEGIN');
    await c.query(`SET LOCAL lock_timeout = ${Math.floor(store.config.postgres!.lockTimeoutMs)}`);
    const r = await fn(c);
    await c.query('COMMIT');
    return r;
  } catch (err) {
    await c.query('ROLLBACK').catch(() => {});
    throw store.pg.explain(err, 'review');
  } finally {
    c.release();
  }
}

export async function confirmMastraPg(store: PostgresStoreHandle, { id, now, log, decided, guard }: ConfirmOptions): Promise<number> {
  return inTransaction(store, async (q) => {
    const [m] = await workingMemoriesPg(q, store, id);
    if (guard) guard(m ? { ...underReview(m), superseded_by: null, expires_at: null } : null);
    if (!m || !(await stamp(q, store, m, now))) throw usageError(`no memory ${JSON.stringify(id)} in store ${store.name} (no working memory with that resource or thread id, or it changed meanwhile)`);
    // The person's decision is recorded right before the store's commit.
    return log.together(null, decided);
  });
}

export async function applyMastraDecisionPg(store: PostgresStoreHandle, { decision: d, now, log }: ApplyDriftOptions): Promise<Applied> {
  const stamped = d.verdict !== 'confirmed' ? null : await inTransaction(store, async (q) => {
    const [m] = await workingMemoriesPg(q, store, d.memory.id);
    return m !== undefined && m.text === d.memory.fact && (await stamp(q, store, m, now));
  });
  return recordDecision(store.name, log, d, now, stamped);
}

/**
 * A person's correction of a working memory on PostgreSQL, as on libsql (src/layouts/mastra/correct.ts): supersede
 * replaces the text in place (`replaced`), delete clears it (`workingMemory` NULL, or the thread metadata's key
 * removed), each stamping `updatedAt` and its mirror as Mastra's own writes do; expire is refused. One transaction
 * of the store, the row locked, the guard and the person's record inside it.
 */
export async function correctMastraPg(store: PostgresStoreHandle, { id, now, correction, log, decided, guard }: CorrectOptions): Promise<Corrected> {
  if (correction.action === 'expire') {
    throw usageError(`review expire: Mastra working memory has no expiry (nothing in Mastra would ever end it); replace or delete ${JSON.stringify(id)} instead`);
  }
  const s = schemaOf(store);
  return inTransaction(store, async (q) => {
    await q.query(`SELECT 1 FROM ${tableOf(s, RESOURCES)} WHERE id = $1 FOR UPDATE`, [id]);
    await q.query(`SELECT 1 FROM ${tableOf(s, THREADS)} WHERE id = $1 FOR UPDATE`, [id]);
    const [m] = await workingMemoriesPg(q, store, id);
    guard?.(m ? { ...underReview(m), superseded_by: null, expires_at: null } : null);
    if (!m) throw usageError(`no memory ${JSON.stringify(id)} in store ${store.name} (no working memory with that resource or thread id)`);
    const text = correction.action === 'supersede' ? correction.fact : null;
    if (text !== null) assertReplaces(m, text);
    const at = new Date(now).toISOString();
    const stamp = `"updatedAt" = ($3::timestamptz AT TIME ZONE 'UTC'), "updatedAtZ" = $3::timestamptz`;
    const r = m.scope === 'resource'
      ? await q.query(`UPDATE ${tableOf(s, RESOURCES)} SET "workingMemory" = $2, ${stamp} WHERE id = $1`, [id, text, at])
      : await q.query(`UPDATE ${tableOf(s, THREADS)} SET metadata = CASE WHEN $2::text IS NULL THEN metadata - 'workingMemory'
          ELSE coalesce(metadata, '{}'::jsonb) || jsonb_build_object('workingMemory', $2::text) END, ${stamp} WHERE id = $1`, [id, text, at]);
    if ((r.rowCount ?? 0) !== 1) throw usageError(`no memory ${JSON.stringify(id)} in store ${store.name} (it went meanwhile)`);
    if (correction.action === 'supersede') {
      return { resolution: 'replaced', resolved: log.together(null, () => decided(id, 'replaced', { action: 'supersede', scope: m.scope, fact: correction.fact, source: correction.source })) };
    }
    return { resolution: 'deleted', resolved: log.together(null, () => decided(id, 'deleted', { action: 'delete', scope: m.scope })), deleted: [id] };
  });
}
