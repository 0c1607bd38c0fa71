import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { copyFileSync, existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import Libsql from 'libsql';
import { tempDir } from '../helpers/store.js';
import { embed, mastraSdk, type MastraSdk } from '../helpers/mastra-sdk.js';
import { validateConfig, type Config } from '../../src/config/config.js';
import { openStore } from '../../src/layouts/open.js';
import { LAYOUTS } from '../../src/layouts/registry.js';
import { erase } from '../../src/erase/erase.js';
import { silentLogger } from '../../src/log/logger.js';

/**
 * memory-warden's prune and erase against Mastra's own calls (storage.prune's retention, Memory.deleteMessages,
 * Memory.deleteThread) on two copies of one store Mastra's SDK wrote, vectors in the same file and in another:
 * the same rows gone where Mastra's call is right, and none of what Mastra's call leaves behind in ours.
 */
const layout = LAYOUTS.mastra;
const DAY = 86_400_000;
const bytesOf = (f: string) => [f, `${f}-wal`].filter(existsSync).map((p) => readFileSync(p).toString('latin1')).join('\n');

type Where = 'same file' | 'vector file';

describe.each<Where>(['same file', 'vector file'])('prune and erase compared with Mastra\'s own calls (%s)', (where) => {
  let tmp: ReturnType<typeof tempDir>;
  let open: MastraSdk[] = [];
  beforeEach(() => {
    tmp = tempDir('mw-mastra-cmp-');
  });
  afterEach(async () => {
    vi.useRealTimers();
    for (const s of open) await s.close();
    open = [];
    tmp.cleanup();
  });

  /** A copy of the store: its file and vector file, each with its WAL. */
  const paths = (name: string) => ({ db: join(tmp.dir, `${name}.db`), vec: where === 'vector file' ? join(tmp.dir, `${name}-vectors.db`) : join(tmp.dir, `${name}.db`) });
  const sdkOn = async (name: string) => {
    const p = paths(name);
    const s = await mastraSdk(p.db, 'resource', { observe: true, vectorFile: p.vec });
    open.push(s);
    return s;
  };
  const closeAll = async () => {
    for (const s of open) await s.close();
    open = [];
  };
  const copyStore = (from: string, to: string) => {
    const [a, b] = [paths(from), paths(to)];
    for (const [x, y] of [[a.db, b.db], [a.vec, b.vec]] as const) for (const suffix of ['', '-wal']) if (existsSync(x + suffix)) copyFileSync(x + suffix, y + suffix);
  };
  const configFor = (name: string, retention: Record<string, number> = {}): Config => {
    const p = paths(name);
    return validateConfig({
      stateDb: join(tmp.dir, `${name}-state.db`), snapshot: { root: join(tmp.dir, `${name}-backups`) },
      stores: { s: { layout: 'mastra', db: p.db, mastra: { retention, ...(p.vec !== p.db ? { vectorDb: p.vec } : {}) } } },
    });
  };
  const ctx = (config: Config) => ({ config, log: silentLogger, now: () => Date.now(), signal: new AbortController().signal });
  const ids = (name: string, table: string) => {
    const db = new Libsql(paths(name).db, { readonly: true } as never);
    try {
      return (db.prepare(`SELECT id FROM ${table} ORDER BY id`).all() as { id: string }[]).map((r) => r.id);
    } finally {
      db.close();
    }
  };
  const embeddedMessages = (name: string) => {
    const db = new Libsql(paths(name).vec, { readonly: true } as never);
    try {
      return (db.prepare(`SELECT json_extract(metadata, '$.message_id') AS id FROM memory_messages_16 ORDER BY 1`).all() as { id: string }[]).map((r) => r.id);
    } finally {
      db.close();
    }
  };
  const updatedAt = (name: string, thread: string) => {
    const db = new Libsql(paths(name).db, { readonly: true } as never);
    try {
      return (db.prepare('SELECT updatedAt FROM mastra_threads WHERE id = ?').get(thread) as { updatedAt: string }).updatedAt;
    } finally {
      db.close();
    }
  };
  const problems = async (name: string) => {
    const config = configFor(name);
    const s = openStore(config, 's');
    try {
      return (await layout.check(s, { ctx: ctx(config) })).problems.map((p) => p.code).sort();
    } finally {
      s.close();
    }
  };
  const ourPrune = async (name: string, retention: Record<string, number>) => {
    const config = configFor(name, retention);
    const s = openStore(config, 's');
    try {
      return await layout.prune(s, { ctx: ctx(config), dryRun: false });
    } finally {
      s.close();
    }
  };
  /** Mastra's own retention: LibSQLStore's `retention` and storage.prune(). */
  const theirPrune = async (name: string, memory: Record<string, { maxAge: string }>) => {
    const { LibSQLStore } = await import('@mastra/libsql');
    const storage = new LibSQLStore({ id: 'pruner', url: `file:${paths(name).db}`, retention: { memory } } as never) as any;
    await storage.init();
    const results = await storage.prune();
    await storage.close?.();
    return results;
  };

  /**
   * Ana: an old thread (40 days, observed), a thread started 40 days ago she still writes to, working memory written
   * then and rewritten today. Ben: a recent thread of five messages.
   */
  async function world() {
    const s = await sdkOn('ours');
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(Date.now() - 40 * DAY);
    const old = await s.thread('ana', ['Ana Quintero banks at Nordea', 'Ana Quintero has a peanut allergy']);
    await s.observe('ana', old.threadId, '- Ana Quintero banks at Nordea (NORDEA-7781)');
    const revived = await s.thread('ana', ['Ana Quintero asked about Oslo']);
    await s.workingMemory('ana', revived.threadId, '# Ana\n- lives in Bergen');
    vi.useRealTimers();
    await s.agentTurn('ana', revived.threadId, 'Ana Quintero moved to Oslo', 'Noted');
    await s.workingMemory('ana', revived.threadId, '# Ana\n- lives in Oslo');
    const ben = await s.thread('ben', ['Ben Okafor one', 'Ben Okafor two', 'Ben Okafor three', 'Ben Okafor four', 'Ben Okafor five']);
    await closeAll();
    copyStore('ours', 'theirs');
    return { old, revived, ben };
  }

  it('messages past an age: the same messages go; Mastra\'s prune leaves their embeddings, with their text, in the index, and ours then removes those only', async () => {
    const { old, revived } = await world();
    await ourPrune('ours', { messageDays: 30 });
    await theirPrune('theirs', { messages: { maxAge: '30d' } });
    expect(ids('ours', 'mastra_messages')).toEqual(ids('theirs', 'mastra_messages'));
    expect(ids('ours', 'mastra_messages')).not.toContain(old.messageIds[0]);
    expect(ids('ours', 'mastra_threads')).toEqual(ids('theirs', 'mastra_threads'));
    // Theirs: the pruned messages' embeddings stay, with their text, and a query of the index returns it (recall
    // itself shows only messages whose row it finds).
    expect(embeddedMessages('theirs')).toContain(old.messageIds[0]);
    expect(await problems('theirs')).toContain('mastra_embedding_without_message');
    expect(embeddedMessages('ours')).not.toContain(old.messageIds[0]);
    expect(await problems('ours')).toEqual([]);
    const [o, t] = [await sdkOn('ours'), await sdkOn('theirs')];
    const query = async (s: MastraSdk) => JSON.stringify(await s.vector.query({ indexName: 'memory_messages_16', queryVector: embed('Ana Quintero banks at Nordea'), topK: 20 }));
    expect(await query(t)).toContain('Ana Quintero banks at Nordea');
    expect(await query(o)).not.toContain('Ana Quintero banks at Nordea');
    expect((await o.recall('ana', revived.threadId, 'Nordea bank')).join('\n')).not.toContain('banks at Nordea');
    // What the observer noted stays in both: it is what replaces old messages.
    expect(await o.observations('ana', old.threadId)).toContain('NORDEA-7781');
    await closeAll();

    // Then our prune on theirs, with no retention at all: the embeddings Mastra's prune left, and only they, go
    // (a dry run counts them first and changes nothing): the index as our own prune left it.
    const left = embeddedMessages('theirs').filter((id) => !ids('theirs', 'mastra_messages').includes(id));
    expect(left.length).toBeGreaterThan(0);
    const config = configFor('theirs');
    const st = openStore(config, 's');
    try {
      expect((await layout.prune(st, { ctx: ctx(config), dryRun: true })).leftovers).toEqual({ mastra_embedding_without_message: left.length, mastra_embedding_without_thread: 0, mastra_observation_without_thread: 0 });
      expect(embeddedMessages('theirs')).toEqual(expect.arrayContaining(left));
      const swept = await layout.prune(st, { ctx: ctx(config), dryRun: false });
      expect(swept.deleted).toBe(0);
      expect(swept.leftovers).toEqual({ mastra_embedding_without_message: left.length, mastra_embedding_without_thread: 0, mastra_observation_without_thread: 0 });
    } finally {
      st.close();
    }
    expect(embeddedMessages('theirs')).toEqual(embeddedMessages('ours'));
    expect(await problems('theirs')).toEqual([]);
    const t2 = await sdkOn('theirs');
    expect(await query(t2)).not.toContain('Ana Quintero banks at Nordea');
    await t2.agentTurn('ana', revived.threadId, 'Ana Quintero flies to Tromso', 'Noted');
    expect((await t2.recall('ana', revived.threadId, 'Ana Quintero flies to Tromso')).join('\n')).toContain('flies to Tromso');
    expect(await problems('theirs')).toEqual([]);
  });

  it('threads: the idle thread goes in both; Mastra\'s prune (by creation) also drops a thread in use, leaving its messages and observations', async () => {
    const { old, revived } = await world();
    await ourPrune('ours', { threadIdleDays: 30 });
    await theirPrune('theirs', { threads: { maxAge: '30d' } });
    for (const name of ['ours', 'theirs']) expect(ids(name, 'mastra_threads')).not.toContain(old.threadId);
    expect(ids('theirs', 'mastra_threads')).not.toContain(revived.threadId);
    expect(ids('ours', 'mastra_threads')).toContain(revived.threadId);
    expect(await problems('theirs')).toEqual(expect.arrayContaining(['mastra_message_without_thread', 'mastra_observation_without_thread', 'mastra_embedding_without_thread']));
    expect(await problems('ours')).toEqual([]);
    // Ours: the idle thread's messages, observations and every embedding went with it.
    expect(ids('ours', 'mastra_messages').filter((id) => old.messageIds.includes(id))).toEqual([]);
    expect(ids('ours', 'mastra_observational_memory').length).toBe(ids('theirs', 'mastra_observational_memory').length - 1);
    expect(embeddedMessages('ours')).not.toContain(old.messageIds[0]);
    const o = await sdkOn('ours');
    expect((await o.memory.listThreads({ filter: { resourceId: 'ana' } })).threads.map((x: { id: string }) => x.id)).toContain(revived.threadId);
    expect((await o.memory.searchMessages({ query: 'Nordea', resourceId: 'ana', topK: 5 })).results.map((r: { threadId: string }) => r.threadId)).not.toContain(old.threadId);
  });

  it('resources: Mastra\'s prune (by creation) drops a working memory still in use; ours never prunes one', async () => {
    await world();
    await ourPrune('ours', { threadIdleDays: 30, messageDays: 30, maxMessagesPerThread: 2 });
    await theirPrune('theirs', { resources: { maxAge: '30d' } });
    const [o, t] = [await sdkOn('ours'), await sdkOn('theirs')];
    expect(await t.resourceWorkingMemory('ana')).toBeNull();
    expect(await o.resourceWorkingMemory('ana')).toContain('lives in Oslo');
  });

  it('at most N messages a thread: Memory.deleteMessages of the oldest takes the same rows and embeddings, but marks the thread active', async () => {
    const { ben } = await world();
    const before = updatedAt('ours', ben.threadId);
    await ourPrune('ours', { maxMessagesPerThread: 2 });
    const t = await sdkOn('theirs');
    // Mastra's counterpart: delete each thread's oldest messages beyond two.
    const { messages } = await t.memory.recall({ threadId: ben.threadId, resourceId: 'ben', perPage: false });
    await t.memory.deleteMessages(messages.slice(0, -2).map((m: { id: string }) => m.id));
    await closeAll();
    expect(ids('ours', 'mastra_messages').filter((id) => ben.messageIds.includes(id))).toEqual(ben.messageIds.slice(-2).sort());
    expect(ids('theirs', 'mastra_messages').filter((id) => ben.messageIds.includes(id))).toEqual(ben.messageIds.slice(-2).sort());
    expect(embeddedMessages('ours').filter((id) => ben.messageIds.includes(id))).toEqual(embeddedMessages('theirs').filter((id) => ben.messageIds.includes(id)));
    // Mastra stamps the thread's updatedAt: an idle-thread rule would see it as just used. Ours leaves it.
    expect(updatedAt('ours', ben.threadId)).toBe(before);
    expect(updatedAt('theirs', ben.threadId) > before).toBe(true);
  });

  it('erase --user against Memory.deleteThread of each thread: the same threads and messages go; Mastra keeps her working memory and her bytes', async () => {
    const { ben } = await world();
    const receipt = await erase(configFor('ours'), 's', { user: 'ana' }, { now: () => Date.now(), log: silentLogger });
    expect(receipt.counts.bytesLeft).toBe(0);
    const t = await sdkOn('theirs');
    for (const x of (await t.memory.listThreads({ filter: { resourceId: 'ana' } })).threads) await t.memory.deleteThread(x.id);
    await closeAll();
    expect(ids('ours', 'mastra_threads')).toEqual(ids('theirs', 'mastra_threads'));
    expect(ids('ours', 'mastra_messages')).toEqual(ids('theirs', 'mastra_messages'));
    expect(ids('ours', 'mastra_observational_memory')).toEqual(ids('theirs', 'mastra_observational_memory'));
    expect(embeddedMessages('ours')).toEqual(embeddedMessages('theirs'));
    expect(await problems('theirs')).toEqual([]);
    // Theirs: her working memory stays (there is no resource delete), and her text stays in the files' bytes.
    expect(ids('theirs', 'mastra_resources')).toContain('ana');
    expect(ids('ours', 'mastra_resources')).not.toContain('ana');
    const p = { ours: paths('ours'), theirs: paths('theirs') };
    expect(bytesOf(p.theirs.db) + bytesOf(p.theirs.vec)).toContain('Ana Quintero');
    for (const f of new Set([p.ours.db, p.ours.vec])) {
      expect(bytesOf(f)).not.toContain('Ana Quintero');
      expect(bytesOf(f)).not.toContain('NORDEA-7781');
    }
    expect(bytesOf(p.ours.vec)).toContain('Ben Okafor five');
    const o = await sdkOn('ours');
    expect(await o.recall('ben', ben.threadId, 'Ben Okafor five')).toContain('Ben Okafor five');
    expect(await o.resourceWorkingMemory('ana')).toBeNull();
  });
});
