import type { JobContext } from '../../job/job.js';
import type { PruneOptions, PruneResult, StoreHandle } from '../contract.js';
import { DAY_MS, toCanonical, type Instant } from '../../time/instants.js';
import { openMastra, type MastraFiles } from './files.js';
import { deleteLeftovers, deleteMessages, deleteThread, leftoverCounts, leftovers, plannedWith, type Deleted, type Leftover, type LeftoverCode } from './delete.js';
import { mastraOf, MESSAGES, THREADS } from './names.js';
import type { MastraConfig } from './config.js';

// Prune by the retention the store's `mastra.retention` configures: idle threads whole, then old messages and those
// beyond a thread's limit, each with its embeddings. Resource working memory is never touched.

const ID_CAP = 1000;

export interface Doomed {
  /** Threads idle past threadIdleDays, with their resource. */
  threads: { id: string; user: string }[];
  /** Messages past messageDays or beyond maxMessagesPerThread, not in a doomed thread. */
  messages: { id: string; user: string }[];
  /** Messages that go with the doomed threads. */
  threadMessages: number;
}

const iso = (t: Instant) => new Date(t).toISOString();

/** Mastra writes every time as toISOString(): text order is time order. Anything else is left (check reports it). */
const ISO_SHAPE = `GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'`;

export function idleThreadSql(retention: MastraConfig['retention']): string | null {
  return retention.threadIdleDays === undefined ? null : `updatedAt ${ISO_SHAPE} AND updatedAt < @idleBefore`;
}

export function doomedBy(f: Pick<MastraFiles, 'db'>, cfg: MastraConfig, now: Instant): Doomed {
  const r = cfg.retention;
  const params = { idleBefore: iso(now - (r.threadIdleDays ?? 0) * DAY_MS), oldBefore: iso(now - (r.messageDays ?? 0) * DAY_MS), keep: r.maxMessagesPerThread ?? 0 };
  const idle = idleThreadSql(r);
  const threads = idle === null ? [] : (f.db.prepare(`SELECT id, resourceId AS user FROM ${THREADS} WHERE ${idle} ORDER BY updatedAt, id`).all(params) as { id: string; user: string }[]);
  const idleSet = idle === null ? '0' : `thread_id IN (SELECT id FROM ${THREADS} WHERE ${idle})`;
  const rules: string[] = [];
  if (r.messageDays !== undefined) rules.push(`(createdAt ${ISO_SHAPE} AND createdAt < @oldBefore)`);
  if (r.maxMessagesPerThread !== undefined) rules.push('rank > @keep');
  const messages = rules.length === 0 ? [] : (f.db.prepare(`
    SELECT id, coalesce(resourceId, (SELECT resourceId FROM ${THREADS} t WHERE t.id = m.thread_id)) AS user FROM (
      SELECT id, thread_id, resourceId, createdAt, row_number() OVER (PARTITION BY thread_id ORDER BY createdAt DESC, id DESC) AS rank FROM ${MESSAGES}
    ) m WHERE NOT (${idleSet}) AND (${rules.join(' OR ')}) ORDER BY createdAt, id`).all(params) as { id: string; user: string }[]);
  const threadMessages = idle === null ? 0 : (f.db.prepare(`SELECT count(*) AS n FROM ${MESSAGES} WHERE ${idleSet}`).get(params) as { n: number }).n;
  return { threads, messages, threadMessages };
}

/** How an engine deletes what prune takes (libsql here, PostgreSQL in postgres/prune.ts); each may return at once. */
export interface PruneSteps {
  /** A doomed thread whole, if it is still idle when its transaction looks again. */
  thread(id: string): Deleted | Promise<Deleted>;
  /** A batch of doomed messages, each with its embeddings. */
  messages(ids: string[]): Deleted | Promise<Deleted>;
  /**
   * For a dry run: the embeddings and observation records `thread` and `messages` would delete with these threads and
   * messages (an embedding naming both a doomed thread and a doomed message counted once).
   */
  planned(threads: readonly string[], messages: readonly string[]): Omit<Deleted, 'messages' | 'threads'> | Promise<Omit<Deleted, 'messages' | 'threads'>>;
  /** What Mastra's own deletes left (delete.ts LEFTOVER_CODES), each looked up after it was seen. */
  leftovers(): Leftover[] | Promise<Leftover[]>;
  /** Those of `found` whose message or thread is still not there, deleted; how many went, by code. */
  deleteLeftovers(found: Leftover[]): Record<LeftoverCode, number> | Promise<Record<LeftoverCode, number>>;
}

/**
 * How long a leftover seen (an embedding without its message or thread, an observation record without its thread) is
 * left before it is looked at again. Mastra's Memory.saveMessages commits a message before it upserts its embedding,
 * but an Agent's turn does the reverse: its SemanticRecall output processor upserts the embeddings, then its
 * MessageHistory processor saves the messages. An embedding seen in that gap names a message about to be written; one
 * whose message is still missing a grace later was left by a delete (or by a turn that died in the gap).
 */
export const ORPHAN_GRACE_MS = 5000;

