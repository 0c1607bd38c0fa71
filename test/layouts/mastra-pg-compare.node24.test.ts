import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { embed } from '../helpers/mastra-embed.js';
import { cliAsync as cli } from '../helpers/cli.js';
import { bytesFound, mastraPgStore, messageText, pgRows, VEC_TABLE, type MastraPgForm, type MastraPgStore } from '../helpers/mastra-pg.js';

// Mastra's SDK on PGlite (one backend for every client), in the split form beside the native server: each step waits
// on the other files' work on a loaded machine; a budget per test and hook, not a figure.
vi.setConfig({ testTimeout: 300_000, hookTimeout: 300_000 });

/**
 * memory-warden's prune and erase against Mastra's own calls on @mastra/pg, on two stores built the same way by
 * Mastra's Agent and Memory, in both forms (one PGlite: PostgresStore and PgVector on one PGlite server; split:
 * PostgresStore on the native PostgreSQL 15, PgVector on PGlite): PostgresStore's retention (`storage.prune()` with
 * `retention.memory.messages | threads | resources`) and `Memory.deleteMessages`. One pair of stores for each form:
 * each step runs on what the step before left, in ours and in theirs. What Mastra leaves differs by form where
 * PostgresStore can reach PgVector's table; what ours leaves is asserted the same in both.
 */
const DAY = 86_400_000;

/** The pair of stores of the form running (the forms run one after the other). */
let ours: MastraPgStore;
let theirs: MastraPgStore;
const idsOf: Record<'ours' | 'theirs', { old: string; revived: string; ben: string }> = {} as never;

/** Messages, threads, working memories and embeddings by text and resource (ids differ between the two builds). */
async function contents(s: MastraPgStore) {
  const texts = (await pgRows(s.storeUrl, `SELECT content FROM mastra_messages`)).map((r) => messageText(r.content)).sort();
  const threads = (await pgRows(s.storeUrl, `SELECT "resourceId" AS r FROM mastra_threads ORDER BY 1`)).map((r) => r.r);
  const memories = (await pgRows(s.storeUrl, `SELECT id, "workingMemory" FROM mastra_resources WHERE "workingMemory" IS NOT NULL ORDER BY id`)).map((r) => `${r.id}:${r.workingMemory}`);
  const vectors = (await pgRows(s.vectorUrl, `SELECT metadata->>'content' AS t FROM ${VEC_TABLE}`)).map((r) => r.t).sort();
  return { texts, threads, memories, vectors };
}

async function problems(s: MastraPgStore): Promise<string[]> {
  const r = await cli(['check', ...s.store, '--json'], s.env);
  expect([0, 1], r.stderr).toContain(r.code);
  return r.json().problems.map((p: { code: string }) => p.code).sort();
}

async function ourPrune(retention: Record<string, number>) {
  ours.retention(retention);
  const r = await cli(['run', 'prune', ...ours.store, '--json'], ours.env);
  expect(r.code, r.stderr).toBe(0);
  return r.json();
}

/** Mastra's own retention: a PostgresStore on their database, `storage.prune()` with this `retention.memory`. */
async function theirPrune(memory: Record<string, { maxAge: string }>) {
  const { PostgresStore } = await import('@mastra/pg');
  const storage = new PostgresStore({ id: 'pruner', connectionString: theirs.storeUrl, retention: { memory } } as never) as any;
  await storage.init();
  try {
    const results = await storage.prune();
    expect(results.every((r: { done: boolean }) => r.done)).toBe(true);
    return results;
  } finally {
    await storage.close();
  }
}

/**
 * Ana: a thread of 40 days ago (idle), a thread started 40 days ago she still writes to (an agent turn today), her
 * working memory written then and rewritten today. Ben: a recent thread of five messages, his working memory.
 */
