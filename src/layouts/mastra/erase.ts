import type { EraseOptions, EraseSelector, Erased, StoreHandle } from '../contract.js';
import { openMastra, quoteId, type LibDb, type MastraFiles } from './files.js';
import { deleteEmbeddings, deleteMessages, deleteThread, hasTable, together } from './delete.js';
import { MESSAGES, OBSERVATIONS, RESOURCES, THREADS } from './names.js';
import { messageTexts } from './content.js';
import { storeError } from '../../core/errors.js';
import { rewriteTable, tablesHolding, textsLeft, truncateWal, wipeFreePages } from './scrub.js';

// The Mastra layout's erase (src/erase/erase.ts runs it): a resource's threads, messages, working memory, observations
// and every embedding, on connections with secure_delete on, then each file's WAL checkpointed and truncated. No
// VACUUM: libsql's duplicates a row of libsql_vector_meta_shadow (docs/mastra-layout.md); secure_delete already
// zeroed every freed byte.

interface Plan {
  threads: string[];
  messages: string[];
  resources: string[];
  /** Rows whose working memory holds the subject (erase --subject): cleared, the row kept. */
  clearResources: string[];
  clearThreads: string[];
  texts: string[];
}

const json = (xs: readonly string[]) => JSON.stringify(xs);
const folded = (col: string) => `instr(lower(${col}), lower(@subject)) > 0`;

function plan(f: MastraFiles, sel: EraseSelector, deletedIds: readonly string[]): Plan {
  const db = f.db;
  const p: Plan = { threads: [], messages: [], resources: [], clearResources: [], clearThreads: [], texts: [] };
  const ids = (sql: string, params: unknown) => (db.prepare(sql).all(params) as { id: string }[]).map((r) => String(r.id));
  if ('user' in sel) {
    const u = { user: sel.user };
    p.threads = ids(`SELECT id FROM ${THREADS} WHERE resourceId = @user`, u);
    p.messages = ids(`SELECT id FROM ${MESSAGES} WHERE resourceId = @user OR thread_id IN (SELECT id FROM ${THREADS} WHERE resourceId = @user)`, u);
    p.resources = ids(`SELECT id FROM ${RESOURCES} WHERE id = @user`, u);
  } else if ('ids' in sel) {
    const all = { ids: json(sel.ids) };
    p.threads = ids(`SELECT id FROM ${THREADS} WHERE id IN (SELECT value FROM json_each(@ids))`, all);
    p.messages = ids(`SELECT id FROM ${MESSAGES} WHERE id IN (SELECT value FROM json_each(@ids)) OR thread_id IN (SELECT value FROM json_each(@ids))`, all);
    p.resources = ids(`SELECT id FROM ${RESOURCES} WHERE id IN (SELECT value FROM json_each(@ids))`, all);
  } else {
    const s = { subject: sel.subject };
    p.messages = ids(`SELECT id FROM ${MESSAGES} WHERE ${folded('content')}`, s);
    p.clearResources = ids(`SELECT id FROM ${RESOURCES} WHERE ${folded('workingMemory')}`, s);
    p.clearThreads = ids(`SELECT id FROM ${THREADS} WHERE ${folded('title')} OR (json_valid(metadata, 6) AND ${folded('json(metadata)')})`, s);
  }
  // What memory-warden's prune already took for this person: any embedding still naming it goes too.
  if ('user' in sel) p.messages.push(...deletedIds.filter((id) => !p.messages.includes(id)));
  p.texts = textsOf(f, p, sel);
  return p;
}

