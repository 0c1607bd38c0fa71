import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { bytesFinder, textFinder } from '../../src/text/needles.js';
import { payloadStrings, erase } from '../../src/erase/erase.js';
import { loadConfig } from '../../src/config/config.js';
import { silentLogger } from '../../src/log/logger.js';
import { makeStore, ids, tempDir } from '../helpers/store.js';
import { addChain } from '../helpers/chains.js';
import { writeSnapshotFolder } from '../helpers/snapshot-folder.js';

function rng(seed: number) {
  return () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
}

describe('searching for many erased texts at once', () => {
  it('finds exactly what a search for each needle in turn finds, with few needles and with thousands', () => {
    const rand = rng(7);
    const word = (n: number) => Array.from({ length: n }, () => 'abcd'[Math.floor(rand() * 4)]).join('');
    for (const count of [3, 5000]) {
      // Short needles over a 4-letter alphabet: heads collide, matches overlap, some sit at the very end.
      const needles = Array.from({ length: count }, () => word(2 + Math.floor(rand() * 10)));
      const find = textFinder(needles);
      const findBytes = bytesFinder(needles.map((n) => Buffer.from(n)));
      let hits = 0;
      for (let i = 0; i < 400; i++) {
        const hay = word(Math.floor(rand() * 40));
        const expected = needles.some((n) => n.length >= 4 && hay.includes(n));
        hits += expected ? 1 : 0;
        expect(find(hay), hay).toBe(expected);
        expect(findBytes(Buffer.from(hay)), hay).toBe(expected);
      }
      expect(hits).toBeGreaterThan(0);
      expect(hits).toBeLessThan(400);
    }
  });

  it('finds long needles that share their beginning, at the start, middle and end of the text, and nothing else', () => {
    const rand = rng(11);
    const word = (n: number) => Array.from({ length: n }, () => 'abcd'[Math.floor(rand() * 4)]).join('');
    const shared = 'User prefers the one ';
    // 3,000 needles of 29–80 units, all beginning alike, so a key of their first four (or eight) units tells them apart
    // no better than one; some with non-ASCII text, where bytes and UTF-16 units differ.
    const needles = Array.from({ length: 3000 }, (_, i) => `${shared}${word(8 + Math.floor(rand() * 52))}${i % 7 === 0 ? 'é€😀' : ''}`);
    const find = textFinder(needles);
    const findBytes = bytesFinder(needles.map((n) => Buffer.from(n)));
    let hits = 0;
    for (let i = 0; i < 600; i++) {
      const pick = needles[Math.floor(rand() * needles.length)]!;
      const cut = pick.slice(0, Math.max(4, pick.length - Math.floor(rand() * 3)));
      const filler = word(Math.floor(rand() * 50));
      const hay = [`${cut}${filler}`, `${filler}${cut}`, `${filler}${shared}${filler}`, `${filler.slice(0, 5)}${cut}${filler}`][i % 4]!;
      const expected = needles.some((n) => hay.includes(n));
      hits += expected ? 1 : 0;
      expect(find(hay), hay).toBe(expected);
      expect(findBytes(Buffer.from(hay)), hay).toBe(expected);
    }
    expect(hits).toBeGreaterThan(50);
    expect(hits).toBeLessThan(550);
  });

  it('reads a payload nested deeper than the call stack goes', () => {
    let payload: unknown = 'the secret';
    for (let i = 0; i < 200_000; i++) payload = i % 2 ? [payload] : { k: payload };
    expect(payloadStrings({ a: 'x', b: payload, c: ['y'] })).toEqual(['x', 'the secret', 'y']);
  });
});

describe('erase of a 100,000-version chain with snapshots on disk', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it('finds the snapshot that still holds one of the 100,000 texts, and only that one', async () => {
    const db = makeStore(join(dir, 'm.db'), [{ id: 'keep', fact: 'an unrelated fact' }]);
    addChain(db, { prefix: 'c', length: 100_000, newestFirst: true });
    const root = join(dir, 'backups');
    const filler = Buffer.alloc(3 << 20, 'unrelated bytes ');
    for (const [name, text] of [['2026-11-27T000000Z', 'version 99998 of c'], ['2026-11-28T000000Z', 'an unrelated fact']] as const) {
      writeFileSync(join(dir, name), Buffer.concat([filler, Buffer.from(`…${text}…`), filler]));
      // Its SQLite part a real (empty) store, so the erase's look at the copy's records answers no, not "unsure".
      writeSnapshotFolder(root, 't', name, { 'store.db': makeStore(join(dir, `${name}.db`)), 'memory.db': join(dir, name) });
    }
    const config = loadConfig({ overrides: { stateDb: join(dir, 'state.db'), snapshot: { root }, stores: { t: { db } } } });
    const r = await erase(config, 't', { ids: ['c0'] }, { now: () => Date.UTC(2026, 10, 29), log: silentLogger });
    expect(r.memories).toBe(100_000);
    expect(r.snapshots.found).toEqual([join(root, 't', '2026-11-27T000000Z')]);
    expect(ids(db)).toEqual(['keep']);
  }, 120_000);
});
