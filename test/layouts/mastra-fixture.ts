import Libsql from 'libsql';
import { randomUUID } from 'node:crypto';
import { embed, DIM } from '../helpers/mastra-embed.js';

/**
 * A Mastra memory store written the way `@mastra/libsql` 1.23 writes it (the DDL and statements of its
 * LibSQLStore and LibSQLVector, docs/mastra-layout.md), through libsql's driver, for the tests that run on any Node:
 * the layout contract suite. test/helpers/mastra-sdk.ts builds stores with Mastra's own SDK (Node 22.13+).
 */
const DDL = [
  `CREATE TABLE mastra_threads ("id" TEXT NOT NULL PRIMARY KEY, "resourceId" TEXT NOT NULL, "title" TEXT NOT NULL, "metadata" TEXT, "createdAt" TEXT NOT NULL, "updatedAt" TEXT NOT NULL)`,
  `CREATE TABLE mastra_messages ("id" TEXT NOT NULL PRIMARY KEY, "thread_id" TEXT NOT NULL, "content" TEXT NOT NULL, "role" TEXT NOT NULL, "type" TEXT NOT NULL, "createdAt" TEXT NOT NULL, "resourceId" TEXT)`,
  `CREATE TABLE mastra_resources ("id" TEXT NOT NULL PRIMARY KEY, "workingMemory" TEXT, "metadata" TEXT, "createdAt" TEXT NOT NULL, "updatedAt" TEXT NOT NULL)`,
  `CREATE TABLE memory_messages_${DIM} (id SERIAL PRIMARY KEY, vector_id TEXT UNIQUE NOT NULL, embedding F32_BLOB(${DIM}), metadata TEXT DEFAULT '{}')`,
  `CREATE INDEX memory_messages_${DIM}_vector_idx ON memory_messages_${DIM} (libsql_vector_idx(embedding))`,
];

export class MastraFixture {
  readonly db: InstanceType<typeof Libsql>;
  constructor(readonly path: string) {
    this.db = new Libsql(path);
  }

  static create(path: string): MastraFixture {
    const fx = new MastraFixture(path);
    fx.db.pragma('journal_mode = WAL');
    for (const sql of DDL) fx.db.exec(sql);
    return fx;
  }

  /** A thread of `resource` whose thread-scoped working memory is `text`, with one message of it, embedded. */
  thread(resource: string, text: string, at: number, updatedAt = at, workingMemory = true): string {
    const id = randomUUID();
    const iso = (t: number) => new Date(t).toISOString();
    this.db.transaction(() => {
      this.db.prepare('INSERT INTO mastra_threads (id, resourceId, title, metadata, createdAt, updatedAt) VALUES (?, ?, ?, jsonb(?), ?, ?)')
        .run(id, resource, `thread of ${resource}`, JSON.stringify(workingMemory ? { workingMemory: text } : {}), iso(at), iso(updatedAt));
      this.message(id, resource, text, at);
    })();
    return id;
  }

  /** A conversation without working memory: one message, which message retention ends. */
  conversation(resource: string, text: string, at: number): string {
    const thread = this.thread(resource, text, at, at, false);
    return (this.db.prepare('SELECT id FROM mastra_messages WHERE thread_id = ?').get(thread) as { id: string }).id;
  }

  /** One user message in a thread, with its embedding (Memory.saveMessages with semantic recall on). */
  message(threadId: string, resource: string, text: string, at: number): string {
    const id = randomUUID();
    const iso = new Date(at).toISOString();
    this.db.prepare(`INSERT INTO mastra_messages (id, thread_id, content, role, type, createdAt, resourceId) VALUES (?, ?, ?, 'user', 'v2', ?, ?)`)
      .run(id, threadId, JSON.stringify({ format: 2, parts: [{ type: 'text', text }] }), iso, resource);
    const metadata = { message_id: id, thread_id: threadId, resource_id: resource, role: 'user', content: text, created_at: iso };
    this.db.prepare(`INSERT INTO memory_messages_${DIM} (vector_id, embedding, metadata) VALUES (?, vector32(?), ?)`)
      .run(randomUUID(), JSON.stringify(embed(text)), JSON.stringify(metadata));
    return id;
  }

  /**
   * An observational-memory record (Mastra's observer's notes) of a thread, or of the resource when `threadId` is
   * null: the columns the layout reads of `mastra_observational_memory`, the table made on first use.
   */
  observation(resource: string, threadId: string | null, text: string, at: number): string {
    this.db.exec(`CREATE TABLE IF NOT EXISTS mastra_observational_memory ("id" TEXT NOT NULL PRIMARY KEY, "lookupKey" TEXT NOT NULL, "scope" TEXT NOT NULL, "resourceId" TEXT, "threadId" TEXT, "activeObservations" TEXT NOT NULL, "config" TEXT NOT NULL, "createdAt" TEXT NOT NULL, "updatedAt" TEXT NOT NULL)`);
    const id = randomUUID();
    const iso = new Date(at).toISOString();
    this.db.prepare(`INSERT INTO mastra_observational_memory VALUES (?, ?, ?, ?, ?, ?, '{}', ?, ?)`)
      .run(id, threadId ? `thread:${threadId}` : `resource:${resource}`, threadId ? 'thread' : 'resource', resource, threadId, text, iso, iso);
    return id;
  }

  /** The resource's working memory (Mastra's default scope), written or rewritten as its updateWorkingMemory tool does. */
  resourceMemory(resource: string, text: string, at: number): void {
    const iso = new Date(at).toISOString();
    this.db.prepare(`INSERT INTO mastra_resources (id, workingMemory, metadata, createdAt, updatedAt) VALUES (?, ?, '{}', ?, ?)
      ON CONFLICT (id) DO UPDATE SET workingMemory = excluded.workingMemory, updatedAt = excluded.updatedAt`).run(resource, text, iso, iso);
  }

  /** An agent's write to a thread: Mastra sets the thread's updatedAt with each message it saves. */
  touch(threadId: string, at: number): void {
    this.db.prepare('UPDATE mastra_threads SET updatedAt = ? WHERE id = ?').run(new Date(at).toISOString(), threadId);
  }

  count(sql: string): number {
    return Number((this.db.prepare(sql).get() as { n: number }).n);
  }

  close(): void {
    this.db.close();
  }
}
