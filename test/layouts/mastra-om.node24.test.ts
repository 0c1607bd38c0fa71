import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import Libsql from 'libsql';
import { tempDir } from '../helpers/store.js';
import { mastraSdk, DIM, type MastraSdk } from '../helpers/mastra-sdk.js';
import { validateConfig, type Config } from '../../src/config/config.js';
import { openStore } from '../../src/layouts/open.js';
import { LAYOUTS } from '../../src/layouts/registry.js';
import { erase } from '../../src/erase/erase.js';
import { silentLogger } from '../../src/log/logger.js';

/**
 * Observational memory written by Mastra's own SDK (@mastra/memory's observer, driven by the AI SDK's mock model):
 * the observation records (mastra_observational_memory) and their vector index (memory_observations_<dim>) through
 * check, prune and erase --user, and Mastra reading its observations after each.
 */
const layout = LAYOUTS.mastra;
const DAY = 86_400_000;
const OBS_INDEX = `memory_observations_${DIM}`;
const bytesOf = (f: string) => [f, `${f}-wal`].filter(existsSync).map((p) => readFileSync(p).toString('latin1')).join('\n');

let tmp: ReturnType<typeof tempDir>;
let file: string;
let sdk: MastraSdk | undefined;
beforeEach(() => {
  tmp = tempDir('mw-mastra-om-');
  file = join(tmp.dir, 'mastra.db');
});
afterEach(async () => {
  vi.useRealTimers();
  await sdk?.close();
  sdk = undefined;
  tmp.cleanup();
});

const configFor = (retention: Record<string, number> = {}): Config => validateConfig({
  stateDb: join(tmp.dir, 'state.db'), snapshot: { root: join(tmp.dir, 'backups') },
  stores: { s: { layout: 'mastra', db: file, mastra: { retention } } },
});
const ctx = (config: Config, now = Date.now()) => ({ config, log: silentLogger, now: () => now, signal: new AbortController().signal });
const open = () => mastraSdk(file, 'resource', { observe: true });

function rows(sql: string, ...args: unknown[]): Record<string, unknown>[] {
  const db = new Libsql(file, { readonly: true } as never);
  try {
    return db.prepare(sql).all(...args) as Record<string, unknown>[];
  } finally {
    db.close();
  }
}

/** Ana (an observation holding a planted secret) and Ben (a recent thread and one idle for 40 days), all observed. */
async function observed(s: MastraSdk) {
  vi.useFakeTimers({ toFake: ['Date'] });
  vi.setSystemTime(Date.now() - 40 * DAY);
  const benOld = await s.thread('ben', ['Ben Okafor asked about sailing boats']);
  expect(await s.observe('ben', benOld.threadId, '- Ben Okafor asked about sailing (OLDSAIL-5150)')).toBe(true);
  vi.useRealTimers();
  const ana = await s.thread('ana', ['Ana Quintero has a peanut allergy', 'Ana Quintero banks at Nordea']);
  expect(await s.observe('ana', ana.threadId, '- Ana Quintero: secret code ZEPHYR-9931, allergic to peanuts')).toBe(true);
  const ben = await s.thread('ben', ['Ben Okafor reads poetry', 'Ben Okafor plays chess']);
  expect(await s.observe('ben', ben.threadId, '- Ben Okafor enjoys poetry and chess (QUILL-2207)')).toBe(true);
  return { ana, ben, benOld };
}

