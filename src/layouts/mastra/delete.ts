import { immediate, quoteId, type MastraFiles } from './files.js';
import { ifJson, MESSAGES, metaField, metaQuotes, OBSERVATIONS, THREADS } from './names.js';

// The deletes prune and erase share, in the order Mastra's own deleteMessages/deleteThread intend and finish:
// embeddings first, then the rows (docs/mastra-layout.md). With the vectors in the store's file both go in one
// transaction; in another file the embeddings' transaction commits first, so a crash leaves a message without its
// embedding (recall misses it) and never an embedding, with the message's full text, without its message.

export interface Deleted {
  messages: number;
  embeddings: number;
  threads: number;
  observations: number;
}

export const noneDeleted = (): Deleted => ({ messages: 0, embeddings: 0, threads: 0, observations: 0 });

/** An embedding seen without its message: its table, its id, the message it names. */
export interface OrphanEmbedding { table: string; id: string; message: string }

/**
 * Embeddings whose metadata names one of `values` under `key` (message_id, thread_id, resource_id), or, when another
 * writer left metadata that is not JSON, quotes one of them.
 */
export function deleteEmbeddings(f: MastraFiles, key: 'message_id' | 'thread_id' | 'resource_id', values: readonly string[]): number {
  if (values.length === 0) return 0;
  let n = 0;
  for (const t of f.vectorTables) {
    // Through libsql's driver: the table's libsql_vector_idx index drops each row's node from its shadow table too.
    n += f.vec.prepare(`DELETE FROM ${quoteId(t)} WHERE ${metaField(key)} IN (SELECT value FROM json_each(@values)) OR ${metaQuotes('@values')}`).run({ values: JSON.stringify(values) }).changes;
  }
  return n;
}

/** In the store's transaction, and the vector file's first when that is another file. */
export function together<T>(f: MastraFiles, vectors: () => number, rows: () => T): { embeddings: number; result: T } {
  if (f.vec === f.db) return immediate(f.db, () => ({ embeddings: vectors(), result: rows() }));
  const embeddings = immediate(f.vec, vectors);
  return { embeddings, result: immediate(f.db, rows) };
}

/** Messages by id with their embeddings; the message's thread and resource stay. */
export function deleteMessages(f: MastraFiles, ids: readonly string[]): Deleted {
  const { embeddings, result } = together(f, () => deleteEmbeddings(f, 'message_id', ids),
    () => f.db.prepare(`DELETE FROM ${MESSAGES} WHERE id IN (SELECT value FROM json_each(?))`).run(JSON.stringify(ids)).changes);
  return { ...noneDeleted(), messages: result, embeddings };
}

/**
 * A thread whole: its embeddings, messages, thread-scoped observations and the row (with its thread-scoped working
 * memory). `stillDoomed` is asked inside the store's transaction (an agent may have written to the thread since it
 * was chosen); false: nothing of the thread's rows goes.
 */
export function deleteThread(f: MastraFiles, id: string, stillDoomed: () => boolean = () => true): Deleted {
  // Asked before the embeddings go (in the same transaction when they are in the store's file), and again before
  // the rows: a thread an agent has written to since keeps its embeddings too.
  const vectors = () => (stillDoomed() ? deleteEmbeddings(f, 'thread_id', [id]) : 0);
  const { embeddings, result } = together(f, vectors, () => {
    if (!stillDoomed()) return null;
    const messages = f.db.prepare(`DELETE FROM ${MESSAGES} WHERE thread_id = ?`).run(id).changes;
    const observations = hasTable(f, OBSERVATIONS) ? f.db.prepare(`DELETE FROM ${OBSERVATIONS} WHERE threadId = ?`).run(id).changes : 0;
    const threads = f.db.prepare(`DELETE FROM ${THREADS} WHERE id = ?`).run(id).changes;
    return { messages, observations, threads };
  });
  return result ? { ...result, embeddings } : { ...noneDeleted(), embeddings };
}

export function hasTable(f: Pick<MastraFiles, 'db'>, name: string): boolean {
  return f.db.prepare(`SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?`).get(name) !== undefined;
}

/** An embedding of a message: its metadata names a message id (observation embeddings name a thread only). */
const OF_A_MESSAGE = `${ifJson('metadata', `json_type(metadata, '$.message_id')`)} = 'text'`;

/**
 * Embeddings whose message is gone: what Mastra's own deletes leave (deleteMessages and deleteThread drop the
 * vectors in the background, after the rows; a process that ends first keeps them), each holding the message's text.
 * The messages are looked up after the embeddings are read, so a message committed before its embedding was seen is
 * found; one written after (an Agent's turn upserts the embedding first) is what prune's grace is for (prune.ts,
 * ORPHAN_GRACE_MS).
 */
export function orphanEmbeddings(f: MastraFiles): OrphanEmbedding[] {
  const out: OrphanEmbedding[] = [];
  for (const table of f.vectorTables) {
    const seen = f.vec.prepare(`SELECT vector_id AS id, ${metaField('message_id')} AS message FROM ${quoteId(table)} WHERE ${OF_A_MESSAGE}`).all() as { id: string; message: string }[];
    const have = messagesPresent(f, seen.map((s) => s.message));
    for (const s of seen) if (!have.has(s.message)) out.push({ table, id: s.id, message: s.message });
  }
  return out;
}

function messagesPresent(f: MastraFiles, ids: string[]): Set<string> {
  return new Set((f.db.prepare(`SELECT id FROM ${MESSAGES} WHERE id IN (SELECT value FROM json_each(?))`).all(JSON.stringify([...new Set(ids)])) as { id: string }[]).map((r) => r.id));
}

/**
 * Those of `found` whose message is still missing, deleted by id and message (an embedding rewritten meanwhile for
 * another message stays): the messages looked up again in the same statement when the vectors are in the store's
 * file, else while the vector file is held against writes (BEGIN IMMEDIATE).
 */
export function deleteOrphanEmbeddings(f: MastraFiles, found: OrphanEmbedding[]): number {
  let n = 0;
  for (const table of new Set(found.map((o) => o.table))) {
    const mine = found.filter((o) => o.table === table);
    const del = f.vec.prepare(`DELETE FROM ${quoteId(table)} WHERE vector_id = ? AND ${metaField('message_id')} = ?${f.vec === f.db ? ` AND NOT EXISTS (SELECT 1 FROM ${MESSAGES} WHERE id = ?)` : ''}`);
    n += immediate(f.vec, () => {
      if (f.vec === f.db) return mine.reduce((k, o) => k + del.run(o.id, o.message, o.message).changes, 0);
      const have = messagesPresent(f, mine.map((o) => o.message));
      return mine.reduce((k, o) => k + (have.has(o.message) ? 0 : del.run(o.id, o.message).changes), 0);
    });
  }
  return n;
}
