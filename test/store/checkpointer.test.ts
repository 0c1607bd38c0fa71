import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { makeStore, tempDir, walIndex, type Row } from '../helpers/store.js';
import { holder } from '../helpers/wal-holders.js';
import { startCheckpointer } from '../../src/store/checkpointer.js';

const rows = (n: number, from = 0): Row[] => Array.from({ length: n }, (_, i) => ({ id: `r${from + i}`, fact: `fact ${from + i} `.repeat(20) }));

/** A WAL store with `n` rows committed after `rows` and not yet copied into the file, its writer still open. */
function walStore(path: string, n = 500): Database.Database {
  makeStore(path, rows(2000));
  const writer = new Database(path);
  writer.pragma('wal_autocheckpoint = 0');
  commit(writer, n, 5000);
  return writer;
}

function commit(writer: Database.Database, n: number, from: number): void {
  const insert = writer.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES (?, 's', ?, 'x')`);
  writer.transaction(() => rows(n, from).forEach((r) => insert.run(r.id, r.fact)))();
}

/** Whether another connection holds SQLite's checkpointer lock now (a passive checkpoint gets busy at once). */
function checkpointLockTaken(path: string): boolean {
  const probe = new Database(path);
  try {
    return (probe.pragma('wal_checkpoint(PASSIVE)') as { busy: number }[])[0]!.busy === 1;
  } finally {
    probe.close();
  }
}

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

  it('a checkpoint asked for while another connection checkpoints runs once that one ends, instead of being dropped', async () => {
    // The agent's commits checkpoint too (SQLite's autocheckpoint): a request that met one of those and gave up
    // left the prune's batch for the agent's next commit to copy, and to wait for both fsyncs of.
    const path = join(dir, 'm.db');
    const writer = walStore(path);
    const reader = holder(path, 'reader', 1500);
    await reader.started;
    commit(writer, 500, 9000); // past the reader's snapshot: the other checkpoint waits for the reader
    const other = holder(path, 'checkpointer');
    await other.started;
    await new Promise((r) => setTimeout(r, 50));
    expect(checkpointLockTaken(path)).toBe(true);
    const checkpointer = startCheckpointer(path);
    try {
      await checkpointer.ready();
      expect(checkpointLockTaken(path)).toBe(true);
      checkpointer.request();
      await checkpointer.idle();
      expect(checkpointLockTaken(path)).toBe(false); // it waited for the other to end, then ran
      const wal = walIndex(path);
      expect(wal.nBackfill).toBe(wal.mxFrame);
    } finally {
      await checkpointer.close();
      writer.close();
      await Promise.all([reader.done, other.done]);
    }
  });

  it('copies what it can and stops when a reader keeps the rest, instead of trying forever', async () => {
    const path = join(dir, 'm.db');
    const writer = walStore(path);
    const reader = holder(path, 'reader', 3000);
    await reader.started;
    commit(writer, 500, 9000); // these frames stay in the WAL while the reader's snapshot lasts
    let readerDone = false;
    void reader.done.then(() => (readerDone = true));
    const checkpointer = startCheckpointer(path);
    try {
      checkpointer.request();
      await checkpointer.idle();
      expect(readerDone).toBe(false);
      const wal = walIndex(path);
      expect(wal.nBackfill).toBeGreaterThan(0); // the frames before the reader's snapshot are in the file
      expect(wal.nBackfill).toBeLessThan(wal.mxFrame);
      await reader.done;
      checkpointer.request(); // the next request copies the rest
      await checkpointer.idle();
      expect(walIndex(path).nBackfill).toBe(walIndex(path).mxFrame);
    } finally {
      await checkpointer.close();
      writer.close();
    }
  });

  it('requestStarted returns when the thread starts (not at its time limit), and that checkpoint copies everything', async () => {
    const path = join(dir, 'm.db');
    const writer = walStore(path, 4000);
    const checkpointer = startCheckpointer(path);
    const LIMIT_MS = 60_000;
    try {
      await checkpointer.ready();
      for (let round = 0; round < 3; round++) {
        commit(writer, 4000, 10000 * (round + 1));
        writer.exec('BEGIN IMMEDIATE'); // as the prune does: the write lock held while the thread starts
        let waited: number;
        try {
          const began = performance.now();
          checkpointer.requestStarted(LIMIT_MS);
          waited = performance.now() - began;
        } finally {
          writer.exec('ROLLBACK');
        }
        // It saw the thread start: had it waited to its limit it would have given up. The limit is a minute so that
        // only that, and not a thread slow to start on a loaded machine, can reach it.
        expect(waited).toBeLessThan(LIMIT_MS);
        await checkpointer.idle();
        expect(walIndex(path).nBackfill).toBe(walIndex(path).mxFrame);
      }
    } finally {
      await checkpointer.close();
      writer.close();
    }
  });

  it('reports a checkpoint it cannot run instead of hanging', async () => {
    const checkpointer = startCheckpointer(join(dir, 'missing.db'));
    await checkpointer.ready(); // the thread could not open the file: ready all the same, and idle() says why
    checkpointer.requestStarted(1000); // returns: nothing will start
    checkpointer.request();
    await expect(checkpointer.idle()).rejects.toThrow(/missing\.db|unable to open|not exist/i);
    await checkpointer.close();
  });
});