describe('observational memory Mastra wrote', () => {
  it('check counts messages, not observations, and finds nothing wrong; Mastra indexes each observation group', async () => {
    sdk = await open();
    const { ana, ben, benOld } = await observed(sdk);
    await sdk.close();
    sdk = undefined;
    // What Mastra wrote: one record per observed thread, one embedding per observation group, with the text.
    expect(rows('SELECT resourceId, threadId FROM mastra_observational_memory ORDER BY resourceId, createdAt')).toEqual([
      { resourceId: 'ana', threadId: ana.threadId }, { resourceId: 'ben', threadId: benOld.threadId }, { resourceId: 'ben', threadId: ben.threadId }]);
    expect(rows(`SELECT json_extract(metadata, '$.thread_id') AS t FROM ${OBS_INDEX}`).map((r) => r.t).sort()).toEqual([ana.threadId, ben.threadId, benOld.threadId].sort());
    expect(bytesOf(file)).toContain('ZEPHYR-9931');
    const config = configFor({ threadIdleDays: 30 });
    const s = openStore(config, 's');
    try {
      const report = await layout.check(s, { ctx: ctx(config) });
      expect(report.problems).toEqual([]);
      expect(report.rows).toBe(5);
      // The idle thread's one message is what the next prune takes (its observations go with it, not counted here).
      expect(report.gap).toBe(1);
    } finally {
      s.close();
    }
  });

  it('prune takes an idle thread with its observations and their embeddings, and keeps every other observation', async () => {
    sdk = await open();
    const { ana, ben, benOld } = await observed(sdk);
    await sdk.close();
    sdk = undefined;
    const config = configFor({ threadIdleDays: 30, messageDays: 30 });
    const s = openStore(config, 's');
    try {
      const done = await layout.prune(s, { ctx: ctx(config), dryRun: false });
      expect(done.ids).toEqual([benOld.threadId]);
      expect((await layout.check(s, { ctx: ctx(config) })).problems).toEqual([]);
    } finally {
      s.close();
    }
    expect(rows('SELECT threadId FROM mastra_observational_memory').map((r) => r.threadId).sort()).toEqual([ana.threadId, ben.threadId].sort());
    expect(rows(`SELECT 1 FROM ${OBS_INDEX} WHERE json_extract(metadata, '$.thread_id') = ?`, benOld.threadId)).toEqual([]);
    sdk = await open();
    expect(await sdk.observations('ben', ben.threadId)).toContain('QUILL-2207');
    expect(await sdk.observations('ana', ana.threadId)).toContain('ZEPHYR-9931');
    // Mastra's own observation search no longer finds the pruned thread's group, and still finds the kept one.
    const found = (await sdk.memory.searchMessages({ query: 'Ben Okafor sailing poetry chess', resourceId: 'ben', topK: 5 })).results;
    expect(found.map((r: { threadId: string }) => r.threadId)).toEqual([ben.threadId]);
  });

  it('Memory.deleteThread cut short after its first step (thread and messages gone; its observation record and embeddings left): check names them, prune takes them, and nothing else', async () => {
    sdk = await open();
    const { ana, ben } = await observed(sdk);
    // The first step of Memory.deleteThread (deleteStoredThread): the store's deleteThread; the process ends there.
    await (await sdk.storage.getStore('memory')).deleteThread({ threadId: ana.threadId });
    await sdk.close();
    sdk = undefined;
    const config = configFor();
    const s = openStore(config, 's');
    const left = { mastra_observation_without_thread: 1, mastra_embedding_without_thread: 1, mastra_embedding_without_message: 2 };
    try {
      const codes = (r: { problems: { code: string; count?: number }[] }) => Object.fromEntries(r.problems.map((p) => [p.code, p.count]));
      expect(codes(await layout.check(s, { ctx: ctx(config) }))).toEqual(left);
      expect((await layout.prune(s, { ctx: ctx(config), dryRun: true })).leftovers).toEqual(left);
      expect((await layout.prune(s, { ctx: ctx(config), dryRun: false })).leftovers).toEqual(left);
      expect((await layout.check(s, { ctx: ctx(config) })).problems).toEqual([]);
      expect((await layout.prune(s, { ctx: ctx(config), dryRun: false })).leftovers).toEqual({ mastra_observation_without_thread: 0, mastra_embedding_without_thread: 0, mastra_embedding_without_message: 0 });
    } finally {
      s.close();
    }
    expect(rows('SELECT threadId FROM mastra_observational_memory').map((r) => r.threadId)).not.toContain(ana.threadId);
    expect(rows(`SELECT 1 FROM ${OBS_INDEX} WHERE json_extract(metadata, '$.thread_id') = ?`, ana.threadId)).toEqual([]);
    sdk = await open();
    expect(await sdk.observations('ben', ben.threadId)).toContain('QUILL-2207');
  });

  it('erase --user takes the person\'s observations and their embeddings, byte-verified; the other\'s stay; Mastra observes after', async () => {
    sdk = await open();
    const { ana, ben } = await observed(sdk);
    await sdk.close();
    sdk = undefined;
    const receipt = await erase(configFor(), 's', { user: 'ana' }, { now: () => Date.now(), log: silentLogger });
    expect(receipt.walTruncated).toBe(true);
    expect(receipt.counts).toMatchObject({ threads: 1, observations: 1, bytesLeft: 0 });
    expect(receipt.counts.embeddings).toBe(3); // two messages, one observation group
    for (const secret of ['ZEPHYR-9931', 'Ana Quintero']) expect(bytesOf(file)).not.toContain(secret);
    expect(bytesOf(file)).toContain('QUILL-2207');
    expect(rows(`SELECT count(*) AS n FROM ${OBS_INDEX} WHERE json_extract(metadata, '$.resource_id') = 'ana'`)).toEqual([{ n: 0 }]);
    const s = openStore(configFor(), 's');
    try {
      expect((await layout.check(s, { ctx: ctx(configFor()) })).problems).toEqual([]);
    } finally {
      s.close();
    }
    sdk = await open();
    expect(await sdk.observations('ana', ana.threadId)).toBeUndefined();
    expect((await sdk.memory.searchMessages({ query: 'peanuts secret code', resourceId: 'ana', topK: 5 })).results).toEqual([]);
    expect(await sdk.observations('ben', ben.threadId)).toContain('QUILL-2207');
    expect((await sdk.memory.searchMessages({ query: 'poetry chess', resourceId: 'ben', topK: 5 })).results.map((r: { threadId: string }) => r.threadId)).toContain(ben.threadId);
    // Mastra observes again, for Ben and for a new thread of Ana's.
    await sdk.agentTurn('ben', ben.threadId, 'Ben Okafor likes tea', 'Noted');
    const again = await sdk.thread('ana', ['Ana Quintero starts anew']);
    expect(await sdk.observe('ana', again.threadId, '- Ana Quintero started a new conversation')).toBe(true);
    expect(await sdk.observations('ana', again.threadId)).toContain('started a new conversation');
  });

  it('erase --subject takes the observations that mention the text, and their embeddings', async () => {
    sdk = await open();
    const { ben } = await observed(sdk);
    await sdk.close();
    sdk = undefined;
    const receipt = await erase(configFor(), 's', { subject: 'ZEPHYR-9931' }, { now: () => Date.now(), log: silentLogger });
    expect(receipt.counts.bytesLeft).toBe(0);
    expect(bytesOf(file)).not.toContain('ZEPHYR-9931');
    expect(bytesOf(file)).toContain('QUILL-2207');
    sdk = await open();
    expect(await sdk.observations('ben', ben.threadId)).toContain('QUILL-2207');
  });
});
