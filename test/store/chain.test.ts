import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { makeStore, ids, tempDir } from '../helpers/store.js';
import { addChain, assertValid } from '../helpers/chains.js';
import { openDatabase, type Db } from '../../src/store/sqlite.js';
import { cascadeClosure, deleteRoots, deleteWithCascade } from '../../src/layouts/warden/delete.js';

describe('deleting a supersede chain deeper than SQLite cascades', () => {
  let dir: string;
  let cleanup: () => void;
  let path: string;
  let db: Db;
  beforeEach(() => {
    ({ dir, cleanup } = tempDir());
    path = makeStore(join(dir, 'm.db'), [{ id: 'live' }, { id: 'other' }, { id: 'older', superseded_by: 'other' }]);
  });
  afterEach(() => {
    db?.close();
    cleanup();
  });

  for (const length of [1001, 100_000]) {
    for (const newestFirst of [false, true]) {
      it(`deletes the head of a ${length}-version chain (${newestFirst ? 'newest' : 'oldest'} inserted first) with every version`, async () => {
        const chain = addChain(path, { prefix: 'c', length, newestFirst });
        db = openDatabase(path);
        expect(cascadeClosure(db, ['c0'])).toHaveLength(length);
        const deleted = await deleteWithCascade(db, ['c0']);
        expect(deleted).toHaveLength(length);
        expect(new Set(deleted.map((r) => r.id))).toEqual(new Set(chain));
        expect(ids(path)).toEqual(['live', 'older', 'other']);
        assertValid(path);
      }, 120_000);
    }
  }

  it('deletes deep and shallow roots of one batch together, the roots taken from a chain of their own included', async () => {
    addChain(path, { prefix: 'a', length: 3000 });
    addChain(path, { prefix: 'b', length: 1500, newestFirst: true });
    db = openDatabase(path);
    // Roots: two deep heads, a version in the middle of a (deleted with it anyway), a short chain's head.
    const out = await deleteRoots(db, ['a0', 'a1700', 'b0', 'other'], { budget: { ms: 10_000, chunk: 2 } });
    expect(out.consumed).toBe(4);
    expect(out.rowids).toHaveLength(3000 + 1500 + 2);
    expect(new Set(out.deleted.map((r) => r.id)).size).toBe(4502);
    expect(ids(path)).toEqual(['live']);
    assertValid(path);
  });

  it('deletes a chain that is a ring (versions superseding each other round), and the tail that hangs off it', async () => {
    // r0 → r2499 → … → r1 → r0: a ring of 2,500 an agent made; t0…t1199 hang off r700.
    addChain(path, { prefix: 'r', length: 2500, headSupersededBy: 'r2499' });
    addChain(path, { prefix: 't', length: 1200, headSupersededBy: 'r700' });
    db = openDatabase(path);
    const deleted = await deleteWithCascade(db, ['r5']);
    expect(deleted).toHaveLength(3700);
    expect(ids(path)).toEqual(['live', 'older', 'other']);
    assertValid(path);
  });

  it('deletes a tree: a deep chain with branches of older versions along it', async () => {
    addChain(path, { prefix: 'c', length: 2000 });
    for (const at of [0, 999, 1999]) addChain(path, { prefix: `x${at}_`, length: 1100, headSupersededBy: `c${at}` });
    db = openDatabase(path);
    const deleted = await deleteWithCascade(db, ['c0']);
    expect(deleted).toHaveLength(2000 + 3 * 1100);
    expect(ids(path)).toEqual(['live', 'older', 'other']);
    assertValid(path);
  });

  it('keeps the whole chain when the root no longer qualifies, and deletes nothing else', async () => {
    addChain(path, { prefix: 'c', length: 1500, headExpiresAt: '2099-01-01 00:00:00' });
    db = openDatabase(path);
    const deleted = await deleteWithCascade(db, ['c0'], { recheck: { sql: `expires_at < '2000-01-01'` } });
    expect(deleted).toEqual([]);
    expect(ids(path)).toHaveLength(1503);
  });

  it('keeps every transaction short: a chain of 5,000 goes over several, each preceded by a pause', async () => {
    addChain(path, { prefix: 'c', length: 5_000 });
    db = openDatabase(path);
    let pauses = 0;
    let commits = 0;
    const seen: number[] = [];
    const deleted = await deleteWithCascade(db, ['c0'], {
      budget: { ms: 1, chunk: 10 },
      beforeCommit: (rows) => seen.push(rows.length),
      afterCommit: () => (commits += 1),
      pause: async () => {
        pauses += 1;
        if (pauses % 5 === 1) assertValid(path); // every state between two transactions is a valid store
        return true;
      },
    });
    expect(deleted).toHaveLength(5_000);
    expect(seen.reduce((a, b) => a + b, 0)).toBe(5_000);
    expect(commits).toBe(seen.length);
    expect(pauses).toBeGreaterThan(3);
    expect(pauses).toBe(seen.length - 1); // one before each of the chain's transactions, none before the batch's
  });

  it('stops between two transactions when told to, leaving a shorter valid chain that a second call finishes', async () => {
    addChain(path, { prefix: 'c', length: 20_000 });
    db = openDatabase(path);
    let pauses = 0;
    const first = await deleteWithCascade(db, ['c0'], { budget: { ms: 1, chunk: 10 }, pause: async () => ++pauses < 3 });
    expect(first.length).toBeGreaterThan(0);
    expect(first.length).toBeLessThan(20_000);
    // The oldest versions went first: what is left is c0 … c(k), each still pointing at the next newer one.
    const left = ids(path, `SELECT id FROM memory WHERE id LIKE 'c%'`);
    expect(left).toHaveLength(20_000 - first.length);
    expect(new Set(left)).toEqual(new Set(Array.from({ length: left.length }, (_, i) => `c${i}`)));
    assertValid(path);
    const rest = await deleteWithCascade(db, ['c0']);
    expect(rest).toHaveLength(left.length);
    expect(ids(path)).toEqual(['live', 'older', 'other']);
  });
});
