import type { CheckOptions, CheckReport, PostgresStoreHandle } from '../../contract.js';
import { finding, ID_SAMPLE, isProblem, type Finding } from '../../../job/findings.js';
import { toCanonical } from '../../../time/instants.js';
import { engineFor } from '../../../engines/registry.js';
import { mastraOf } from '../names.js';
import { parses } from '../content.js';
import { MESSAGES, OBSERVATIONS, STORE_TABLES, THREADS } from './names.js';
import { pgFiles, type PgFiles } from './delete.js';
import { doomedPg } from './prune.js';
import { openVectorSide } from './vectors.js';
import { workingMemoriesPg } from './working-memory.js';
import { compressibleColumns } from '../../../engines/postgres/bytes.js';
import { reviewDuePg } from './review.js';

// The Mastra store's check on PostgreSQL, as on libsql (src/layouts/mastra/check.ts): the database's own index check
// (amcheck), then what Mastra's own calls leave behind (messages without their thread, embeddings without their
// message, observations without their thread), across the two databases when the vectors are in another, and what
// would break a read or a prompt. Reads only.

async function ids(f: PgFiles, sql: string, params: unknown[] = []): Promise<{ ids: string[]; n: number }> {
  const r = await f.store.pg.query<{ id: string; n: string }>(`SELECT id, count(*) OVER () AS n FROM (${sql}) x ORDER BY id COLLATE "C" LIMIT ${ID_SAMPLE}`, params);
  return { ids: r.rows.map((x) => x.id), n: Number(r.rows[0]?.n ?? 0) };
}

/** What of `values` is not an id of `table` in the store (a page of them at a time). */
async function absent(f: PgFiles, table: string, values: readonly string[]): Promise<Set<string>> {
  const out = new Set<string>();
  for (let i = 0; i < values.length; i += 5000) {
    const page = values.slice(i, i + 5000);
    const have = new Set((await f.store.pg.query<{ id: string }>(`SELECT id FROM ${f.t(table)} WHERE id = ANY($1::text[])`, [page])).rows.map((r) => r.id));
    for (const x of page) if (!have.has(x)) out.add(x);
  }
  return out;
}

async function orphans(f: PgFiles): Promise<Finding[]> {
  const out: Finding[] = [];
  const noThread = await ids(f, `SELECT id FROM ${f.t(MESSAGES)} m WHERE NOT EXISTS (SELECT 1 FROM ${f.t(THREADS)} t WHERE t.id = m.thread_id)`);
  if (noThread.n > 0) out.push(finding('mastra_message_without_thread', 'error', `${noThread.n} messages whose thread is gone: Mastra lists them under no thread`, noThread.ids, noThread.n));
  const noResource = await ids(f, `SELECT id FROM ${f.t(THREADS)} WHERE "resourceId" IS NULL OR "resourceId" = ''`);
  if (noResource.n > 0) out.push(finding('mastra_thread_without_resource', 'error', `${noResource.n} threads without a resource: no user owns them, erase --user cannot reach them`, noResource.ids, noResource.n));
  if (f.observations) {
    const records = await ids(f, `SELECT id FROM ${f.t(OBSERVATIONS)} o WHERE o."threadId" IS NOT NULL AND o."threadId" <> '' AND NOT EXISTS (SELECT 1 FROM ${f.t(THREADS)} t WHERE t.id = o."threadId")`);
    if (records.n > 0) out.push(finding('mastra_observation_without_thread', 'error', `${records.n} observation records whose thread is gone: Mastra no longer shows them, they still hold what was observed`, records.ids, records.n));
  }
  // The vectors may be in another database: read their metadata's ids there, look them up here.
  for (const t of f.v.tables) {
    const meta = (await f.v.pg.query<{ id: string; message: string | null; thread: string | null }>(
      `SELECT vector_id AS id, metadata->>'message_id' AS message, metadata->>'thread_id' AS thread FROM ${f.v.table(t)}`)).rows;
    const goneMessages = await absent(f, MESSAGES, [...new Set(meta.flatMap((m) => (m.message === null ? [] : [m.message])))]);
    const noMessage = meta.filter((m) => m.message !== null && goneMessages.has(m.message)).map((m) => m.id);
    if (noMessage.length > 0) out.push(finding('mastra_embedding_without_message', 'error', `${t}: ${noMessage.length} embeddings whose message is gone, each still holding the message's text and returned by a query of the index (recall itself skips them)`, noMessage.slice(0, ID_SAMPLE), noMessage.length));
    const groups = meta.filter((m) => m.message === null && m.thread !== null);
    const goneThreads = await absent(f, THREADS, [...new Set(groups.map((m) => m.thread!))]);
    const noThreadGroup = groups.filter((m) => goneThreads.has(m.thread!)).map((m) => m.id);
    if (noThreadGroup.length > 0) out.push(finding('mastra_embedding_without_thread', 'error', `${t}: ${noThreadGroup.length} observation embeddings whose thread is gone, each still holding the observed text and returned by Mastra's search`, noThreadGroup.slice(0, ID_SAMPLE), noThreadGroup.length));
  }
  return out;
}

