import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { makeStore, tempDir, type Row } from '../helpers/store.js';
import { openDatabase, truncateWal } from '../../src/store/sqlite.js';
import { startStoreThread } from '../../src/store/thread.js';
import { holder, type Holder } from '../helpers/wal-holders.js';

/**
 * A checkpoint(TRUNCATE) that meets another connection's checkpoint gets busy at once, whatever its busy_timeout
 * (SQLite calls no busy handler for the checkpointer lock). Here another connection's checkpoint(RESTART) holds
 * that lock while it waits for a reader on an old snapshot; the reader ends 200 ms after it is released.
 */
describe('truncating the WAL while another connection checkpoints', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  const rows = (n: number, from = 0): Row[] => Array.from({ length: n }, (_, i) => ({ id: `r${from + i}`, fact: `fact ${from + i} `.repeat(20) }));

  /** A WAL store whose WAL has frames past a reader's snapshot, a checkpointer waiting on that reader. */
  async function contended(): Promise<{ path: string; reader: Holder; checkpointer: Holder }> {
    const path = makeStore(join(dir, 'm.db'), rows(2000));
    const db = openDatabase(path, { busyTimeoutMs: 5000 });
    db.pragma('wal_autocheckpoint = 0');
    const insert = db.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES (?, 's', ?, 'x')`);
    db.transaction(() => rows(500, 5000).forEach((r) => insert.run(r.id, r.fact)))();
    const reader = holder(path, 'reader', 'until-released');
    await reader.started;
    db.transaction(() => rows(500, 9000).forEach((r) => insert.run(r.id, r.fact)))(); // past the reader's snapshot
    db.close();
    const checkpointer = holder(path, 'checkpointer');
    await checkpointer.started;
    await new Promise((r) => setTimeout(r, 50)); // it is inside its checkpoint now
    return { path, reader, checkpointer };
  }

  it('one attempt is busy at once; truncateWal waits it out and empties the WAL', async () => {
    const { path, reader, checkpointer } = await contended();
    const db = openDatabase(path, { busyTimeoutMs: 5000 });
    const [once] = db.pragma('wal_checkpoint(TRUNCATE)') as { busy: number; log: number }[];
    expect(once).toMatchObject({ busy: 1, log: -1 }); // what erase used to report as walTruncated: false
    reader.release();
    expect(truncateWal(db)).toBe(true);
    expect(statSync(`${path}-wal`).size).toBe(0);
    db.close();
    await Promise.all([reader.done, checkpointer.done]);
  });

  it('the store thread\'s truncate (erase\'s compact after its VACUUM) waits it out too', async () => {
    const { path, reader, checkpointer } = await contended();
    const thread = startStoreThread(path, { busyMs: 5000 });
    reader.release();
    const r = await thread.call('truncate');
    const compacted = await thread.call('compact'); // and the VACUUM before it, uncontended now
    await thread.close();
    expect(r).toEqual({ id: 0, result: true });
    expect(compacted?.result).toEqual({ vacuumed: true, walTruncated: true });
    await Promise.all([reader.done, checkpointer.done]);
  });

  it('gives up after the busy timeout and says so', async () => {
    const { path, reader, checkpointer } = await contended();
    const db = openDatabase(path, { busyTimeoutMs: 100 });
    expect(truncateWal(db)).toBe(false); // the reader holds on until released
    db.close();
    reader.release();
    await Promise.all([reader.done, checkpointer.done]);
  });
});
