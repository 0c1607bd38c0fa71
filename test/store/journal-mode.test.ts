import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { tempDir } from '../helpers/store.js';
import { cli } from '../helpers/cli.js';
import { openDatabase, setJournalMode } from '../../src/store/sqlite.js';
import { openStateDb } from '../../src/state.js';
import { MEMORY_DDL } from '../../src/layouts/warden/schema.js';

/**
 * Switching a file to WAL writes its header under a write lock taken while holding a read lock; SQLite calls no
 * busy handler for that upgrade, so with another connection writing it is busy at once, whatever the timeout.
 * (It failed CI once: four processes creating one new state db together.) The other connection here is a thread
 * on a rollback-journal file, in a write transaction it ends `holdMs` later, or a reader.
 */
const DRIVER = createRequire(import.meta.url).resolve('better-sqlite3');
const HOLDER = `
const { parentPort, workerData } = require('node:worker_threads');
const db = new (require(workerData.driver))(workerData.path);
const sleep = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
if (workerData.role === 'agent') {
  // An agent writing all the time: a 4 ms write transaction, a 1 ms pause, for holdMs.
  db.pragma('busy_timeout = 5000');
  const insert = db.prepare("INSERT INTO memory (id, subject, fact, source) VALUES (?, 's', 'f', 'agent')");
  const until = Date.now() + workerData.holdMs;
  parentPort.postMessage('holding');
  for (let i = 0; Date.now() < until; i++) {
    db.exec('BEGIN IMMEDIATE');
    insert.run('agent-' + i);
    sleep(4);
    db.exec('COMMIT');
    sleep(1);
  }
} else {
  if (workerData.role === 'reader') {
    db.exec('BEGIN');
    db.prepare('SELECT count(*) FROM sqlite_schema').get(); // a read lock, held
  } else {
    db.exec(workerData.role === 'exclusive' ? 'BEGIN EXCLUSIVE' : 'BEGIN IMMEDIATE');
    db.exec(workerData.sql);
  }
  parentPort.postMessage('holding');
  sleep(workerData.holdMs);
  db.exec('COMMIT');
}
db.close();
parentPort.postMessage('done');`;

type Role = 'writer' | 'exclusive' | 'reader' | 'agent';

/** Starts the other connection; resolves once it holds the file, with a promise of its end (wrapped: not adopted). */
async function hold(path: string, role: Role, holdMs: number, sql = 'SELECT 1'): Promise<{ done: Promise<void> }> {
  const worker = new Worker(HOLDER, { eval: true, workerData: { driver: DRIVER, path, role, holdMs, sql } });
  const done = new Promise<void>((resolve, reject) => {
    worker.on('message', (m) => m === 'done' && resolve());
    worker.once('error', reject);
  });
  await Promise.race([new Promise<void>((resolve) => worker.once('message', () => resolve())), done]);
  return { done };
}

/** The mode written in the file's header: bytes 18 and 19 are 2 for WAL, 1 for a rollback journal. */
function headerMode(path: string): string {
  const db = new Database(path, { readonly: true });
  try {
    return String(db.pragma('journal_mode', { simple: true })).toLowerCase();
  } finally {
    db.close();
  }
}

describe('changing the journal mode beside another connection', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  function rollbackStore(name: string): string {
    const path = join(dir, name);
    const db = new Database(path);
    db.exec(MEMORY_DDL);
    db.close();
    return path;
  }

  it('a bare PRAGMA is busy at once under a writer, whatever the timeout; setJournalMode waits the writer out', async () => {
    const path = rollbackStore('m.db');
    // Held for a second: long enough that even a stalled test thread meets the writer still in its transaction.
    const { done } = await hold(path, 'writer', 1000, `INSERT INTO memory (id, subject, fact, source) VALUES ('a', 's', 'f', 'agent')`);
    const db = openDatabase(path, { busyTimeoutMs: 5000 });
    // Busy, though the writer ends within the second and the timeout is 5 s: no busy handler was called.
    expect(() => db.pragma('journal_mode = WAL')).toThrow(/database is locked/);
    expect(setJournalMode(db, 'wal')).toBe('wal');
    expect(db.prepare('SELECT count(*) AS n FROM memory').get()).toEqual({ n: 1 }); // the writer's row, kept
    db.close();
    await done;
    expect(headerMode(path)).toBe('wal');
  });

  for (const role of ['exclusive', 'reader'] as Role[]) {
    it(`waits out a connection that holds the file as ${role === 'reader' ? 'a reader' : 'an exclusive writer'}`, async () => {
      const path = rollbackStore('m.db');
      const { done } = await hold(path, role, 300);
      const db = openDatabase(path, { busyTimeoutMs: 5000 });
      expect(setJournalMode(db, 'wal')).toBe('wal');
      db.close();
      await done;
      expect(headerMode(path)).toBe('wal');
    });
  }

  it('and back: WAL to a rollback journal while another connection reads', async () => {
    const path = rollbackStore('m.db');
    const first = openDatabase(path, { busyTimeoutMs: 5000 });
    expect(setJournalMode(first, 'wal')).toBe('wal');
    first.close();
    const { done } = await hold(path, 'reader', 300);
    const db = openDatabase(path, { busyTimeoutMs: 5000 });
    expect(setJournalMode(db, 'delete')).toBe('delete');
    db.close();
    await done;
    expect(headerMode(path)).toBe('delete');
  });

  it('gives up after the busy timeout with SQLite\'s busy error (retryable), the file unchanged', async () => {
    const path = rollbackStore('m.db');
    const { done } = await hold(path, 'writer', 2000);
    const db = openDatabase(path, { busyTimeoutMs: 100 });
    const started = Date.now();
    let thrown: unknown;
    try {
      setJournalMode(db, 'wal');
    } catch (err) {
      thrown = err;
    }
    expect((thrown as { code?: string }).code).toBe('SQLITE_BUSY');
    expect(String(thrown)).toContain(path); // the handle names its file
    expect(Date.now() - started).toBeGreaterThanOrEqual(100);
    db.close();
    await done;
    expect(headerMode(path)).toBe('delete');
  });

  it('a new state db being created by another process\'s connection: openStateDb waits, then has every table', async () => {
    const path = join(dir, 'state', 'state.db');
    openStateDb(path).close(); // the directory and a state db…
    const raw = new Database(path);
    raw.pragma('journal_mode = DELETE'); // …put back to the header of a file another process has just created
    raw.close();
    const { done } = await hold(path, 'writer', 300, `INSERT INTO job_runs (job, started_at, outcome) VALUES ('other', '2026-01-01T00:00:00.000Z', 'running')`);
    const db = openStateDb(path);
    expect(db.prepare('SELECT count(*) AS n FROM job_runs').get()).toEqual({ n: 1 });
    db.close();
    await done;
    expect(headerMode(path)).toBe('wal');
  });

  it('init --db on a rollback-journal store its agent writes to all the time: migrates, switches to WAL, keeps every row', async () => {
    const path = rollbackStore('agent.db');
    const { done } = await hold(path, 'agent', 1500);
    const r = cli(['init', '--db', path, '--json']); // blocks this thread; the agent's thread goes on writing
    await done;
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.json().journalMode).toBe('wal');
    expect(headerMode(path)).toBe('wal');
    const db = new Database(path, { readonly: true });
    const { n } = db.prepare(`SELECT count(*) AS n FROM memory WHERE id LIKE 'agent-%'`).get() as { n: number };
    expect(n).toBeGreaterThan(100); // every write of 1.5 s, none refused (the agent's own timeout is 5 s)
    db.close();
  });
});
