import type { EraseSelector, Erased, ErasedLedger, LayoutEraseOptions, PostgresStoreHandle } from '../../contract.js';
import { ledgerSelectors } from '../../contract.js';
import { messageTexts } from '../content.js';
import type { Plan as LibsqlPlan } from '../selection.js';
import { scrubTables } from '../../../engines/postgres/scrub.js';
import { MESSAGES, OBSERVATIONS, RESOURCES, STORE_TABLES, THREADS } from './names.js';
import { deleteMessagesPg, deleteThreadPg, pgFiles, type PgFiles } from './delete.js';
import { deleteEmbeddings, openVectorSide, together, type Queryable } from './vectors.js';

// The Mastra layout's erase on PostgreSQL (src/erase/erase.ts runs it, then has the engine VACUUM FULL the tables
// named in `Erased.tables` and read their relation files back): the same rows as on libsql (src/layouts/mastra/
// erase.ts) for --user, --subject and --ids, each message's embeddings first. PgVector's tables in another schema or
// database are vacuumed and read back here, on their own connection (`Erased.bytes`).

/** What the libsql form's plan takes (src/layouts/mastra/selection.ts), without its texts and vectors. */
type Plan = Omit<LibsqlPlan, 'texts' | 'vectors'>;

/** ASCII lower case, as the libsql form's SQLite lower() folds. */
const lower = (e: string) => `translate(${e}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')`;
const has = (col: string, param = '$1') => `strpos(${lower(col)}, ${lower(`${param}::text`)}) > 0`;

async function col(q: Queryable, sql: string, params: unknown[]): Promise<string[]> {
  return (await q.query<{ id: string }>(sql, params)).rows.map((r) => r.id);
}

async function selected(f: PgFiles, sel: EraseSelector, deletedIds: readonly string[]): Promise<Plan> {
  const q = f.store.pg;
  const p: Plan = { threads: [], messages: [], resources: [], clearResources: [], clearThreads: [], observations: [] };
  if ('user' in sel) {
    p.threads = await col(q, `SELECT id FROM ${f.t(THREADS)} WHERE "resourceId" = $1`, [sel.user]);
    p.messages = await col(q, `SELECT id FROM ${f.t(MESSAGES)} WHERE "resourceId" = $1 OR thread_id IN (SELECT id FROM ${f.t(THREADS)} WHERE "resourceId" = $1)`, [sel.user]);
    p.resources = await col(q, `SELECT id FROM ${f.t(RESOURCES)} WHERE id = $1`, [sel.user]);
    // What memory-warden's prune already took for this person: any embedding still naming it goes too.
    p.messages.push(...deletedIds.filter((id) => !p.messages.includes(id)));
  } else if ('ids' in sel) {
    p.threads = await col(q, `SELECT id FROM ${f.t(THREADS)} WHERE id = ANY($1::text[])`, [sel.ids]);
    p.messages = await col(q, `SELECT id FROM ${f.t(MESSAGES)} WHERE id = ANY($1::text[]) OR thread_id = ANY($1::text[])`, [sel.ids]);
    p.resources = await col(q, `SELECT id FROM ${f.t(RESOURCES)} WHERE id = ANY($1::text[])`, [sel.ids]);
  } else {
    p.messages = await col(q, `SELECT id FROM ${f.t(MESSAGES)} WHERE ${has('content')}`, [sel.subject]);
    p.clearResources = await col(q, `SELECT id FROM ${f.t(RESOURCES)} WHERE ${has('"workingMemory"')}`, [sel.subject]);
    p.clearThreads = await col(q, `SELECT id FROM ${f.t(THREADS)} WHERE ${has('title')} OR ${has("coalesce(metadata->>'workingMemory', '')")}`, [sel.subject]);
  }
  if (f.observations) p.observations = await col(q, `SELECT id FROM ${f.t(OBSERVATIONS)} WHERE ${observationWhere(sel)}`, observationParams(sel, p));
  return p;
}