function textsOf(f: MastraFiles, p: Plan, sel: EraseSelector): string[] {
  const out: string[] = [];
  const from = (db: LibDb) => (sql: string, params: unknown) => (db.prepare(sql).all(params) as { t: unknown }[]).map((r) => r.t).filter((t): t is string => typeof t === 'string' && t !== '');
  const col = from(f.db);
  for (const c of col(`SELECT content AS t FROM ${MESSAGES} WHERE id IN (SELECT value FROM json_each(?))`, json(p.messages))) out.push(...messageTexts(c));
  const threads = json([...p.threads, ...p.clearThreads]);
  out.push(...col(`SELECT title AS t FROM ${THREADS} WHERE id IN (SELECT value FROM json_each(?))`, threads));
  out.push(...col(`SELECT json_extract(metadata, '$.workingMemory') AS t FROM ${THREADS} WHERE json_valid(metadata, 6) AND id IN (SELECT value FROM json_each(?))`, threads));
  out.push(...col(`SELECT workingMemory AS t FROM ${RESOURCES} WHERE id IN (SELECT value FROM json_each(?))`, json([...p.resources, ...p.clearResources])));
  if (hasTable(f, OBSERVATIONS)) out.push(...col(`SELECT activeObservations AS t FROM ${OBSERVATIONS} WHERE ${observationWhere(sel)}`, observationParams(sel, p)));
  // Embeddings whose message is gone still repeat its text in their metadata (Mastra's own prune leaves them);
  // observation groups' embeddings hold theirs as `text`. They are read where they are: the vector file, if another.
  for (const t of f.vectorTables) {
    for (const m of from(f.vec)(`SELECT metadata AS t FROM ${quoteId(t)} WHERE ${embeddingWhere(sel)}`, embeddingParams(sel, p))) {
      try {
        const meta = JSON.parse(m) as { content?: unknown; text?: unknown };
        for (const c of [meta.content, meta.text]) if (typeof c === 'string') out.push(c);
      } catch { /* metadata that is not JSON names no one */ }
    }
  }
  return [...new Set(out.filter((t) => t.trim().length >= 3))];
}

const observationWhere = (sel: EraseSelector) => ('subject' in sel ? folded('activeObservations') : `resourceId IN (SELECT value FROM json_each(@resources)) OR threadId IN (SELECT value FROM json_each(@threads))`);
const observationParams = (sel: EraseSelector, p: Plan) => ('subject' in sel ? { subject: sel.subject } : { resources: json('user' in sel ? [sel.user] : p.resources), threads: json(p.threads) });
const embeddingWhere = (sel: EraseSelector) => ('subject' in sel
  ? `json_valid(metadata) AND ${folded('metadata')}`
  : `json_valid(metadata) AND (json_extract(metadata, '$.resource_id') IN (SELECT value FROM json_each(@resources)) OR json_extract(metadata, '$.thread_id') IN (SELECT value FROM json_each(@threads)) OR json_extract(metadata, '$.message_id') IN (SELECT value FROM json_each(@messages)))`);
const embeddingParams = (sel: EraseSelector, p: Plan) => ('subject' in sel ? { subject: sel.subject } : { resources: json('user' in sel ? [sel.user] : []), threads: json(p.threads), messages: json(p.messages) });

/** quick_check of each file through libsql (plain SQLite misreads the vector index); nothing changes on a damaged file. */
export function assertLibsqlIntact(db: LibDb, path: string): void {
  const lines = (db.pragma('quick_check(5)') as Record<string, unknown>[]).map((r) => String(Object.values(r)[0]));
  if (lines.length === 1 && lines[0] === 'ok') return;
  throw storeError(`${path}: quick_check failed (${lines.join('; ').slice(0, 300)}); nothing was changed: restore a snapshot or recover the file first`);
}

export async function eraseMastra(store: StoreHandle, sel: EraseSelector, dryRun: boolean, opts: EraseOptions): Promise<Erased> {
  const f = openMastra(store);
  try {
    const p = attempt(`erase: read ${f.dbPath}`, () => plan(f, sel, opts.deletedIds ?? []));
    const counts: Record<string, number> = { threads: p.threads.length, messages: p.messages.length, resources: p.resources.length };
    const ids = [...new Set([...p.resources, ...p.threads, ...p.messages, ...p.clearResources, ...p.clearThreads])];
    if (dryRun) return { ids, counts, texts: p.texts };
    assertLibsqlIntact(f.db, f.dbPath);
    if (f.vec !== f.db) assertLibsqlIntact(f.vec, f.vecPath);
    for (const db of new Set([f.db, f.vec])) db.pragma('secure_delete = ON');
    const done = { threads: 0, messages: 0, resources: 0, observations: 0, embeddings: 0, workingMemories: 0 };
    for (const t of p.threads) {
      const d = deleteThread(f, t);
      done.threads += d.threads; done.messages += d.messages; done.observations += d.observations; done.embeddings += d.embeddings;
    }
    const batch = 200;
    for (let i = 0; i < p.messages.length; i += batch) {
      const d = deleteMessages(f, p.messages.slice(i, i + batch));
      done.messages += d.messages; done.embeddings += d.embeddings;
    }
    const rest = together(f, () => deleteEmbeddings(f, 'resource_id', 'user' in sel ? [sel.user] : []) + subjectEmbeddings(f, sel), () => finishRows(f, sel, p));
    done.embeddings += rest.embeddings;
    done.resources += rest.result.resources; done.observations += rest.result.observations; done.workingMemories += rest.result.workingMemories;
    const needles = 'subject' in sel ? [...p.texts, sel.subject] : p.texts;
    const files: [LibDb, string][] = f.vec === f.db ? [[f.db, f.dbPath]] : [[f.db, f.dbPath], [f.vec, f.vecPath]];
    for (const [db, path] of files) scrubFile(db, path, needles);
    const walTruncated = files.map(([db]) => truncateWal(db)).every(Boolean);
    // Unknown is not "none left": the bytes are read back, and what is still there is counted in the receipt.
    const bytesLeft = textsLeft(files.map(([, path]) => path), needles);
    if (bytesLeft > 0) opts.log?.warn({ store: store.name, bytesLeft }, 'erase: erased texts are still in the store files (counted in the receipt as bytesLeft)');
    return { ids, counts: { ...done, bytesLeft }, texts: p.texts, walTruncated };
  } finally {
    f.close();
  }
}

