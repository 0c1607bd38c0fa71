import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { cliAsync as cli } from '../helpers/cli.js';
import { DIM } from '../helpers/mastra-embed.js';
import type { MastraSdk } from '../helpers/mastra-sdk.js';
import { bytesFound, pgRows, splitStore, VEC_TABLE, type SplitStore } from '../helpers/mastra-pg.js';

// Mastra's SDK on two servers, one of them PGlite (one backend for every client): each step waits on the other
// files' work on a loaded machine; a budget per test and hook, not a figure.
vi.setConfig({ testTimeout: 300_000, hookTimeout: 300_000 });

/**
 * Observational memory written by Mastra's own observer (@mastra/memory, its model the AI SDK's mock) on @mastra/pg,
 * split form (PostgresStore on the native PostgreSQL 15, PgVector on PGlite): the records in
 * mastra_observational_memory and their embeddings in memory_observations_<dim> through check, digest, prune and
 * erase (--user, --subject) through the CLI, Mastra reading its observations and observing again after each.
 * One store for the file, the steps in order.
 */
const DAY = 86_400_000;
const OBS_INDEX = `memory_observations_${DIM}`;

let s: SplitStore;
let t: { ana: string; ben: string; benOld: string; cara: string };

const withSdk = <T>(fn: (m: MastraSdk) => Promise<T>): Promise<T> => s.withSdk(fn, { observe: true });
/** The threads PgVector holds observation groups of (an agent turn after the first observation adds another group). */
const observedThreads = async () => (await pgRows(s.vectorUrl, `SELECT DISTINCT metadata->>'thread_id' AS t FROM ${OBS_INDEX}`)).map((r) => r.t).sort();
const records = async () => (await pgRows(s.storeUrl, `SELECT "resourceId" AS r, "threadId" AS t FROM mastra_observational_memory ORDER BY 1, 2`));

async function clean() {
  const r = await cli(['check', ...s.store, '--json'], s.env);
  expect(r.json().problems, r.stderr).toEqual([]);
  return r.json();
}

/** Ben still has his observations, Mastra's observation search finds them, an agent turn is observed. */
async function mastraStillObserves() {
  await withSdk(async (m) => {
    expect(await m.observations('ben', t.ben)).toContain('QUILL-2207');
    const found = (await m.memory.searchMessages({ query: 'Ben Okafor poetry chess', resourceId: 'ben', topK: 5 })).results;
    expect(found.map((r: { threadId: string }) => r.threadId)).toContain(t.ben);
    await m.agentTurn('ben', t.ben, 'Ben Okafor likes tea', 'Noted');
  });
  await clean();
}

beforeAll(async () => {
  s = await splitStore('om', { threadIdleDays: 30 });
  await withSdk(async (m) => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(Date.now() - 40 * DAY);
    const benOld = await m.thread('ben', ['Ben Okafor asked about sailing boats']);
    expect(await m.observe('ben', benOld.threadId, '- Ben Okafor asked about sailing (OLDSAIL-5150)')).toBe(true);
    vi.useRealTimers();
    const ana = await m.thread('ana', ['Ana Quintero has a peanut allergy', 'Ana Quintero banks at Nordea']);
    expect(await m.observe('ana', ana.threadId, '- Ana Quintero: secret code ZEPHYR-9931, allergic to peanuts')).toBe(true);
    const ben = await m.thread('ben', ['Ben Okafor reads poetry', 'Ben Okafor plays chess']);
    expect(await m.observe('ben', ben.threadId, '- Ben Okafor enjoys poetry and chess (QUILL-2207)')).toBe(true);
    const cara = await m.thread('cara', ['Cara Lindqvist keeps bees']);
    expect(await m.observe('cara', cara.threadId, '- Cara Lindqvist keeps bees, hive MAGPIE-4410')).toBe(true);
    t = { ana: ana.threadId, ben: ben.threadId, benOld: benOld.threadId, cara: cara.threadId };
  }).finally(() => vi.useRealTimers());
  await s.init();
}, 300_000);

afterAll(async () => {
  await s?.stop();
});