const observationWhere = (sel: EraseSelector) => ('subject' in sel ? has('"activeObservations"') : `"resourceId" = ANY($1::text[]) OR "threadId" = ANY($2::text[])`);
const observationParams = (sel: EraseSelector, p: Plan): unknown[] => ('subject' in sel ? [sel.subject] : ['user' in sel ? [sel.user] : p.resources, p.threads]);
const embeddingWhere = (sel: EraseSelector) => ('subject' in sel
  ? `(${has("coalesce(metadata->>'content', '')")} OR ${has("coalesce(metadata->>'text', '')")})`
  : `(metadata->>'resource_id' = ANY($1::text[]) OR metadata->>'thread_id' = ANY($2::text[]) OR metadata->>'message_id' = ANY($3::text[]))`);
const embeddingParams = (sel: EraseSelector, p: Plan): unknown[] => ('subject' in sel ? [sel.subject] : ['user' in sel ? [sel.user] : p.resources, p.threads, p.messages]);

async function textsOf(f: PgFiles, p: Plan, sel: EraseSelector): Promise<string[]> {
  const out: string[] = [];
  const q = f.store.pg;
  const text = async (qq: Queryable, sql: string, params: unknown[]) => (await qq.query<{ t: unknown }>(sql, params)).rows.map((r) => r.t).filter((t): t is string => typeof t === 'string' && t !== '');
  for (const c of await text(q, `SELECT content AS t FROM ${f.t(MESSAGES)} WHERE id = ANY($1::text[])`, [p.messages])) out.push(...messageTexts(c));
  const threads = [...p.threads, ...p.clearThreads];
  out.push(...(await text(q, `SELECT title AS t FROM ${f.t(THREADS)} WHERE id = ANY($1::text[])`, [threads])));
  out.push(...(await text(q, `SELECT metadata->>'workingMemory' AS t FROM ${f.t(THREADS)} WHERE id = ANY($1::text[])`, [threads])));
  out.push(...(await text(q, `SELECT "workingMemory" AS t FROM ${f.t(RESOURCES)} WHERE id = ANY($1::text[])`, [[...p.resources, ...p.clearResources]])));
  if (f.observations) out.push(...(await text(q, `SELECT "activeObservations" AS t FROM ${f.t(OBSERVATIONS)} WHERE id = ANY($1::text[])`, [p.observations])));
  // Embeddings repeat the message's text (or the observed text) in their metadata, those whose message is gone too.
  for (const t of f.v.tables) {
    out.push(...(await text(f.v.pg, `SELECT metadata->>'content' AS t FROM ${f.v.table(t)} WHERE ${embeddingWhere(sel)}`, embeddingParams(sel, p))));
    out.push(...(await text(f.v.pg, `SELECT metadata->>'text' AS t FROM ${f.v.table(t)} WHERE ${embeddingWhere(sel)}`, embeddingParams(sel, p))));
  }
  return [...new Set(out.filter((t) => t.trim().length >= 3))];
}

