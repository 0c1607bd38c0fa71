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
  thread(resource: string, text: string, at: number, updatedAt = at): string {
    const id = randomUUID();
    const iso = (t: number) => new Date(t).toISOString();
    this.db.transaction(() => {
      this.db.prepare('INSERT INTO mastra_threads (id, resourceId, title, metadata, createdAt, updatedAt) VALUES (?, ?, ?, jsonb(?), ?, ?)')
        .run(id, resource, `thread of ${resource}`, JSON.stringify({ workingMemory: text }), iso(at), iso(updatedAt));
      const message = randomUUID();
      this.db.prepare(`INSERT INTO mastra_messages (id, thread_id, content, role, type, createdAt, resourceId) VALUES (?, ?, ?, 'user', 'v2', ?, ?)`)
        .run(message, id, JSON.stringify({ format: 2, parts: [{ type: 'text', text }] }), iso(at), resource);
      const metadata = { message_id: message, thread_id: id, resource_id: resource, role: 'user', content: text, created_at: iso(at) };
      this.db.prepare(`INSERT INTO memory_messages_${DIM} (vector_id, embedding, metadata) VALUES (?, vector32(?), ?)`)
        .run(randomUUID(), JSON.stringify(embed(text)), JSON.stringify(metadata));
    })();
    return id;
  }

  close(): void {
    this.db.close();
  }
}
