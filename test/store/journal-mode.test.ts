import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { tempDir } from '../helpers/store.js';
import { cli } from '../helpers/cli.js';
import { openDatabase, setJournalMode } from '../../src/store/sqlite.js';
import { openStateDb } from '../../src/state/state.js';
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
const gate = new Int32Array(workerData.gate);
if (workerData.role === 'agent') {
  // An agent writing all the time (a 4 ms write transaction, a 1 ms pause) until released; then one more write.
  // It says how many it wrote, which were refused, and the journal mode its connection ended in.
  db.pragma('busy_timeout = 5000');
  const insert = db.prepare("INSERT INTO memory (id, subject, fact, source) VALUES (?, 's', 'f', 'agent')");
  const refused = [];
  let i = 0;
  for (;;) {
    const last = Atomics.load(gate, 0) !== 0;
    try {
      db.exec('BEGIN IMMEDIATE');
      insert.run('agent-' + i);
      sleep(4);
      db.exec('COMMIT');
    } catch (err) {
      refused.push('agent-' + i + ': ' + err.message);
      if (db.inTransaction) db.exec('ROLLBACK');
    }
    i++;
    if (i === 1) parentPort.postMessage('holding'); // its first row is in before anyone else starts
    if (last) break;
    sleep(1);
  }
  parentPort.postMessage({ written: i, refused, mode: db.pragma('journal_mode', { simple: true }) });
} else {
  if (workerData.role === 'reader') {
    db.exec('BEGIN');
    db.prepare('SELECT count(*) FROM sqlite_schema').get(); // a read lock, held
  } else {
    db.exec(workerData.role === 'exclusive' ? 'BEGIN EXCLUSIVE' : 'BEGIN IMMEDIATE');
    db.exec(workerData.sql);
  }
  parentPort.postMessage('holding');
  Atomics.wait(gate, 0, 0); // until released (at once unless the test holds it)
  sleep(workerData.holdMs);
  db.exec('COMMIT');
}
db.close();
parentPort.postMessage('done');`;

type Role = 'writer' | 'exclusive' | 'reader' | 'agent';

interface AgentReport {
  written: number;
  refused: string[];
  mode: string;
}

interface Holding {
  /** It let go and closed its connection. */
  done: Promise<void>;
  /** Lets it go: a holder held `untilReleased` lets go `holdMs` later; the agent writes once more and stops. */
  release: () => void;
  /** The agent's account of its writes, once it stopped. */
  report: Promise<AgentReport>;
}

/**
 * Starts the other connection; resolves once it holds the file (the agent: once its first row is in). It lets go
 * `holdMs` after that, or with `untilReleased` only `holdMs` after release(): a stalled test thread then still
 * meets it holding, whatever the load on the machine. The agent writes until release().
 */
async function hold(path: string, role: Role, holdMs: number, opts: { sql?: string; untilReleased?: boolean } = {}): Promise<Holding> {
  const gate = new Int32Array(new SharedArrayBuffer(4));
  if (!opts.untilReleased && role !== 'agent') gate[0] = 1;
  const worker = new Worker(HOLDER, { eval: true, workerData: { driver: DRIVER, path, role, holdMs, sql: opts.sql ?? 'SELECT 1', gate: gate.buffer } });
  let report!: (r: AgentReport) => void;
  const reported = new Promise<AgentReport>((resolve) => (report = resolve));
  const done = new Promise<void>((resolve, reject) => {
    worker.on('message', (m) => (m === 'done' ? resolve() : typeof m === 'object' && report(m as AgentReport)));
    worker.once('error', reject);
  });
  await Promise.race([new Promise<void>((resolve) => worker.once('message', () => resolve())), done]);
  const release = () => {
    Atomics.store(gate, 0, 1);
    Atomics.notify(gate, 0);
  };
  return { done, release, report: reported };
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
    // Held until released, then 300 ms more: the bare PRAGMA meets it in its transaction whatever the load.
    const { done, release } = await hold(path, 'writer', 300, { sql: `INSERT INTO memory (id, subject, fact, source) VALUES ('a', 's', 'f', 'agent')`, untilReleased: true });
    const db = openDatabase(path, { busyTimeoutMs: 5000 });
    // Busy, though the writer ends 300 ms after its release and the timeout is 5 s: no busy handler was called.
    expect(() => db.pragma('journal_mode = WAL')).toThrow(/database is locked/);
    release();
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
    const { done, release } = await hold(path, 'writer', 0, { untilReleased: true }); // holds it until after the attempt
    const db = openDatabase(path, { busyTimeoutMs: 100 });
    let thrown: unknown;
    try {
      setJournalMode(db, 'wal');
    } catch (err) {
      thrown = err;
    }
    release();
    expect((thrown as { code?: string }).code).toBe('SQLITE_BUSY');
    expect(String(thrown)).toContain(path); // the handle names its file
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
    const { done } = await hold(path, 'writer', 300, { sql: `INSERT INTO job_runs (job, started_at, outcome) VALUES ('other', '2026-01-01T00:00:00.000Z', 'running')` });
    const db = openStateDb(path);
    expect(db.prepare('SELECT count(*) AS n FROM job_runs').get()).toEqual({ n: 1 });
    db.close();
    await done;
    expect(headerMode(path)).toBe('wal');
  });

  it('init --db on a rollback-journal store its agent writes to all the time: migrates, switches to WAL, keeps every row', async () => {
    const path = rollbackStore('agent.db');
    const agent = await hold(path, 'agent', 0); // its first row is in; it goes on writing until released
    const r = cli(['init', '--db', path, '--json']); // blocks this thread; the agent's thread goes on writing
    agent.release(); // it writes once more, into the file as init left it
    const report = await agent.report;
    await agent.done;
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.json().journalMode).toBe('wal');
    expect(headerMode(path)).toBe('wal');
    // None refused (the agent's own busy timeout is 5 s), every write committed, in the order it was written; its
    // last write went into the WAL: it wrote on both sides of the switch.
    expect(report.refused).toEqual([]);
    expect(report.written).toBeGreaterThanOrEqual(2);
    expect(report.mode).toBe('wal');
    const db = new Database(path, { readonly: true });
    const ids = db.prepare(`SELECT id FROM memory WHERE id LIKE 'agent-%' ORDER BY rowid`).pluck().all();
    db.close();
    expect(ids).toEqual(Array.from({ length: report.written }, (_, i) => `agent-${i}`));
  });
});
