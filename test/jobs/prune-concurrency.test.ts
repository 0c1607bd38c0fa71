import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { statSync, utimesSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { makeStore, tempDir, type Row, walIndex } from '../helpers/store.js';
import { startAgent } from '../helpers/agent.js';
import { prune } from '../../jobs/prune.js';
import { loadConfig } from '../../src/config/config.js';
import { silentLogger } from '../../src/log/logger.js';
import { openStore } from '../../src/layouts/open.js';
import { pruneWarden } from '../../src/layouts/warden/prune.js';

describe('prune beside a writing agent', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it('never makes the agent see database is locked, and keeps what the agent wrote', async () => {
    const rows: Row[] = [];
    for (let i = 0; i < 40_000; i++) {
      rows.push({ id: `r${i}`, expires_at: i % 4 === 0 ? null : '2026-01-01 00:00:00', fact: `fact ${i} `.repeat(8) });
    }
    const db = makeStore(join(dir, 'm.db'), rows);
    const agent = await startAgent(db);

    const config = loadConfig({ overrides: { stateDb: join(dir, 's.db'), stores: { t: { db } }, prune: { batchSize: 500 } } });
    const result = await prune({ store: 't', dryRun: false }, { config, log: silentLogger, now: () => Date.UTC(2026, 10, 29), signal: new AbortController().signal });

    const summary = await agent.stop();
    expect(result.deleted).toBe(30_000);
    expect(summary.errors).toBe(0);
    expect(summary.firstError).toBeNull();
    expect(summary.writes).toBeGreaterThan(0);
    const d = new Database(db, { readonly: true });
    expect(d.prepare(`SELECT count(*) AS n FROM memory WHERE id LIKE 'agent_%'`).get()).toEqual({ n: summary.writes });
    d.close();
  });

  it('lets in a writer that turns up after the batches went long, and still deletes exactly the prunable rows', async () => {
    const rows: Row[] = [];
    for (let i = 0; i < 80_000; i++) rows.push({ id: `r${i}`, expires_at: i % 4 === 0 ? null : '2026-01-01 00:00:00' });
    const db = makeStore(join(dir, 'm.db'), rows);
    // Capped at 50 rows a batch, the prune lasts 1,200 batches and their windows of at least 30 ms: the agent
    // arrives long after half a second without any other commit has turned the long (quiet) batches on.
    const config = loadConfig({ overrides: { stateDb: join(dir, 's.db'), stores: { t: { db } }, prune: { batchSize: 50, batchMs: 5, quietBatchMs: 400 } } });
    const running = prune({ store: 't', dryRun: false }, { config, log: silentLogger, now: () => Date.UTC(2026, 10, 29), signal: new AbortController().signal });
    let done = false;
    void running.finally(() => (done = true));
    await new Promise((r) => setTimeout(r, 1500));
    expect(done).toBe(false);
    const agent = await startAgent(db);
    await new Promise((r) => setTimeout(r, 300));
    const during = new Database(db, { readonly: true });
    const written = during.prepare(`SELECT count(*) FROM memory WHERE id LIKE 'agent_%'`).pluck().get() as number;
    during.close();
    expect(done).toBe(false);
    const result = await running;
    const summary = await agent.stop();
    expect(written).toBeGreaterThan(0); // it got in while the prune ran
    expect(result.deleted).toBe(60_000);
    expect(summary.errors).toBe(0);
    const d = new Database(db, { readonly: true });
    expect(d.prepare(`SELECT count(*) FROM memory WHERE id LIKE 'agent_%'`).pluck().get()).toBe(summary.writes);
    expect(d.prepare(`SELECT count(*) FROM memory WHERE id LIKE 'r%'`).pluck().get()).toBe(20_000);
    d.close();
  }, 60_000);
});