async function readability(f: PgFiles, maxBytes: number): Promise<Finding[]> {
  const out: Finding[] = [];
  const bad: string[] = [];
  let badCount = 0;
  const c = await f.store.pg.connect();
  try {
    await c.query('BEGIN READ ONLY');
    await c.query(`DECLARE mw_msgs NO SCROLL CURSOR FOR SELECT id, content FROM ${f.t(MESSAGES)}`);
    for (;;) {
      const page = (await c.query<{ id: string; content: string }>('FETCH 2000 FROM mw_msgs')).rows;
      for (const r of page) {
        if (typeof r.content === 'string' && parses(r.content)) continue;
        badCount++;
        if (bad.length < ID_SAMPLE) bad.push(r.id);
      }
      if (page.length < 2000) break;
    }
    await c.query('COMMIT');
  } catch (err) {
    await c.query('ROLLBACK').catch(() => {});
    throw f.store.pg.explain(err, 'check: messages');
  } finally {
    c.release();
  }
  if (badCount > 0) out.push(finding('mastra_unparseable_message', 'error', `${badCount} messages whose content is not JSON: Mastra cannot read them back`, bad, badCount));
  const large = (await workingMemoriesPg(f.store.pg, f.store)).filter((m) => Buffer.byteLength(m.text, 'utf8') > maxBytes);
  if (large.length > 0) out.push(finding('mastra_large_working_memory', 'warning', `${large.length} working memories over ${maxBytes} bytes: each goes into every prompt of its user`, large.map((m) => m.id)));
  return out;
}

/** Columns the server may compress in the tables erase reads back: its byte check cannot see into them (init stores them uncompressed). */
async function compressed(f: PgFiles): Promise<Finding[]> {
  const c = await f.store.pg.connect();
  const v = f.v.own ? await f.v.pg.connect() : c;
  try {
    const cols = [
      ...(await compressibleColumns(c, f.schema, [...STORE_TABLES])),
      ...(await compressibleColumns(v, f.v.schema, f.v.tables)),
    ].filter((x) => x.relation === x.table).map((x) => `${x.table}.${x.column}`);
    return cols.length === 0 ? [] : [finding('mastra_compressible_columns', 'warning',
      `${cols.length} columns the server may compress (${cols.slice(0, 6).join(', ')}${cols.length > 6 ? ', …' : ''}): erase's byte check cannot read compressed values; memory-warden init --store NAME stores them uncompressed`)];
  } finally {
    c.release();
    if (v !== c) v.release();
  }
}

export async function mastraCheckPg(store: PostgresStoreHandle, { ctx }: CheckOptions): Promise<CheckReport> {
  const cfg = mastraOf(store.config);
  const now = ctx.now();
  const v = await openVectorSide(store);
  try {
    const f = await pgFiles(store, v);
    const engine = await engineFor(store.config);
    const integrity = await engine.integrity(store);
    const found: Finding[] = [];
    if (integrity.result !== 'ok') found.push(finding('integrity', 'error', `amcheck: ${integrity.result}`));
    if (integrity.skipped) found.push(finding('integrity_skipped', 'info', integrity.skipped));
    found.push(...(await orphans(f)), ...(await readability(f, cfg.workingMemoryMaxBytes)), ...(await compressed(f)));
    if (v.tables.length === 0) found.push(finding('mastra_no_vectors', 'info', `schema ${v.schema}${v.own ? ' of mastra.pgvector.url' : ''}: no PgVector table: semantic recall is off, or its vectors are elsewhere (mastra.pgvector)`));
    const rows = Number((await store.pg.query<{ n: string }>(`SELECT count(*) AS n FROM ${f.t(MESSAGES)}`)).rows[0]!.n);
    const doomed = await doomedPg(f, cfg, now);
    const pending = doomed.messages.length + doomed.threadMessages;
    if (pending > 0) found.push(finding('mastra_prune_pending', 'info', `${pending} messages past retention (${doomed.threads.length} idle threads): the next prune deletes them`, undefined, pending));
    const problems = found.filter(isProblem);
    const reviewDue = (await reviewDuePg(store, { now, afterDays: ctx.config.review.afterDays, limit: 0 })).due;
    return {
      ok: problems.length === 0, store: store.name, path: store.path, checkedAt: toCanonical(now),
      rows, live: rows - pending, gap: pending, integrity: integrity.result, journalMode: 'postgres',
      dangling: problems.filter((p) => p.code.includes('without')).reduce((n, p) => n + (p.count ?? 0), 0),
      reviewDue, problems, notes: found.filter((x) => !isProblem(x)),
    };
  } finally {
    await v.close();
  }
}
