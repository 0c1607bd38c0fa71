import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Libsql from 'libsql';
import { tempDir } from '../helpers/store.js';
import { CLI, cliAsync } from '../helpers/cli.js';
import { DIM, mastraSdk, type MastraSdk } from '../helpers/mastra-sdk.js';
import { pgRows } from '../helpers/mastra-pg.js';
import { createTestDatabase, startPgvectorServer, type PgvectorServer, type TestDatabase } from '../helpers/pg.js';

vi.setConfig({ testTimeout: 300_000, hookTimeout: 300_000 });

/**
 * An Agent's turn writes in the other order from Memory.saveMessages: its SemanticRecall output processor upserts the
 * embeddings, then its MessageHistory processor saves the messages. prune's pass over the embeddings Mastra's own
 * deletes left (their message gone) runs into that gap on a store agents write to. Here the gap is held open: the
 * agent's save waits until prune has seen the embedding without its message, then lands. The embedding stays, the
 * message with it; an embedding whose message really is gone, seen in the same pass, goes. On every form a Mastra
 * store takes: libsql with the vectors in the store's file or in another, @mastra/pg with PgVector in the store's
 * database or on another server.
 */
type Form = 'libsql, same file' | 'libsql, vector file' | 'pg, one database' | 'pg, split';
const VEC_TABLE = `memory_messages_${DIM}`;

interface World {
  config: string;
  env: Record<string, string>;
  sdk: () => Promise<MastraSdk>;
  /** A statement on the store's database, or on the vectors' (libsql: the files; pg: the servers). */
  store(sql: string, params?: unknown[]): Promise<any[]>;
  vectors(sql: string, params?: unknown[]): Promise<any[]>;
}