/** What Mastra's own deletes left: seen, then after ORPHAN_GRACE_MS those still without their message or thread deleted. */
async function sweepLeftovers(steps: PruneSteps, ctx: JobContext, store: string): Promise<Record<LeftoverCode, number>> {
  const found = await steps.leftovers();
  if (found.length === 0) return leftoverCounts();
  ctx.log.info({ store, leftovers: leftoverCounts(found), graceMs: ORPHAN_GRACE_MS }, 'leftovers of deletes: looked at again after the grace');
  await new Promise((r) => setTimeout(r, ORPHAN_GRACE_MS));
  return ctx.signal.aborted ? leftoverCounts() : await steps.deleteLeftovers(found);
}

/**
 * Prune's steps over what `doomed` names, the same on every engine: idle threads whole, then old messages a batch at
 * a time (each told to `beforeDelete` first), then the embeddings Mastra's own deletes left; a dry run counts.
 */
export async function pruneDoomed(result: PruneResult, doomed: Doomed, steps: PruneSteps, o: { ctx: JobContext; dryRun: boolean; beforeDelete: PruneOptions['beforeDelete']; batch: number }): Promise<PruneResult> {
  const { ctx, beforeDelete } = o;
  const now = ctx.now();
  // The ids are listed up to ID_CAP; idsTruncated says whether more went.
  const list = (ids: string[]) => result.ids.push(...ids.slice(0, Math.max(0, ID_CAP - result.ids.length)));
  const counts = { threads: 0, messages: 0, threadMessages: 0, embeddings: 0, observations: 0 };
  result.counts = counts;
  if (o.dryRun) {
    const withThem = await steps.planned(doomed.threads.map((t) => t.id), doomed.messages.map((m) => m.id));
    Object.assign(counts, { threads: doomed.threads.length, messages: doomed.messages.length, threadMessages: doomed.threadMessages, ...withThem });
    result.deleted = doomed.threads.length + doomed.messages.length;
    result.expired = result.deleted;
    result.cascaded = doomed.threadMessages + withThem.embeddings + withThem.observations;
    list([...doomed.threads, ...doomed.messages].map((d) => d.id));
    result.idsTruncated = result.deleted > result.ids.length;
    result.leftovers = leftoverCounts(await steps.leftovers());
    return result;
  }
  for (const t of doomed.threads) {
    if (ctx.signal.aborted) break;
    beforeDelete?.([t], now);
    const d = await steps.thread(t.id);
    result.batches++;
    if (d.threads === 0) continue;
    result.deleted++;
    result.expired++;
    result.cascaded += d.messages + d.embeddings + d.observations;
    counts.threads++;
    counts.threadMessages += d.messages;
    counts.embeddings += d.embeddings;
    counts.observations += d.observations;
    list([t.id]);
  }
  for (let i = 0; i < doomed.messages.length && !ctx.signal.aborted; i += o.batch) {
    const batch = doomed.messages.slice(i, i + o.batch);
    beforeDelete?.(batch, now);
    const d = await steps.messages(batch.map((m) => m.id));
    result.batches++;
    result.deleted += d.messages;
    result.expired += d.messages;
    result.cascaded += d.embeddings;
    counts.messages += d.messages;
    counts.embeddings += d.embeddings;
    list(batch.map((m) => m.id));
  }
  result.idsTruncated = result.deleted > result.ids.length;
  // Last: what Mastra's own deletes left, their message or thread gone (delete.ts).
  if (!ctx.signal.aborted) result.leftovers = await sweepLeftovers(steps, ctx, result.store);
  ctx.log.info({ store: result.store, deleted: result.deleted, cascaded: result.cascaded, leftovers: result.leftovers }, 'mastra prune done');
  return result;
}

export async function mastraPrune(store: StoreHandle, ctx: JobContext, { dryRun, beforeDelete }: Pick<PruneOptions, 'dryRun' | 'beforeDelete'>): Promise<PruneResult> {
  const started = Date.now();
  const now = ctx.now();
  const cfg = mastraOf(store.config);
  const f = openMastra(store);
  const result: PruneResult = { store: store.name, now: toCanonical(now), dryRun, deleted: 0, expired: 0, superseded: 0, cascaded: 0, batches: 0, ids: [], idsTruncated: false, durationMs: 0 };
  try {
    // Each deleted message's bytes are zeroed as it goes: a later erase finds no copy in a free page.
    if (!dryRun) for (const db of new Set([f.db, f.vec])) db.pragma('secure_delete = ON');
    const idle = idleThreadSql(cfg.retention);
    const idleBefore = iso(now - (cfg.retention.threadIdleDays ?? 0) * DAY_MS);
    return await pruneDoomed(result, doomedBy(f, cfg, now), {
      // Still idle inside the transaction: an agent that wrote to the thread since keeps it.
      thread: (id) => deleteThread(f, id, () => idle !== null && f.db.prepare(`SELECT 1 FROM ${THREADS} WHERE id = @id AND ${idle}`).get({ id, idleBefore }) !== undefined),
      messages: (ids) => deleteMessages(f, ids),
      planned: (threads, messages) => plannedWith(f, threads, messages),
      leftovers: () => leftovers(f),
      deleteLeftovers: (found) => deleteLeftovers(f, found),
    }, { ctx, dryRun, beforeDelete, batch: cfg.batch });
  } finally {
    result.durationMs = Date.now() - started;
    f.close();
  }
}