export async function eraseMastraPg(store: PostgresStoreHandle, sel: EraseSelector, dryRun: boolean, opts: Omit<LayoutEraseOptions, 'selector' | 'dryRun'>): Promise<Erased> {
  const v = await openVectorSide(store);
  try {
    const f = await pgFiles(store, v);
    const present = [...STORE_TABLES].filter((t) => t !== OBSERVATIONS || f.observations);
    const tables = [...present, ...(v.together ? v.tables : [])];
    const p = await selected(f, sel, opts.deletedIds ?? []);
    const texts = await textsOf(f, p, sel);
    const ids = [...new Set([...p.resources, ...p.threads, ...p.messages, ...p.clearResources, ...p.clearThreads, ...p.observations])];
    if (dryRun) return { ids, counts: { threads: p.threads.length, messages: p.messages.length, resources: p.resources.length, observations: p.observations.length }, texts, tables };
    const done = { threads: 0, messages: 0, resources: 0, observations: 0, embeddings: 0, workingMemories: 0 };
    opts.progress?.start('erase', p.threads.length + p.messages.length + 1, 'rows');
    let step = 0;
    for (const t of p.threads) {
      const d = await deleteThreadPg(f, t);
      done.threads += d.threads; done.messages += d.messages; done.observations += d.observations; done.embeddings += d.embeddings;
      opts.afterCommit?.();
      opts.progress?.set(++step);
    }
    for (let i = 0; i < p.messages.length; i += 200) {
      const batch = p.messages.slice(i, i + 200);
      const d = await deleteMessagesPg(f, batch);
      done.messages += d.messages; done.embeddings += d.embeddings;
      opts.afterCommit?.();
      opts.progress?.set((step += batch.length));
    }
    const rest = await together(store, v, f.lockTimeoutMs,
      async (q) => {
        let n = await deleteEmbeddings(q, v, 'resource_id', 'user' in sel ? [sel.user] : p.resources);
        for (const t of v.tables) n += (await q.query(`DELETE FROM ${v.table(t)} WHERE ${embeddingWhere(sel)}`, embeddingParams(sel, p))).rowCount ?? 0;
        return n;
      },
      async (q) => {
        const observations = f.observations ? (await q.query(`DELETE FROM ${f.t(OBSERVATIONS)} WHERE ${observationWhere(sel)}`, observationParams(sel, p))).rowCount ?? 0 : 0;
        const resources = (await q.query(`DELETE FROM ${f.t(RESOURCES)} WHERE id = ANY($1::text[])`, [p.resources])).rowCount ?? 0;
        let workingMemories = (await q.query(`UPDATE ${f.t(RESOURCES)} SET "workingMemory" = NULL WHERE id = ANY($1::text[])`, [p.clearResources])).rowCount ?? 0;
        workingMemories += (await q.query(`UPDATE ${f.t(THREADS)} SET title = '', metadata = CASE WHEN metadata IS NULL THEN NULL ELSE metadata - 'workingMemory' END WHERE id = ANY($1::text[])`, [p.clearThreads])).rowCount ?? 0;
        return { observations, resources, workingMemories };
      });
    opts.progress?.set(++step);
    opts.progress?.done();
    done.embeddings += rest.embeddings;
    done.resources += rest.result?.resources ?? 0; done.observations += rest.result?.observations ?? 0; done.workingMemories += rest.result?.workingMemories ?? 0;
    const out: Erased = { ids, counts: done, texts, tables };
    if (!v.together && v.tables.length > 0) {
      // PgVector's tables elsewhere: vacuumed and read back here, for the texts and ids (the engine reads the store's).
      const needles = [...new Set([...texts, ...ids].filter((n) => Buffer.byteLength(n) >= 4))];
      const c = await v.pg.connect();
      try {
        out.bytes = (await scrubTables(c, { schema: v.schema, tables: v.tables, needles, lockTimeoutMs: store.config.mastra?.pgvector?.lockTimeoutMs ?? 50, explain: v.pg.explain, uncompress: true })).bytes;
      } finally {
        c.release();
      }
    }
    return out;
  } finally {
    await v.close();
  }
}

/** What of this store earlier erases took: the ids of threads, messages, resources and observations, and the resources. */
export async function mastraErasedInPg(store: PostgresStoreHandle, ledger: ErasedLedger): Promise<EraseSelector[]> {
  const v = await openVectorSide(store);
  try {
    const f = await pgFiles(store, v);
    const all: string[] = [];
    for (const t of [THREADS, MESSAGES, RESOURCES, ...(f.observations ? [OBSERVATIONS] : [])]) all.push(...(await col(store.pg, `SELECT id FROM ${f.t(t)}`, [])));
    for (const t of v.tables) {
      for (const r of (await v.pg.query<{ m: string | null; th: string | null }>(`SELECT metadata->>'message_id' AS m, metadata->>'thread_id' AS th FROM ${v.table(t)}`)).rows) {
        if (r.m) all.push(r.m);
        if (r.th) all.push(r.th);
      }
    }
    const users = [
      ...(await col(store.pg, `SELECT DISTINCT "resourceId" AS id FROM ${f.t(THREADS)} WHERE "resourceId" IS NOT NULL`, [])),
      ...(await col(store.pg, `SELECT id FROM ${f.t(RESOURCES)}`, [])),
    ];
    return ledgerSelectors(all, users, ledger);
  } finally {
    await v.close();
  }
}
