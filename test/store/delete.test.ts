import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { makeStore, ids, tempDir, type Row } from '../helpers/store.js';
import { openDatabase } from '../../src/store/sqlite.js';
import { chunkAt, deleteRoots } from '../../src/layouts/warden/delete.js';

describe('deleteRoots with a time budget', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  // r0 … r99, and for each of the first ten an older version it superseded (ON DELETE CASCADE takes it along).
  const rows: Row[] = [
    ...Array.from({ length: 100 }, (_, i) => ({ id: `r${i}` })),
    ...Array.from({ length: 10 }, (_, i) => ({ id: `old${i}`, superseded_by: `r${i}` })),
  ];
  const roots = Array.from({ length: 100 }, (_, i) => `r${i}`);

  it('stops taking chunks once the budget is spent and says how far it got', async () => {
    const path = makeStore(join(dir, 'm.db'), rows);
    const db = openDatabase(path);
    try {
      // A budget of 0 ms is spent by the first chunk: exactly one chunk goes, with its cascade.
      const first = await deleteRoots(db, roots, { budget: { ms: 0, chunk: 15 } });
      expect(first.consumed).toBe(15);
      expect(first.deleted.map((r) => r.id).sort()).toEqual([...roots.slice(0, 15), ...Array.from({ length: 10 }, (_, i) => `old${i}`)].sort());
      expect(first.lockMs).toBeGreaterThanOrEqual(first.deleteMs);
      // The caller passes the rest again; without a budget, everything goes in one transaction.
      const rest = await deleteRoots(db, roots.slice(first.consumed));
      expect(rest.consumed).toBe(85);
      expect(rest.deleted).toHaveLength(85);
      expect(ids(path)).toEqual([]);
    } finally {
      db.close();
    }
  });

  it('puts a root weighed heavier than a chunk in a chunk of its own', async () => {
    const path = makeStore(join(dir, 'm.db'), rows);
    const db = openDatabase(path);
    const weight = (root: string | number) => (root === 'r2' || root === 'r5' ? 50 : 1);
    try {
      // Chunks of 10 in weight: r0 r1 | r2 | r3 r4 | r5 | r6 … r15
      expect([0, 2, 3, 5, 6].map((from) => chunkAt(roots, from, { ms: 0, chunk: 10, weight }))).toEqual([
        { end: 2, weight: 2 }, { end: 3, weight: 50 }, { end: 5, weight: 2 }, { end: 6, weight: 50 }, { end: 16, weight: 10 },
      ]);
      // A budget of 0 ms takes one chunk a call: the heavy root is not in the chunk before it, and goes alone with
      // its cascade (old2) when its turn comes.
      const first = await deleteRoots(db, roots, { budget: { ms: 0, chunk: 10, weight } });
      expect(first.consumed).toBe(2);
      expect(first.deleted.map((r) => r.id).sort()).toEqual(['old0', 'old1', 'r0', 'r1']);
      const heavy = await deleteRoots(db, roots.slice(2), { budget: { ms: 0, chunk: 10, weight } });
      expect(heavy.consumed).toBe(1);
      expect(heavy.deleted.map((r) => r.id).sort()).toEqual(['old2', 'r2']);
      // With time to spare, the rest goes in one call, heavy root and all.
      const rest = await deleteRoots(db, roots.slice(3), { budget: { ms: 60_000, chunk: 10, weight } });
      expect(rest.consumed).toBe(97);
      expect(ids(path)).toEqual([]);
    } finally {
      db.close();
    }
  });

  it('takes chunks of `chunk` roots when no weight is given, the last one shorter', () => {
    expect([0, 90, 99].map((from) => chunkAt(roots, from, { ms: 0, chunk: 15 }))).toEqual([
      { end: 15, weight: 15 }, { end: 100, weight: 10 }, { end: 100, weight: 1 },
    ]);
    expect(chunkAt(roots, 100, { ms: 0, chunk: 15 })).toEqual({ end: 100, weight: 0 });
  });

  it('never takes more roots than it was given', async () => {
    const path = makeStore(join(dir, 'm.db'), rows);
    const db = openDatabase(path);
    try {
      const all = await deleteRoots(db, roots.slice(0, 7), { budget: { ms: 60_000, chunk: 5 } });
      expect(all.consumed).toBe(7);
      expect(ids(path)).toHaveLength(rows.length - 7 - 7);
    } finally {
      db.close();
    }
  });
});

describe('deleteRoots after temp_store changed on its connection', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  // erase sets temp_store back to a file before VACUUM, which drops the capture trigger deleteRoots made: a later
  // delete on the same connection must make it again, or its cascade would go unreported.
  it.each(['DEFAULT', 'FILE', 'MEMORY'])('temp_store = %s: the cascade is still captured', async (mode) => {
    const path = makeStore(join(dir, 'm.db'), [{ id: 'a' }, { id: 'b' }, { id: 'a0', superseded_by: 'a' }, { id: 'b0', superseded_by: 'b' }, { id: 'b00', superseded_by: 'b0' }]);
    const db = openDatabase(path);
    try {
      expect((await deleteRoots(db, ['a'])).deleted.map((r) => r.id).sort()).toEqual(['a', 'a0']);
      db.pragma(`temp_store = ${mode}`);
      db.exec('VACUUM');
      expect((await deleteRoots(db, ['b'])).deleted.map((r) => r.id).sort()).toEqual(['b', 'b0', 'b00']);
      expect(ids(path)).toEqual([]);
    } finally {
      db.close();
    }
  });
});