function subjectEmbeddings(f: MastraFiles, sel: EraseSelector): number {
  if (!('subject' in sel)) return 0;
  let n = 0;
  for (const t of f.vectorTables) n += f.vec.prepare(`DELETE FROM ${quoteId(t)} WHERE json_valid(metadata) AND ${folded('metadata')}`).run({ subject: sel.subject }).changes;
  return n;
}

/** The resource rows, observations and (for --subject) the working memories that hold the subject. */
function finishRows(f: MastraFiles, sel: EraseSelector, p: Plan) {
  const obs = hasTable(f, OBSERVATIONS)
    ? f.db.prepare(`DELETE FROM ${OBSERVATIONS} WHERE ${observationWhere(sel)}`).run(observationParams(sel, p)).changes : 0;
  const resources = f.db.prepare(`DELETE FROM ${RESOURCES} WHERE id IN (SELECT value FROM json_each(?))`).run(json(p.resources)).changes;
  let workingMemories = f.db.prepare(`UPDATE ${RESOURCES} SET workingMemory = NULL WHERE id IN (SELECT value FROM json_each(?))`).run(json(p.clearResources)).changes;
  // Mastra writes metadata as JSONB; a text one stays text.
  const removed = `CASE WHEN typeof(metadata) = 'blob' THEN jsonb_remove(metadata, '$.workingMemory') ELSE json_remove(metadata, '$.workingMemory') END`;
  workingMemories += f.db.prepare(`UPDATE ${THREADS} SET title = '', metadata = ${removed} WHERE json_valid(metadata, 6) AND id IN (SELECT value FROM json_each(?))`).run(json(p.clearThreads)).changes;
  f.db.prepare(`UPDATE ${THREADS} SET title = '' WHERE NOT coalesce(json_valid(metadata, 6), 0) AND id IN (SELECT value FROM json_each(?))`).run(json(p.clearThreads));
  return { observations: obs, resources, workingMemories };
}

/**
 * Free pages zeroed; then, if the file still holds a text (cells Mastra's own deletes left in a page's free space),
 * the tables owning those pages rewritten, and the free pages zeroed again. Checkpointed first, so the bytes read
 * are the file's own.
 */
function scrubFile(db: LibDb, path: string, needles: readonly string[]): void {
  wipeFreePages(db);
  truncateWal(db);
  const holders = tablesHolding(db, path, needles);
  if (holders !== null && holders.length === 0) return;
  const mastraTables = new Set((db.prepare(`SELECT name FROM sqlite_schema WHERE type = 'table' AND (name LIKE 'mastra\\_%' ESCAPE '\\' OR sql LIKE '%F32_BLOB%')`).all() as { name: string }[]).map((r) => r.name));
  for (const t of holders ?? [...mastraTables]) if (mastraTables.has(t)) rewriteTable(db, t);
  wipeFreePages(db);
}

/** SQLite's own messages name no file: what was being done and the file go in front. */
function attempt<T>(doing: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw storeError(`${doing}: ${(err as Error).message}`, err);
  }
}
