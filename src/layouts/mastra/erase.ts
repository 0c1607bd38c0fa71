import type { EraseOptions, EraseSelector, Erased, StoreHandle } from '../contract.js';
import { immediate, openMastra, quoteId, type LibDb, type MastraFiles } from './files.js';
import { deleteEmbeddings, deleteMessages, deleteThread, hasTable, together } from './delete.js';
import { OBSERVATIONS, RESOURCES, THREADS } from './names.js';
import { folded, json, observationParams, observationWhere, plan, type Plan } from './selection.js';
import { needlesOf, readBack } from './needles.js';
import { storeError } from '../../core/errors.js';
import { scrubPages, truncateWal } from './scrub.js';

// The Mastra layout's erase (src/erase/erase.ts runs it): a resource's threads, messages, working memory, observations
// and every embedding, on connections with secure_delete on; then every page of each file has its unused space
// zeroed (scrub.ts: what Mastra deleted before, without secure_delete, is still there), each WAL is checkpointed and
// truncated, and the files are read back for the person's ids and texts. No VACUUM: libsql's duplicates a row of
// libsql_vector_meta_shadow (docs/mastra-layout.md).

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
    // libsql's DiskANN delete leaves a copy of the deleted vector in the nodes that still link to it: rebuilt.
    if (done.embeddings > 0) attempt(`erase: rebuild the vector indexes of ${f.vecPath}`, () => rebuildVectorIndexes(f.vec, f.vectorTables));
    const files: [LibDb, string][] = f.vec === f.db ? [[f.db, f.dbPath]] : [[f.db, f.dbPath], [f.vec, f.vecPath]];
    let pagesZeroed = 0;
    let pagesUnplaced = 0;
    for (const [db, path] of files) {
      const s = attempt(`erase: zero the unused space of ${path}`, () => scrubPages(db, path));
      pagesZeroed += s.zeroed;
      pagesUnplaced += s.unplaced;
    }
    const walTruncated = files.map(([db]) => truncateWal(db)).every(Boolean);
    // Unknown is not "none left": the bytes are read back, and what is still there is counted in the receipt.
    const { left: bytesLeft, shared: bytesShared, needles } = readBack(f, files.map(([, path]) => path), sel, opts.deletedIds ?? [], needlesOf(sel, p));
    if (bytesLeft > 0 || pagesUnplaced > 0) opts.log?.warn({ store: store.name, bytesLeft, pagesUnplaced }, 'erase: the person\'s ids or texts are still in the store files, or pages could not be scrubbed (counted in the receipt)');
    return { ids, counts: { ...done, needles, bytesLeft, bytesShared, pagesZeroed, pagesUnplaced }, texts: p.texts, walTruncated };
  } finally {
    f.close();
  }
}

/**
 * Each vector table's libsql_vector_idx index dropped and made again from the rows that are left, in one transaction:
 * a DiskANN node keeps its neighbours' vectors, and libsql's delete takes the deleted vector out only of the nodes it
 * links to itself, so the others keep a copy of it in live rows (the index's shadow table). Made again, the index
 * holds the remaining vectors only; its old pages are freed, and the page scrub zeroes them.
 */
function rebuildVectorIndexes(db: LibDb, tables: readonly string[]): void {
  const indexes = (db.prepare(`SELECT name, sql FROM sqlite_schema WHERE type = 'index' AND tbl_name IN (SELECT value FROM json_each(?)) AND sql LIKE '%libsql_vector_idx%'`).all(JSON.stringify(tables)) as { name: string; sql: string }[]);
  if (indexes.length === 0) return;
  immediate(db, () => {
    for (const ix of indexes) {
      db.exec(`DROP INDEX ${quoteId(ix.name)}`);
      db.exec(ix.sql);
    }
  });
}

function subjectEmbeddings(f: MastraFiles, sel: EraseSelector): number {
  if (!('subject' in sel)) return 0;
  let n = 0;
  for (const t of f.vectorTables) n += f.vec.prepare(`DELETE FROM ${quoteId(t)} WHERE ${folded('metadata')}`).run({ subject: sel.subject }).changes;
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

/** SQLite's own messages name no file: what was being done and the file go in front. */
function attempt<T>(doing: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw storeError(`${doing}: ${(err as Error).message}`, err);
  }
}