async function build(s: MastraPgStore) {
  return s.withSdk(async (m) => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(Date.now() - 40 * DAY);
    const old = await m.thread('ana', ['Ana Quintero banks at Nordea', 'Ana Quintero has a peanut allergy']);
    const revived = await m.thread('ana', ['Ana Quintero asked about Oslo']);
    await m.workingMemory('ana', revived.threadId, '# Ana\n- lives in Bergen');
    vi.useRealTimers();
    await m.agentTurn('ana', revived.threadId, 'Ana Quintero moved to Oslo', 'Noted');
    await m.workingMemory('ana', revived.threadId, '# Ana\n- lives in Oslo');
    const ben = await m.thread('ben', ['Ben Okafor one', 'Ben Okafor two', 'Ben Okafor three', 'Ben Okafor four', 'Ben Okafor five']);
    await m.workingMemory('ben', ben.threadId, '# Ben\n- counts to five');
    return { old: old.threadId, revived: revived.threadId, ben: ben.threadId };
  }).finally(() => vi.useRealTimers());
}

describe.each<MastraPgForm>(['one PGlite', 'split'])('prune and erase against Mastra\'s own calls on @mastra/pg (%s)', (form) => {
  beforeAll(async () => {
    ours = await mastraPgStore(form, 'ours');
    theirs = await mastraPgStore(form, 'theirs');
    idsOf.ours = await build(ours);
    idsOf.theirs = await build(theirs);
    for (const s of [ours, theirs]) await s.init();
    expect(await contents(theirs)).toEqual(await contents(ours));
  }, 300_000);

  afterAll(async () => {
    vi.useRealTimers();
    await ours?.stop();
    await theirs?.stop();
  });

  it(`messages past an age: the same messages go; ${form === 'split' ? 'storage.prune leaves their embeddings, with their text, in PgVector\'s table on the other server' : 'storage.prune sweeps their embeddings from PgVector\'s table in its own schema'}`, async () => {
    await ourPrune({ messageDays: 30 });
    await theirPrune({ messages: { maxAge: '30d' } });
    const [a, b] = [await contents(ours), await contents(theirs)];
    expect(a.texts).toEqual(b.texts);
    expect(a.texts).not.toContain('Ana Quintero banks at Nordea');
    expect(a.texts).toContain('Ana Quintero moved to Oslo');
    expect(a.threads).toEqual(b.threads);
    // Ours, the same in both forms: the three messages of 40 days ago and their embeddings, wherever PgVector is.
    expect(a).toEqual({
      texts: ['Ana Quintero moved to Oslo', 'Ben Okafor five', 'Ben Okafor four', 'Ben Okafor one', 'Ben Okafor three', 'Ben Okafor two', 'Noted'],
      threads: ['ana', 'ana', 'ben'],
      memories: ['ana:# Ana\n- lives in Oslo', 'ben:# Ben\n- counts to five'],
      vectors: a.texts,
    });
    expect(await problems(ours)).toEqual([]);
    // With a `messages` policy, storage.prune then sweeps (pruneOrphanedVectorRows) the `memory_messages*` tables its
    // pg_tables lists in its own schema, of rows whose `metadata->>'message_id'` names no row of mastra_messages.
    const q = await theirs.withSdk(async (m) => JSON.stringify(await m.vector.query({ indexName: VEC_TABLE, queryVector: embed('Ana Quintero banks at Nordea'), topK: 20 })));
    if (form === 'split') {
      // PostgresStore's database holds no such table: PgVector on another server keeps the pruned texts.
      expect(b.vectors).toEqual([...b.texts, 'Ana Quintero asked about Oslo', 'Ana Quintero banks at Nordea', 'Ana Quintero has a peanut allergy'].sort());
      expect(await problems(theirs)).toContain('mastra_embedding_without_message');
      // Mastra's recall skips them (no row), but a query of the index returns the text.
      expect(q).toContain('Ana Quintero banks at Nordea');
    } else {
      // PgVector's table is in PostgresStore's schema: the sweep takes the pruned messages' embeddings, as ours does.
      expect(b.vectors).toEqual(a.vectors);
      expect(await problems(theirs)).toEqual([]);
      expect(q).not.toContain('Ana Quintero banks at Nordea');
    }
  });

  it('threads: the idle thread goes in both; storage.prune (by creation) also drops the thread in use, leaving its messages', async () => {
    const pruned = await ourPrune({ threadIdleDays: 30 });
    expect(pruned.ids).toEqual([idsOf.ours.old]);
    await theirPrune({ threads: { maxAge: '30d' } });
    const [a, b] = [await contents(ours), await contents(theirs)];
    expect(a.threads).toEqual(['ana', 'ben']);
    expect(b.threads).toEqual(['ben']);
    // Theirs: the thread Ana still writes to is gone, its messages stay without it.
    expect(await pgRows(theirs.storeUrl, `SELECT 1 FROM mastra_threads WHERE id = $1`, [idsOf.theirs.revived])).toEqual([]);
    expect(b.texts).toContain('Ana Quintero moved to Oslo');
    expect(await problems(theirs)).toEqual(expect.arrayContaining(['mastra_message_without_thread']));
    // A `threads` policy deletes no message and runs no sweep: in one PGlite that is all check finds in theirs (split:
    // also the embeddings the first step left).
    if (form === 'one PGlite') expect(await problems(theirs)).toEqual(['mastra_message_without_thread']);
    expect(await problems(ours)).toEqual([]);
    expect(a.vectors).toEqual(a.texts);
    await ours.withSdk(async (m) => {
      expect((await m.memory.listThreads({ filter: { resourceId: 'ana' } })).threads.map((t: { id: string }) => t.id)).toEqual([idsOf.ours.revived]);
      expect(await m.recall('ana', idsOf.ours.revived, 'moved to Oslo')).toContain('Ana Quintero moved to Oslo');
    });
  });

  it('resources: storage.prune (by creation) drops a working memory still in use; ours never prunes one', async () => {
    await ourPrune({ threadIdleDays: 30, messageDays: 30 });
    await theirPrune({ resources: { maxAge: '30d' } });
    const [a, b] = [await contents(ours), await contents(theirs)];
    expect(a.memories).toEqual(['ana:# Ana\n- lives in Oslo', 'ben:# Ben\n- counts to five']);
    expect(b.memories).toEqual(['ben:# Ben\n- counts to five']);
  });

  it('at most N messages a thread: Memory.deleteMessages of the oldest takes the same rows and embeddings, but stamps the thread as used', async () => {
    const updatedAt = async (s: MastraPgStore, id: string) => (await pgRows(s.storeUrl, `SELECT "updatedAtZ" AS t FROM mastra_threads WHERE id = $1`, [id]))[0].t.getTime();
    const before = { ours: await updatedAt(ours, idsOf.ours.ben), theirs: await updatedAt(theirs, idsOf.theirs.ben) };
    await ourPrune({ maxMessagesPerThread: 2 });
    // Closing the SDK waits for the vectors' deletion Mastra started in the background.
    await theirs.withSdk(async (m) => {
      const { messages } = await m.memory.recall({ threadId: idsOf.theirs.ben, resourceId: 'ben', perPage: false });
      await m.memory.deleteMessages(messages.slice(0, -2).map((x: { id: string }) => x.id));
    });
    const [a, b] = [await contents(ours), await contents(theirs)];
    const bens = (t: string[]) => t.filter((x) => x.startsWith('Ben Okafor'));
    expect(bens(a.texts)).toEqual(['Ben Okafor five', 'Ben Okafor four']);
    expect(bens(b.texts)).toEqual(bens(a.texts));
    expect(bens(b.vectors)).toEqual(bens(a.vectors));
    expect(a.vectors).toEqual(a.texts);
    expect(await updatedAt(ours, idsOf.ours.ben)).toBe(before.ours);
    expect(await updatedAt(theirs, idsOf.theirs.ben)).toBeGreaterThan(before.theirs);
  });

  it('erase --ids of a message against Memory.deleteMessages: the same row and embedding go; ours leaves no byte of it on either server', async () => {
    const idOf = async (s: MastraPgStore, text: string) => (await pgRows(s.storeUrl, `SELECT id, content FROM mastra_messages`)).find((r) => messageText(r.content) === text).id;
    const [mine, theirsId] = [await idOf(ours, 'Ben Okafor four'), await idOf(theirs, 'Ben Okafor four')];
    const erase = await cli(['erase', '--ids', mine, ...ours.store, '--json'], ours.env);
    expect(erase.code, erase.stderr + erase.stdout).toBe(0);
    expect(erase.json().bytes.verdict).toBe('clean');
    await theirs.withSdk((m) => m.memory.deleteMessages([theirsId]));
    const [a, b] = [await contents(ours), await contents(theirs)];
    expect(a.texts).toEqual(b.texts);
    expect(a.texts).not.toContain('Ben Okafor four');
    expect(b.texts).not.toContain('Ben Okafor four');
    expect(a.vectors).not.toContain('Ben Okafor four');
    expect(b.vectors).not.toContain('Ben Okafor four');
    expect(a.texts).toEqual(['Ana Quintero moved to Oslo', 'Ben Okafor five', 'Noted']);
    expect(a.vectors).toEqual(a.texts);
    expect(await bytesFound(ours.storeUrl, ['mastra_messages', 'mastra_threads'], ['Ben Okafor four', mine])).toEqual([]);
    expect(await bytesFound(ours.vectorUrl, [VEC_TABLE], ['Ben Okafor four', mine])).toEqual([]);
    await ours.withSdk(async (m) => {
      expect(await m.recall('ben', idsOf.ours.ben, 'Ben Okafor five')).toContain('Ben Okafor five');
      await m.agentTurn('ben', idsOf.ours.ben, 'Ben Okafor counts on', 'Noted');
    });
    expect(await problems(ours)).toEqual([]);
  });

  it(`${form === 'split' ? 'what storage.prune left on PgVector\'s server, embeddings whose message is gone: our prune on their store takes those and no other' : 'storage.prune left no embedding without its message: our prune on their store finds none and changes nothing'}; Mastra reads, recalls and writes after`, async () => {
    const before = await contents(theirs);
    const left = before.vectors.filter((t) => !before.texts.includes(t));
    // Split: the embeddings of the messages storage.prune took (Memory.deleteMessages took its own); one PGlite: its
    // sweep took those, and nothing since deleted a message without its embedding.
    expect(left).toEqual(form === 'split' ? ['Ana Quintero asked about Oslo', 'Ana Quintero banks at Nordea', 'Ana Quintero has a peanut allergy'] : []);
    theirs.retention({});
    const dry = await cli(['run', 'prune', '--dry-run', ...theirs.store, '--json'], theirs.env);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.json().leftovers).toEqual({ mastra_embedding_without_message: left.length, mastra_embedding_without_thread: 0, mastra_observation_without_thread: 0 });
    expect(await contents(theirs)).toEqual(before);
    const r = await cli(['run', 'prune', ...theirs.store, '--json'], theirs.env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json().deleted).toBe(0);
    expect(r.json().leftovers).toEqual({ mastra_embedding_without_message: left.length, mastra_embedding_without_thread: 0, mastra_observation_without_thread: 0 });
    const after = await contents(theirs);
    expect(after.texts).toEqual(before.texts);
    expect(after.vectors).toEqual(after.texts);
    expect(after).toEqual({ ...before, vectors: before.vectors.filter((t) => !left.includes(t)) });
    expect(await problems(theirs)).not.toContain('mastra_embedding_without_message');
    await theirs.withSdk(async (m) => {
      expect(JSON.stringify(await m.vector.query({ indexName: VEC_TABLE, queryVector: embed('Ana Quintero banks at Nordea'), topK: 20 }))).not.toContain('banks at Nordea');
      expect(await m.recall('ben', idsOf.theirs.ben, 'Ben Okafor five')).toContain('Ben Okafor five');
      await m.agentTurn('ben', idsOf.theirs.ben, 'Ben Okafor counts again', 'Noted');
      expect(await m.recall('ben', idsOf.theirs.ben, 'Ben Okafor counts again')).toContain('Ben Okafor counts again');
    });
    expect((await cli(['run', 'prune', ...theirs.store, '--json'], theirs.env)).json().leftovers).toEqual({ mastra_embedding_without_message: 0, mastra_embedding_without_thread: 0, mastra_observation_without_thread: 0 });
  });
});