describe.each<Form>(['libsql, same file', 'libsql, vector file', 'pg, one database', 'pg, split'])('prune beside an Agent\'s turn (%s)', (form) => {
  let tmp: ReturnType<typeof tempDir>;
  const servers: PgvectorServer[] = [];
  const dbs: TestDatabase[] = [];
  beforeEach(() => {
    tmp = tempDir('mw-mastra-order-');
  });
  afterEach(async () => {
    for (const s of servers.splice(0)) await s.stop();
    for (const d of dbs.splice(0)) await d.drop();
    tmp.cleanup();
  });

  function libsqlQuery(file: string, sql: string, params: unknown[] = []): any[] {
    const db = new Libsql(file);
    try {
      const st = db.prepare(sql);
      return /^\s*select/i.test(sql) ? (st.all(...params) as any[]) : (st.run(...params), []);
    } finally {
      db.close();
    }
  }

  async function world(): Promise<World> {
    const config = join(tmp.dir, 'memory-warden.json');
    const state = { stateDb: join(tmp.dir, 'state.db'), snapshot: { root: join(tmp.dir, 'backups') } };
    if (form.startsWith('libsql')) {
      const db = join(tmp.dir, 'mastra.db');
      const vec = form === 'libsql, vector file' ? join(tmp.dir, 'vectors.db') : db;
      writeFileSync(config, JSON.stringify({ ...state, stores: { s: { layout: 'mastra', db, mastra: { retention: {}, ...(vec !== db ? { vectorDb: vec } : {}) } } } }));
      return {
        config, env: {},
        sdk: () => mastraSdk(db, 'resource', { vectorFile: vec }),
        store: async (sql, params) => libsqlQuery(db, sql, params),
        vectors: async (sql, params) => libsqlQuery(vec, sql, params),
      };
    }
    const vec = await startPgvectorServer();
    servers.push(vec);
    let storeUrl = vec.url;
    if (form === 'pg, split') {
      const d = await createTestDatabase('mw_mastra_order');
      dbs.push(d);
      storeUrl = d.url;
    }
    writeFileSync(config, JSON.stringify({ ...state, stores: { s: { engine: 'postgres', layout: 'mastra', postgres: { url: '${MW_MASTRA_PG}', schema: 'public' },
      mastra: { retention: {}, ...(form === 'pg, split' ? { pgvector: { url: '${MW_MASTRA_VEC}' } } : {}) } } } }));
    return {
      config, env: { MW_MASTRA_PG: storeUrl, MW_MASTRA_VEC: vec.url },
      sdk: () => mastraSdk('', 'resource', { pg: { storeUrl, vectorUrl: vec.url, vectorPool: { connectionTimeoutMillis: 120_000 } } }),
      store: (sql, params) => pgRows(storeUrl, sql, params),
      vectors: (sql, params) => pgRows(vec.url, sql, params),
    };
  }

  /** The CLI, its stderr read as it comes: `onLine` sees each line of the log. */
  function prune(w: World, onLine: (line: string) => void): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const child = spawn(process.execPath, [CLI, 'run', 'prune', '--json', '--config', w.config, '--store', 's'],
      { env: { ...process.env, ...w.env, LOG_LEVEL: 'info' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => {
      const lines = (stderr + c).split('\n').slice(stderr.split('\n').length - 1, -1);
      stderr += c;
      for (const l of lines) onLine(l);
    });
    return new Promise((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
  }

  const embedded = async (w: World, text: string) =>
    (await w.vectors(form.startsWith('libsql')
      ? `SELECT json_extract(metadata, '$.message_id') AS id FROM ${VEC_TABLE} WHERE json_extract(metadata, '$.content') = ?`
      : `SELECT metadata->>'message_id' AS id FROM ${VEC_TABLE} WHERE metadata->>'content' = $1`, [text])).map((r) => r.id as string);

  it('an embedding upserted before its message is saved stays, with the message; one whose message is gone goes', async () => {
    const w = await world();
    const m = await w.sdk();
    try {
      const { threadId, messageIds } = await m.thread('zoe', ['Zoe Park keeps a sketchbook', 'Zoe Park once lived in Lyon']);
      // The true leftover: a message deleted without its embedding (as Mastra's own delete leaves it when its process ends first).
      await w.store(form.startsWith('libsql') ? `DELETE FROM mastra_messages WHERE id = ?` : `DELETE FROM mastra_messages WHERE id = $1`, [messageIds[1]]);
      const init = await cliAsync(['init', '--config', w.config, '--store', 's'], w.env);
      expect(init.code, init.stderr).toBe(0);

      // The agent's save of its messages held until prune has seen the embedding without its message.
      const text = 'Zoe Park plans a trip to Kyoto';
      const memoryStore = await m.storage.getStore('memory');
      const save = memoryStore.saveMessages.bind(memoryStore);
      let release!: () => void;
      const released = new Promise<void>((r) => (release = r));
      let held = 0;
      memoryStore.saveMessages = async (args: { messages: { content: unknown }[] }) => {
        if (JSON.stringify(args.messages).includes(text)) {
          held++;
          await released;
        }
        return save(args);
      };
      const turn = m.agentTurn('zoe', threadId, text, 'Noted');
      for (const until = Date.now() + 120_000; held === 0 && Date.now() < until;) await new Promise((r) => setTimeout(r, 20));
      expect(held, 'the agent saved its messages without passing the hold').toBeGreaterThan(0);
      const [mine] = await embedded(w, text);
      expect(mine, 'the agent upserted no embedding before its save').toBeDefined();
      expect(await embedded(w, 'Zoe Park once lived in Lyon')).toEqual([messageIds[1]]);

      let seen = false;
      const run = prune(w, (line) => {
        if (line.includes('looked at again after the grace')) {
          seen = true;
          release();
        }
      });
      const done = await run;
      release();
      await turn;
      memoryStore.saveMessages = save;
      expect(done.code, done.stderr).toBe(0);
      expect(seen, 'prune saw no embedding without its message').toBe(true);
      expect(JSON.parse(done.stdout).leftovers).toEqual({ mastra_embedding_without_message: 1, mastra_embedding_without_thread: 0, mastra_observation_without_thread: 0 });
      expect(await embedded(w, text)).toEqual([mine]);
      expect((await w.store(form.startsWith('libsql') ? `SELECT id FROM mastra_messages WHERE id = ?` : `SELECT id FROM mastra_messages WHERE id = $1`, [mine])).length).toBe(1);
      expect(await embedded(w, 'Zoe Park once lived in Lyon')).toEqual([]);
      expect(await m.recall('zoe', threadId, text)).toContain(text);
    } finally {
      await m.close();
    }
  });
});