describe('the window between batches', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  const expiring = (n: number): Row[] =>
    Array.from({ length: n }, (_, i) => ({ id: `r${i}`, expires_at: i % 4 === 0 ? null : '2026-01-01 00:00:00' }));
  /** A job context for the store at `db` (store name `t`) with these prune settings. */
  const ctxFor = (db: string, prune: object = {}, signal = new AbortController().signal) => ({
    config: loadConfig({ overrides: { stateDb: join(dir, 's.db'), stores: { t: { db } }, prune } }),
    log: silentLogger,
    now: () => Date.UTC(2026, 10, 29),
    signal,
  });

  it('closes as soon as the waiting agent has written, not after the whole pause', async () => {
    const db = makeStore(join(dir, 'm.db'), expiring(2_000));
    const agent = await startAgent(db);

    // 15 batches (batchMs long enough for each to take its 100 rows) with a minute's pause after each: only a
    // window that closes early lets this finish in the test's time.
    const result = await prune({ store: 't', dryRun: false }, ctxFor(db, { batchSize: 100, batchMs: 1000, pauseMs: 60_000 }));

    const summary = await agent.stop();
    expect(result.batches).toBe(15);
    expect(result.deleted).toBe(1_500);
    expect(summary.errors).toBe(0);
  }, 30_000);

  it('with windowEndsOnCommit false, keeps the lock free for the whole pause however the agent writes', async () => {
    const db = makeStore(join(dir, 'm.db'), expiring(2_000));
    const agent = await startAgent(db);
    const abort = new AbortController();
    const running = prune({ store: 't', dryRun: false }, ctxFor(db, { batchSize: 100, pauseMs: 60_000, windowEndsOnCommit: false }, abort.signal));
    setTimeout(() => abort.abort(), 500); // the agent commits every millisecond meanwhile
    const result = await running;
    const summary = await agent.stop();
    expect(result.batches).toBe(1);
    expect(summary.writes).toBeGreaterThan(50);
    expect(summary.errors).toBe(0);
  }, 20_000);

  it('ends on abort in the middle of a window, and the next run finishes the job', async () => {
    const db = makeStore(join(dir, 'm.db'), expiring(2_000));
    const abort = new AbortController();
    const running = prune({ store: 't', dryRun: false }, ctxFor(db, { batchSize: 100, pauseMs: 60_000 }, abort.signal));
    setTimeout(() => abort.abort(), 300); // no other writer: the first window would last a minute
    const first = await running;
    expect(first.batches).toBe(1);
    expect(first.deleted).toBe(100);
    const rest = await prune({ store: 't', dryRun: false }, ctxFor(db));
    expect(rest.deleted).toBe(1_400);
    const d = new Database(db, { readonly: true });
    expect(d.prepare(`SELECT count(*) FROM memory`).pluck().get()).toBe(500);
    d.close();
  }, 20_000);

  it('leaves no page of the prune for the agent to checkpoint, and gives the connection its settings back', async () => {
    const path = makeStore(join(dir, 'm.db'), expiring(4_000));
    const ctx = ctxFor(path, { batchSize: 500, pauseMs: 0 });
    const store = openStore(ctx.config, 't');
    try {
      store.db.exec(`CREATE TEMP TABLE kept (x)`); // TEMP objects the connection had before survive the prune
      const before = { cache: store.db.pragma('cache_size', { simple: true }), auto: store.db.pragma('wal_autocheckpoint', { simple: true }) };
      const result = await pruneWarden(store, ctx, { dryRun: false });
      expect(result.deleted).toBe(3_000);
      expect(result.batches).toBeGreaterThan(1);
      expect({ cache: store.db.pragma('cache_size', { simple: true }), auto: store.db.pragma('wal_autocheckpoint', { simple: true }) }).toEqual(before);
      expect(store.db.prepare(`SELECT count(*) FROM temp.sqlite_schema WHERE name = 'kept'`).pluck().get()).toBe(1);
      // Every frame the prune wrote is already in the database file: the agent's checkpoint has nothing to copy.
      const wal = walIndex(path);
      expect(wal.mxFrame).toBeGreaterThan(0);
      expect(wal.nBackfill).toBe(wal.mxFrame);
    } finally {
      store.close();
    }
  });
});