describe('observational memory Mastra\'s observer wrote on @mastra/pg (split form)', () => {
  it('what Mastra wrote: one record per observed thread, one embedding per observation group on the other server; check finds nothing wrong', async () => {
    expect(await records()).toEqual([{ r: 'ana', t: t.ana }, ...[{ r: 'ben', t: t.ben }, { r: 'ben', t: t.benOld }].sort((a, b) => (a.t < b.t ? -1 : 1)), { r: 'cara', t: t.cara }]);
    expect(await observedThreads()).toEqual([t.ana, t.ben, t.benOld, t.cara].sort());
    const report = await clean();
    expect(report).toMatchObject({ rows: 6, gap: 1 }); // messages, not observations; the idle thread's one message pending
  });

  it('digest lists the observation records of the period', async () => {
    const digest = await cli(['digest', '--preview', '--config', s.config], s.env);
    expect(digest.code, digest.stderr).toBe(0);
    expect(digest.stdout).toContain('QUILL-2207');
  });

  it('prune takes the idle thread with its observation record and its embedding, and keeps every other', async () => {
    const r = await cli(['run', 'prune', ...s.store, '--json'], s.env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json().ids).toEqual([t.benOld]);
    expect((await records()).map((x) => x.t)).not.toContain(t.benOld);
    expect(await observedThreads()).toEqual([t.ana, t.ben, t.cara].sort());
    await withSdk(async (m) => {
      const found = (await m.memory.searchMessages({ query: 'Ben Okafor sailing poetry chess', resourceId: 'ben', topK: 5 })).results;
      expect(found.map((x: { threadId: string }) => x.threadId)).toEqual([t.ben]);
      expect(await m.observations('ana', t.ana)).toContain('ZEPHYR-9931');
    });
    await mastraStillObserves();
  });

  it('erase --user takes her observations and their embeddings, no byte of them on either server; the others stay', async () => {
    const r = await cli(['erase', '--user', 'ana', ...s.store, '--json'], s.env);
    expect(r.code, r.stderr + r.stdout).toBe(0);
    const receipt = r.json();
    expect(receipt.bytes.verdict).toBe('clean');
    expect(receipt.counts).toMatchObject({ threads: 1, observations: 1, bytesLeft: 0 });
    expect(receipt.counts.embeddings).toBe(3); // two messages, one observation group
    expect((await records()).map((x) => x.r)).toEqual(['ben', 'cara']);
    expect(await observedThreads()).toEqual([t.ben, t.cara].sort());
    const needles = ['ZEPHYR-9931', 'Ana Quintero', t.ana];
    expect(await bytesFound(s.storeUrl, ['mastra_observational_memory', 'mastra_messages', 'mastra_threads', 'mastra_resources'], needles)).toEqual([]);
    expect(await bytesFound(s.vectorUrl, [OBS_INDEX, VEC_TABLE], needles)).toEqual([]);
    await withSdk(async (m) => {
      expect(await m.observations('ana', t.ana)).toBeUndefined();
      expect((await m.memory.searchMessages({ query: 'peanuts secret code', resourceId: 'ana', topK: 5 })).results).toEqual([]);
      const again = await m.thread('ana', ['Ana Quintero starts anew']);
      expect(await m.observe('ana', again.threadId, '- Ana Quintero started a new conversation')).toBe(true);
      expect(await m.observations('ana', again.threadId)).toContain('started a new conversation');
    });
    await mastraStillObserves();
  });

  it('erase --subject takes the observation records that mention it and their embeddings', async () => {
    const r = await cli(['erase', '--subject', 'MAGPIE-4410', ...s.store, '--json'], s.env);
    expect(r.code, r.stderr + r.stdout).toBe(0);
    expect(r.json().bytes.verdict).toBe('clean');
    expect((await records()).map((x) => x.r)).not.toContain('cara');
    expect(await observedThreads()).not.toContain(t.cara);
    expect(await bytesFound(s.storeUrl, ['mastra_observational_memory'], ['MAGPIE-4410'])).toEqual([]);
    expect(await bytesFound(s.vectorUrl, [OBS_INDEX], ['MAGPIE-4410'])).toEqual([]);
    await withSdk(async (m) => {
      expect(await m.observations('cara', t.cara)).toBeUndefined();
      expect(await m.observe('cara', t.cara, '- Cara Lindqvist sells honey')).toBe(true);
      expect(await m.observations('cara', t.cara)).toContain('sells honey');
    });
    await mastraStillObserves();
  });

  it('Memory.deleteThread cut short after its first step (thread and messages gone; its observation record and embeddings left): check names them, prune takes them, and nothing else', async () => {
    const dora = await withSdk(async (m) => {
      const d = await m.thread('dora', ['Dora Lind rows on the fjord', 'Dora Lind keeps a logbook']);
      expect(await m.observe('dora', d.threadId, '- Dora Lind rows daily, boat SKUA-3120')).toBe(true);
      // The first step of Memory.deleteThread (deleteStoredThread): the store's deleteThread; the process ends there.
      await (await m.storage.getStore('memory')).deleteThread({ threadId: d.threadId });
      return d.threadId;
    });
    const codes = (r: any) => Object.fromEntries(r.problems.map((p: any) => [p.code, p.count]));
    const check = await cli(['check', ...s.store, '--json'], s.env);
    expect(codes(check.json())).toEqual({ mastra_observation_without_thread: 1, mastra_embedding_without_thread: 1, mastra_embedding_without_message: 2 });
    const dry = await cli(['run', 'prune', ...s.store, '--json', '--dry-run'], s.env);
    expect(dry.json().leftovers).toEqual({ mastra_observation_without_thread: 1, mastra_embedding_without_thread: 1, mastra_embedding_without_message: 2 });
    const r = await cli(['run', 'prune', ...s.store, '--json'], s.env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json().leftovers).toEqual({ mastra_observation_without_thread: 1, mastra_embedding_without_thread: 1, mastra_embedding_without_message: 2 });
    expect((await records()).map((x) => x.t)).not.toContain(dora);
    expect(await observedThreads()).not.toContain(dora);
    expect(await pgRows(s.vectorUrl, `SELECT 1 FROM ${VEC_TABLE} WHERE metadata->>'thread_id' = $1`, [dora])).toEqual([]);
    expect((await cli(['run', 'prune', ...s.store, '--json'], s.env)).json().leftovers).toEqual({ mastra_observation_without_thread: 0, mastra_embedding_without_thread: 0, mastra_embedding_without_message: 0 });
    await mastraStillObserves();
  });
});
