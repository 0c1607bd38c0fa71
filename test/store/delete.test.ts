import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { makeStore, ids, tempDir, type Row } from '../helpers/store.js';
import { openDatabase } from '../../src/store/sqlite.js';
import { deleteRoots } from '../../src/layouts/warden/delete.js';

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
