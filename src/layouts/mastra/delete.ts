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

/**
 * What Mastra's own deletes leave behind, by the check code that names it (check.ts): Memory.deleteThread deletes the
 * thread and its messages, then its observation record, then (in the background) its message and observation
 * embeddings; Memory.deleteMessages deletes the rows, then their embeddings. A process that ends between two steps
 * leaves the later ones' rows, each still holding the text.
 */
export const LEFTOVER_CODES = ['mastra_embedding_without_message', 'mastra_embedding_without_thread', 'mastra_observation_without_thread'] as const;
export type LeftoverCode = (typeof LEFTOVER_CODES)[number];

/** A leftover seen: what it is, its table, its id, and the message or thread it names (the one found gone). */
export interface Leftover { code: LeftoverCode; table: string; id: string; of: string }

export const leftoverCounts = (found: readonly Leftover[] = []): Record<LeftoverCode, number> => {
  const n = Object.fromEntries(LEFTOVER_CODES.map((c) => [c, 0])) as Record<LeftoverCode, number>;
  for (const l of found) n[l.code]++;
  return n;
};

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

/**
 * What deleteThread of each of `threads` and deleteMessages of `messages` would delete with them, changing nothing
 * (prune --dry-run): the embeddings deleteEmbeddings takes by thread_id and by message_id, each row once, and the
 * threads' observation records.
 */
export function plannedWith(f: MastraFiles, threads: readonly string[], messages: readonly string[]): { embeddings: number; observations: number } {
  let embeddings = 0;
  const params = { threads: JSON.stringify(threads), messages: JSON.stringify(messages) };
  for (const t of f.vectorTables) {
    embeddings += (f.vec.prepare(`SELECT count(*) AS n FROM ${quoteId(t)}
      WHERE ${metaField('thread_id')} IN (SELECT value FROM json_each(@threads)) OR ${metaQuotes('@threads')}
         OR ${metaField('message_id')} IN (SELECT value FROM json_each(@messages)) OR ${metaQuotes('@messages')}`).get(params) as { n: number }).n;
  }
  const observations = threads.length > 0 && hasTable(f, OBSERVATIONS)
    ? (f.db.prepare(`SELECT count(*) AS n FROM ${OBSERVATIONS} WHERE threadId IN (SELECT value FROM json_each(?))`).get(params.threads) as { n: number }).n : 0;
  return { embeddings, observations };
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
/** An embedding of an observation group: a thread id and no message id (check.ts reads them the same). */
export const OF_A_GROUP = `json_valid(metadata) AND ${ifJson('metadata', `json_type(metadata, '$.message_id')`)} IS NULL AND ${ifJson('metadata', `json_type(metadata, '$.thread_id')`)} = 'text'`;

/** Where each kind of leftover is, and what it names that is gone. */
const KINDS = {
  mastra_embedding_without_message: { where: OF_A_MESSAGE, key: 'message_id', parent: MESSAGES },
  mastra_embedding_without_thread: { where: OF_A_GROUP, key: 'thread_id', parent: THREADS },
} as const;

/**
 * What Mastra's own deletes left (LEFTOVER_CODES): observation records of a thread that is gone, and embeddings whose
 * message, or (an observation group's) thread, is gone. The messages and threads are looked up after the rows naming
 * them are read, so one committed before such a row was seen is found; one written after it (an Agent's turn upserts
 * its embeddings before it saves its messages) is what prune's grace is for (prune.ts, ORPHAN_GRACE_MS).
 */
export function leftovers(f: MastraFiles): Leftover[] {
  const out: Leftover[] = [];
  if (hasTable(f, OBSERVATIONS)) {
    const rows = f.db.prepare(`SELECT id, threadId AS of FROM ${OBSERVATIONS} WHERE threadId IS NOT NULL AND threadId <> ''`).all() as { id: string; of: string }[];
    const have = present(f, THREADS, rows.map((r) => r.of));
    for (const r of rows) if (!have.has(r.of)) out.push({ code: 'mastra_observation_without_thread', table: OBSERVATIONS, ...r });
  }
  for (const table of f.vectorTables) {
    for (const [code, k] of Object.entries(KINDS) as [keyof typeof KINDS, (typeof KINDS)[keyof typeof KINDS]][]) {
      const rows = f.vec.prepare(`SELECT vector_id AS id, ${metaField(k.key)} AS of FROM ${quoteId(table)} WHERE ${k.where}`).all() as { id: string; of: string }[];
      const have = present(f, k.parent, rows.map((r) => r.of));
      for (const r of rows) if (!have.has(r.of)) out.push({ code, table, ...r });
    }
  }
  return out;
}

function present(f: MastraFiles, table: string, ids: string[]): Set<string> {
  return new Set((f.db.prepare(`SELECT id FROM ${table} WHERE id IN (SELECT value FROM json_each(?))`).all(JSON.stringify([...new Set(ids)])) as { id: string }[]).map((r) => r.id));
}

/**
 * Those of `found` whose message or thread is still missing, deleted by id and what they name (a row rewritten
 * meanwhile for another stays): looked up again in the same statement when the rows are in the store's file, else
 * while the vector file is held against writes (BEGIN IMMEDIATE), the store's rows read inside that hold.
 */
export function deleteLeftovers(f: MastraFiles, found: Leftover[]): Record<LeftoverCode, number> {
  const n = leftoverCounts();
  for (const code of LEFTOVER_CODES) {
    for (const table of new Set(found.filter((l) => l.code === code).map((l) => l.table))) {
      const mine = found.filter((l) => l.code === code && l.table === table);
      if (code === 'mastra_observation_without_thread') {
        const del = f.db.prepare(`DELETE FROM ${OBSERVATIONS} WHERE id = ? AND threadId = ? AND NOT EXISTS (SELECT 1 FROM ${THREADS} WHERE id = ?)`);
        n[code] += immediate(f.db, () => mine.reduce((k, l) => k + del.run(l.id, l.of, l.of).changes, 0));
        continue;
      }
      const k = KINDS[code];
      const del = f.vec.prepare(`DELETE FROM ${quoteId(table)} WHERE vector_id = ? AND ${metaField(k.key)} = ?${f.vec === f.db ? ` AND NOT EXISTS (SELECT 1 FROM ${k.parent} WHERE id = ?)` : ''}`);
      n[code] += immediate(f.vec, () => {
        if (f.vec === f.db) return mine.reduce((c, l) => c + del.run(l.id, l.of, l.of).changes, 0);
        const have = present(f, k.parent, mine.map((l) => l.of));
        return mine.reduce((c, l) => c + (have.has(l.of) ? 0 : del.run(l.id, l.of).changes), 0);
      });
    }
  }
  return n;
}
