import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { peakGrowthKb } from '../helpers/memory.js';
import { makeStore, ids, tempDir, type Row } from '../helpers/store.js';
import { openDatabase } from '../../src/store/sqlite.js';
import { deleteRoots } from '../../src/layouts/warden/delete.js';
import { PRUNABLE_SQL, pruneParams } from '../../src/layouts/warden/rules.js';

describe('a delete that touches thousands of pages in one statement', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  const NOW = Date.UTC(2026, 11, 1);
  // 10,000 expired rows among as many live ones, each with 3 KB of text: a page of its own each, 80 MB of file.
  const EXPIRED = 10_000;
  const rows: Row[] = Array.from({ length: 2 * EXPIRED }, (_, i) => ({
    id: `r${i}`, fact: `fact ${i} `.padEnd(3000, '.'), ...(i % 2 === 0 ? { expires_at: '2026-11-01 00:00:00' } : {}),
  }));

  it('keeps no copy in memory of the pages its deletes touch until the commit', async () => {
    const path = makeStore(join(dir, 'm.db'), rows);
    const db = openDatabase(path);
    try {
      db.pragma('journal_mode = WAL'); // as the agent's store runs
      db.pragma('cache_size = -2000'); // a 2 MB page cache: what grows beyond it is the statements' own memory
      const params = pruneParams({ now: NOW, expired: true, supersededAfterDays: 180 });
      const roots = db.prepare(`SELECT rowid FROM memory WHERE ${PRUNABLE_SQL} ORDER BY rowid`).pluck().all(params) as number[];
      // As prune deletes them: by rowid, each root re-checked by the DELETE itself, in one statement here.
      const options = { key: 'rowid' as const, rows: 0, recheck: { sql: PRUNABLE_SQL, params } };
      // One small delete first: the connection's TEMP objects and statements exist before the peak is measured.
      await deleteRoots(db, roots.slice(0, 1), options);
      const { value: outcome, grewKb } = await peakGrowthKb(() => deleteRoots(db, roots.slice(1), options));
      expect(outcome.rowids).toHaveLength(EXPIRED - 1);
      expect(ids(path, 'SELECT id FROM memory WHERE expires_at IS NOT NULL')).toEqual([]);
      // With the rule in the DELETE's own WHERE, its statement journal held a copy of each page touched, in memory:
      // some 28 MB here; at 10M rows, up to 80 MB of a prune's peak.
      expect(grewKb).toBeLessThan(16 * 1024);
    } finally {
      db.close();
    }
  });
});
