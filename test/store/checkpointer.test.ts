import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { makeStore, tempDir, walIndex } from '../helpers/store.js';
import { startCheckpointer } from '../../src/store/checkpointer.js';

describe('the checkpointer thread', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it('copies what a writer committed into the database file, beside the writer', async () => {
    const path = makeStore(join(dir, 'm.db'));
    const writer = new Database(path);
    writer.pragma('journal_mode = WAL');
    writer.pragma('wal_autocheckpoint = 0');
    const checkpointer = startCheckpointer(path);
    try {
      const insert = writer.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES (?, 'u', ?, 's')`);
      for (let round = 0; round < 3; round++) {
        writer.transaction(() => {
          for (let i = 0; i < 500; i++) insert.run(`r${round}_${i}`, 'x'.repeat(200));
        })();
        expect(walIndex(path).nBackfill).toBeLessThan(walIndex(path).mxFrame);
        checkpointer.request();
        checkpointer.request(); // folded into one more run
        await checkpointer.idle();
        const wal = walIndex(path);
        expect(wal.mxFrame).toBeGreaterThan(0);
        expect(wal.nBackfill).toBe(wal.mxFrame);
      }
    } finally {
      await checkpointer.close();
      writer.close();
    }
  });

  it('reports a checkpoint it cannot run instead of hanging', async () => {
    const checkpointer = startCheckpointer(join(dir, 'missing.db'));
    checkpointer.request();
    await expect(checkpointer.idle()).rejects.toThrow(/missing\.db|unable to open|not exist/i);
    await checkpointer.close();
  });
});
