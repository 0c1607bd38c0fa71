import type { PruneOptions, PruneResult, PostgresStoreHandle } from '../../contract.js';
import { DAY_MS, toCanonical, type Instant } from '../../../time/instants.js';
import { mastraOf } from '../names.js';
import type { MastraConfig } from '../config.js';
import { pruneDoomed, type Doomed } from '../prune.js';
import { instant, MESSAGES, THREADS } from './names.js';
import { deleteLeftoversPg, deleteMessagesPg, leftoversPg, deleteThreadPg, pgFiles, plannedWithPg, type PgFiles } from './delete.js';
import { openVectorSide } from './vectors.js';

// Prune of a Mastra store on PostgreSQL by `mastra.retention`, as on libsql (src/layouts/mastra/prune.ts): idle
// threads whole, then old messages and those beyond a thread's limit, each with its embeddings first. Resource
// working memory is never touched; no thread's updatedAt is ever set.


/** The thread's idleness as SQL over alias `t`, its cutoff $2. */
const IDLE = `${instant('updatedAt', 't')} < $2`;

export async function doomedPg(f: PgFiles, cfg: MastraConfig, now: Instant): Promise<Doomed> {
  const r = cfg.retention;
  const idleBefore = new Date(now - (r.threadIdleDays ?? 0) * DAY_MS);
  const idle = r.threadIdleDays !== undefined;
  const threads = idle ? (await f.store.pg.query<{ id: string; user: string }>(
    `SELECT t.id, t."resourceId" AS user FROM ${f.t(THREADS)} t WHERE ${IDLE.replace('$2', '$1')} ORDER BY ${instant('updatedAt', 't')}, t.id COLLATE "C"`, [idleBefore])).rows : [];
  // Only the parameters a statement uses: PostgreSQL counts them from the text.
  const params: unknown[] = [];
  const param = (v: unknown) => `$${params.push(v)}`;
  const idleSet = idle ? `m.thread_id IN (SELECT t.id FROM ${f.t(THREADS)} t WHERE ${IDLE.replace('$2', param(idleBefore))})` : 'false';
  const rules: string[] = [];
  if (r.messageDays !== undefined) rules.push(`m.at < ${param(new Date(now - r.messageDays * DAY_MS))}`);
  if (r.maxMessagesPerThread !== undefined) rules.push(`m.rank > ${param(r.maxMessagesPerThread)}`);
  const messages = rules.length === 0 ? [] : (await f.store.pg.query<{ id: string; user: string }>(`
    SELECT m.id, coalesce(m."resourceId", (SELECT t."resourceId" FROM ${f.t(THREADS)} t WHERE t.id = m.thread_id)) AS user FROM (
      SELECT id, thread_id, "resourceId", ${instant('createdAt')} AS at,
        row_number() OVER (PARTITION BY thread_id ORDER BY ${instant('createdAt')} DESC, id COLLATE "C" DESC) AS rank FROM ${f.t(MESSAGES)}
    ) m WHERE NOT (${idleSet}) AND (${rules.join(' OR ')}) ORDER BY m.at, m.id COLLATE "C"`, params)).rows;
  const threadMessages = idle ? Number((await f.store.pg.query<{ n: string }>(
    `SELECT count(*) AS n FROM ${f.t(MESSAGES)} m WHERE m.thread_id IN (SELECT t.id FROM ${f.t(THREADS)} t WHERE ${IDLE.replace('$2', '$1')})`, [idleBefore])).rows[0]!.n) : 0;
  return { threads, messages, threadMessages };
}

export async function mastraPrunePg(store: PostgresStoreHandle, { ctx, dryRun, beforeDelete }: PruneOptions): Promise<PruneResult> {
  const started = Date.now();
  const now = ctx.now();
  const cfg = mastraOf(store.config);
  const result: PruneResult = { store: store.name, now: toCanonical(now), dryRun, deleted: 0, expired: 0, superseded: 0, cascaded: 0, batches: 0, ids: [], idsTruncated: false, durationMs: 0 };
  const v = await openVectorSide(store);
  try {
    const f = await pgFiles(store, v);
    const idleBefore = new Date(now - (cfg.retention.threadIdleDays ?? 0) * DAY_MS);
    return await pruneDoomed(result, await doomedPg(f, cfg, now), {
      thread: (id) => deleteThreadPg(f, id, IDLE, [idleBefore]),
      messages: (ids) => deleteMessagesPg(f, ids),
      planned: (threads, messages) => plannedWithPg(f, threads, messages),
      leftovers: () => leftoversPg(f),
      deleteLeftovers: (found) => deleteLeftoversPg(f, found),
    }, { ctx, dryRun, beforeDelete, batch: cfg.batch });
  } finally {
    result.durationMs = Date.now() - started;
    await v.close();
  }
}
