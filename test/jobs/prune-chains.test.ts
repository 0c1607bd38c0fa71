import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { makeStore, ids, tempDir, type Row } from '../helpers/store.js';
import { addChain, assertValid } from '../helpers/chains.js';
import { prune } from '../../jobs/prune.js';
import { loadConfig, type Config } from '../../src/config/config.js';
import { silentLogger } from '../../src/log/logger.js';
import { erase } from '../../src/erase/erase.js';
import { repairDangling } from '../../src/layouts/warden/repair.js';
import { deleteMemory } from '../../src/drift/review.js';
import { openStore } from '../../src/layouts/open.js';
import { openStateDb } from '../../src/state/state.js';

const NOW = Date.UTC(2026, 10, 29, 12, 0, 0);
const RECENT = '2026-11-01 00:00:00';
const LONG_AGO = '2025-01-01 00:00:00';

/** Rows no chain touches: 40 expired (they must go too), 40 live, 40 short chains of two whose head expired. */
function unrelated(): { rows: Row[]; doomed: string[] } {
  const rows: Row[] = [];
  for (let i = 0; i < 40; i++) {
    rows.push({ id: `exp${i}`, expires_at: '2026-11-28 00:00:00' }, { id: `live${i}` });
    rows.push({ id: `sh${i}`, expires_at: '2026-11-28 00:00:00' }, { id: `sho${i}`, superseded_by: `sh${i}`, created_at: RECENT });
  }
  return { rows, doomed: rows.filter((r) => !r.id.startsWith('live')).map((r) => r.id) };
}

describe('maintenance of a store with long supersede chains', () => {
  let dir: string;
  let cleanup: () => void;
  let db: string;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  const config = (extra: object = {}): Config => loadConfig({ overrides: { stateDb: join(dir, 'state.db'), stores: { t: { db } }, ...extra } });
  const ctx = (extra: object = {}) => ({ config: config(extra), log: silentLogger, now: () => NOW, signal: new AbortController().signal });

  for (const length of [1001, 100_000]) {
    it(`prune: a ${length}-version chain behind an expired head goes whole, unrelated expired rows too; dry run = real run`, async () => {
      const { rows, doomed } = unrelated();
      db = makeStore(join(dir, 'm.db'), rows);
      // A: the head expired, every version recent: only the head is a candidate, the rest is its cascade.
      const a = addChain(db, { prefix: 'a', length, newestFirst: true, headExpiresAt: '2026-11-20 00:00:00', createdAt: RECENT });
      // B: a live head, every older version superseded long ago: each one a candidate of its own.
      const b = addChain(db, { prefix: 'b', length: 1001, newestFirst: true, createdAt: LONG_AGO });
      // C: the same as A, inserted oldest first.
      const c = addChain(db, { prefix: 'c', length: 1001, headExpiresAt: '2026-11-20 00:00:00', createdAt: RECENT });
      const expected = new Set([...doomed, ...a, ...b.slice(1), ...c]);

      const dry = await prune({ store: 't', dryRun: true }, ctx());
      const real = await prune({ store: 't', dryRun: false }, ctx());
      expect(new Set(ids(db))).toEqual(new Set([...rows.map((r) => r.id), 'b0'].filter((id) => !expected.has(id))));
      expect(real).toMatchObject({ deleted: expected.size, expired: 80 + 2, superseded: 1000, cascaded: 40 + (length - 1) + 1000 });
      expect({ ...dry, dryRun: false, durationMs: 0, batches: 0, ids: [] }).toEqual({ ...real, durationMs: 0, batches: 0, ids: [] });
      assertValid(db);
    }, 120_000);
  }

  it('erase --ids: a 100,000-version chain and a 1,001-version chain, named by one version each', async () => {
    const { rows } = unrelated();
    db = makeStore(join(dir, 'm.db'), rows);
    const a = addChain(db, { prefix: 'a', length: 100_000, newestFirst: true });
    const c = addChain(db, { prefix: 'c', length: 1001 });
    const opts = { now: () => NOW, log: silentLogger };
    const dry = await erase(config(), 't', { ids: ['a0', 'c0', 'live0'] }, { ...opts, dryRun: true });
    const r = await erase(config(), 't', { ids: ['a0', 'c0', 'live0'] }, opts);
    expect(r.memories).toBe(a.length + c.length + 1);
    expect(r.counts).toMatchObject({ rows: 101_002, cascaded: 100_999 });
    expect(dry.counts).toMatchObject({ rows: 101_002, cascaded: 100_999 });
    expect(new Set(ids(db))).toEqual(new Set(rows.map((row) => row.id).filter((id) => id !== 'live0')));
    assertValid(db);
  }, 120_000);

  it('review delete: a 1,001-version chain goes, every version recorded as deleted', async () => {
    db = makeStore(join(dir, 'm.db'), [{ id: 'keep' }]);
    const c = addChain(db, { prefix: 'c', length: 1001, newestFirst: true });
    const cfg = config();
    const store = openStore(cfg, 't');
    const state = openStateDb(cfg.stateDb);
    try {
      const d = await deleteMemory(store, state, 'c0', NOW);
      expect(new Set(d.deleted)).toEqual(new Set(c));
      const recorded = state.prepare(`SELECT count(DISTINCT memory_id) FROM drift_verdicts WHERE verdict = 'manual' AND resolution = 'deleted'`).pluck().get();
      expect(recorded).toBe(1001);
      expect(state.inTransaction).toBe(false);
    } finally {
      state.close();
      store.close();
    }
    expect(ids(db)).toEqual(['keep']);
  });

  it('repair dangling: a 1,001-version chain whose head points at a deleted row goes whole, with 3,000 other dangling rows', async () => {
    const others: Row[] = Array.from({ length: 3000 }, (_, i) => ({ id: `d${i}`, superseded_by: `gone${i % 7}` }));
    db = makeStore(join(dir, 'm.db'), [{ id: 'keep' }, { id: 'keep_old', superseded_by: 'keep' }, ...others]);
    const c = addChain(db, { prefix: 'c', length: 1001, headSupersededBy: 'gone' });
    const store = openStore(config(), 't');
    try {
      const r = await repairDangling(store);
      expect(new Set(r.dangling)).toEqual(new Set(['c0', ...others.map((o) => o.id)]));
      expect(new Set(r.cascaded)).toEqual(new Set(c.slice(1)));
    } finally {
      store.close();
    }
    expect(ids(db)).toEqual(['keep', 'keep_old']);
    assertValid(db);
  });

  it('prune: rings of versions (an agent pointing them at each other) go, with what hangs off them', async () => {
    db = makeStore(join(dir, 'm.db'), [{ id: 'keep' }]);
    // Every version of the ring is superseded and created long ago: all are candidates.
    const r = addChain(db, { prefix: 'r', length: 1500, headSupersededBy: 'r1499', createdAt: LONG_AGO });
    const t = addChain(db, { prefix: 't', length: 1200, headSupersededBy: 'r3', createdAt: RECENT });
    const dry = await prune({ store: 't', dryRun: true }, ctx());
    const real = await prune({ store: 't', dryRun: false }, ctx());
    expect(ids(db)).toEqual(['keep']);
    expect(real.deleted).toBe(r.length + t.length);
    expect({ ...dry, dryRun: false, durationMs: 0, batches: 0, ids: [] }).toEqual({ ...real, durationMs: 0, batches: 0, ids: [] });
  });
});