describe('quiet from the first batch when the store\'s files show no write for half a second', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  // 15,000 prunable rows. Quiet, the second batch may last 10 s and takes every row left: 2 batches (the first is
  // always 100 rows, for a cold cache). Not quiet, batches last 1 ms until half a second after the last write.
  const settings = { batchSize: 100_000, batchMs: 1, quietBatchMs: 10_000, pauseMs: 1 };
  const rows = (): Row[] => Array.from({ length: 20_000 }, (_, i) => ({ id: `r${i}`, expires_at: i % 4 === 0 ? null : '2026-01-01 00:00:00' }));
  // The prune's clocks, taken off the machine's load: Date.now() stands still at T (the files' times are set from it)
  // and performance.now() moves 0.1 ms at each reading. Whether half a second passes without a write, and when a
  // batch has had its time, then depends on what the prune did, not on how long a loaded machine took to do it.
  const T = Date.now();
  const run = async (db: string) => {
    const wall = vi.spyOn(Date, 'now').mockReturnValue(T);
    let t = 0;
    const monotonic = vi.spyOn(performance, 'now').mockImplementation(() => (t += 0.1));
    try {
      return await prune({ store: 't', dryRun: false }, {
        config: loadConfig({ overrides: { stateDb: join(dir, 's.db'), stores: { t: { db } }, prune: settings } }),
        log: silentLogger, now: () => Date.UTC(2026, 10, 29), signal: new AbortController().signal,
      });
    } finally {
      wall.mockRestore();
      monotonic.mockRestore();
    }
  };
  const age = (file: string, seconds: number) => {
    const at = T / 1000 - seconds;
    utimesSync(file, at, at);
  };

  it('a store last written ten seconds ago: long batches at once', async () => {
    const db = makeStore(join(dir, 'm.db'), rows());
    age(db, 10);
    const result = await run(db);
    expect(result.deleted).toBe(15_000);
    expect(result.batches).toBe(2);
  });

  it('a store written just now, or whose clock says later: short batches first', async () => {
    for (const seconds of [0, -3600]) {
      const db = makeStore(join(dir, `m${seconds}.db`), rows());
      age(db, seconds);
      const result = await run(db);
      expect(result.deleted).toBe(15_000);
      expect(result.batches).toBeGreaterThan(2);
    }
  });

  it('the WAL holds an agent\'s commit from just now: short batches first, though the file itself is old', async () => {
    const db = makeStore(join(dir, 'm.db'), rows());
    const agent = new Database(db);
    agent.pragma('wal_autocheckpoint = 0');
    agent.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES ('agent_1', 's', 'f', 'agent')`).run();
    age(db, 10);
    expect(statSync(`${db}-wal`).size).toBeGreaterThan(0);
    try {
      const result = await run(db);
      expect(result.deleted).toBe(15_000);
      expect(result.batches).toBeGreaterThan(2);
    } finally {
      agent.close();
    }
  });

  it('an empty WAL says nothing (opening the store made it), nor does a rollback journal\'s absence', async () => {
    const wal = makeStore(join(dir, 'wal.db'), rows());
    const open = new Database(wal); // creates an empty WAL, as any connection does
    open.prepare('SELECT count(*) FROM memory').get();
    expect(statSync(`${wal}-wal`).size).toBe(0);
    age(wal, 10);
    const rollback = makeStore(join(dir, 'rollback.db'), rows());
    const r = new Database(rollback);
    r.pragma('journal_mode = DELETE');
    r.close();
    age(rollback, 10);
    try {
      for (const db of [wal, rollback]) {
        const result = await run(db);
        expect(result.deleted, db).toBe(15_000);
        expect(result.batches, db).toBe(2);
      }
    } finally {
      open.close();
    }
  });
});
