import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import { makeStore, ids, tempDir, type Row } from '../helpers/store.js';
import { cli } from '../helpers/cli.js';
import { prune } from '../../jobs/prune.js';
import { loadConfig } from '../../src/config/config.js';
import { silentLogger } from '../../src/log/logger.js';
import { openDatabase } from '../../src/store/sqlite.js';
import { heavyRoots } from '../../src/layouts/warden/prune.js';

const NOW = Date.UTC(2026, 10, 29, 12, 0, 0);
const DAY = 86_400_000;

/** A small deterministic PRNG so the mixed fixture is the same on every run. */
function rng(seed: number) {
  return () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
}

/** Writes an instant in one of the forms agents use. */
function writeTime(ms: number, form: number): string {
  const iso = new Date(ms).toISOString();
  switch (form % 5) {
    case 0: return `${iso.slice(0, 10)} ${iso.slice(11, 19)}`;
    case 1: return iso.slice(0, 19) + 'Z';
    case 2: return iso;
    case 3: { // +02:00 offset
      const local = new Date(ms + 2 * 3_600_000).toISOString();
      return `${local.slice(0, 19)}+02:00`;
    }
    default: { // -05:30 offset, fractional
      const local = new Date(ms - 5.5 * 3_600_000).toISOString();
      return `${local.slice(0, 23)}-05:30`;
    }
  }
}

const instant = (t: string | null | undefined) => {
  if (!t) return NaN;
  let s = t.replace(' ', 'T');
  if (!/[zZ]|[+-]\d\d:\d\d$/.test(s)) s += 'Z';
  return Date.parse(s);
};
const expiredRow = (r: Row) => instant(r.expires_at) <= NOW;
const supersededRow = (r: Row, supersededDays: number) => !!r.superseded_by && instant(r.created_at) < NOW - supersededDays * DAY;

/** Reference by another route: Date.parse on a normalised string, closure by walking parents in JS. */
function referenceDeleted(rows: Row[], supersededDays: number): Set<string> {
  const byId = new Map(rows.map((r) => [r.id, r]));
  const roots = rows.filter((r) => expiredRow(r) || supersededRow(r, supersededDays));
  const doomed = new Set(roots.map((r) => r.id));
  let grew = true;
  while (grew) {
    grew = false;
    for (const r of rows) {
      if (!doomed.has(r.id) && r.superseded_by && doomed.has(r.superseded_by) && byId.has(r.superseded_by)) {
        doomed.add(r.id);
        grew = true;
      }
    }
  }
  return doomed;
}

function mixedFixture(n: number): Row[] {
  const rand = rng(42);
  const rows: Row[] = [];
  for (let i = 0; i < n; i++) {
    const id = `m_${String(i).padStart(5, '0')}`;
    const created = NOW - Math.floor(rand() * 400) * DAY - Math.floor(rand() * DAY);
    const r: Row = { id, created_at: writeTime(created, Math.floor(rand() * 5)) };
    const kind = rand();
    // Expiries cluster around now: the hours either side are where text comparison goes wrong.
    if (kind < 0.35) r.expires_at = writeTime(NOW + Math.floor((rand() - 0.5) * 2 * DAY), Math.floor(rand() * 5));
    if (i > 10 && rand() < 0.25) r.superseded_by = `m_${String(Math.floor(rand() * i)).padStart(5, '0')}`;
    if (rand() < 0.01) r.superseded_by = `gone_${i}`; // dangling
    if (rand() < 0.01) r.expires_at = 'next tuesday'; // unparseable: never expires
    rows.push(r);
  }
  return rows;
}

describe('prune', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  const config = (db: string, extra: object = {}) =>
    loadConfig({ overrides: { stateDb: join(dir, 'state.db'), stores: { t: { db } }, ...extra } });
  const ctx = (db: string, extra: object = {}) => ({
    config: config(db, extra), log: silentLogger, now: () => NOW, signal: new AbortController().signal,
  });

  it('deletes exactly the expired and long-superseded rows with their cascade, across timestamp forms', async () => {
    const rows = mixedFixture(3000);
    const db = makeStore(join(dir, 'm.db'), rows);
    const expected = referenceDeleted(rows, 180);
    const before = new Set(ids(db));
    const result = await prune({ store: 't', dryRun: false }, ctx(db, { prune: { batchSize: 97 } }));
    const after = new Set(ids(db));
    const deleted = [...before].filter((id) => !after.has(id));
    expect(new Set(deleted)).toEqual(expected);
    expect(result.deleted).toBe(expected.size);
    expect(result.expired + result.superseded + result.cascaded).toBe(result.deleted);
    expect(result.cascaded).toBeGreaterThan(0);
    expect(result.batches).toBeGreaterThan(1);
    expect(after.has(rows.find((r) => r.expires_at === 'next tuesday' && !r.superseded_by)!.id)).toBe(true);
  });

  it('deletes the same rows when every batch runs out of time after one chunk', async () => {
    const rows = mixedFixture(1500);
    const db = makeStore(join(dir, 'm.db'), rows);
    const expected = referenceDeleted(rows, 180);
    const before = new Set(ids(db));
    const result = await prune({ store: 't', dryRun: false }, ctx(db, { prune: { batchMs: 0.001, pauseMs: 0 } }));
    const after = new Set(ids(db));
    expect(new Set([...before].filter((id) => !after.has(id)))).toEqual(expected);
    expect(result.deleted).toBe(expected.size);
    expect(result.expired + result.superseded + result.cascaded).toBe(result.deleted);
    expect(result.batches).toBeGreaterThan(1);
  });

  /**
   * Rows that many others are superseded by, among the mixed fixture's: an expired one (its cascade goes with it),
   * one nested under it, a live one (only its own expired children go), a ring of two (an agent pointing versions
   * at each other), and rows with children that expire or are superseded themselves.
   */
  function withHeavyRows(n: number): Row[] {
    const rows = mixedFixture(n);
    const children = (parent: string, count: number, extra: (i: number) => Partial<Row> = () => ({})): Row[] =>
      Array.from({ length: count }, (_, i) => ({ id: `${parent}_c${i}`, superseded_by: parent, created_at: writeTime(NOW - 10 * DAY, i), ...extra(i) }));
    rows.push(
      { id: 'hub_expired', expires_at: writeTime(NOW - DAY, 1), created_at: writeTime(NOW - 20 * DAY, 0) },
      ...children('hub_expired', 40, (i) => (i % 7 === 0 ? { expires_at: writeTime(NOW - 3 * DAY, i) } : {})),
      { id: 'hub_nested', superseded_by: 'hub_expired', created_at: writeTime(NOW - 5 * DAY, 2) },
      ...children('hub_nested', 24),
      { id: 'hub_live', created_at: writeTime(NOW - 5 * DAY, 3) },
      ...children('hub_live', 30, (i) => (i % 3 === 0 ? { expires_at: writeTime(NOW - 2 * DAY, i) } : i % 5 === 0 ? { created_at: writeTime(NOW - 300 * DAY, i) } : {})),
      { id: 'ring_a', superseded_by: 'ring_b', expires_at: writeTime(NOW - DAY, 4) },
      { id: 'ring_b', superseded_by: 'ring_a' },
      ...children('ring_a', 17),
      ...children('ring_b', 18),
    );
    return rows;
  }

  it('counts the cascade of rows many others are superseded by, nested and in rings, once each', () => {
    const path = makeStore(join(dir, 'm.db'), withHeavyRows(300));
    const db = openDatabase(path);
    try {
      const rowid = (id: string) => db.prepare('SELECT rowid FROM memory WHERE id = ?').pluck().get(id) as number;
      const heavy = heavyRoots({ db });
      // hub_expired: its 41 rows (hub_nested among them) and hub_nested's 24; rows with fewer than 16 are not listed.
      expect(heavy.get(rowid('hub_expired'))).toBe(41 + 24);
      expect(heavy.get(rowid('hub_nested'))).toBe(24);
      expect(heavy.get(rowid('hub_live'))).toBe(30);
      // The ring: each counts its own rows (its partner among them) and the partner's (itself among them): every
      // row of the ring once, whichever is asked first.
      expect(heavy.get(rowid('ring_a'))).toBe(17 + 1 + 18 + 1);
      expect(heavy.get(rowid('ring_b'))).toBe(18 + 1 + 17 + 1);
      expect([...heavy.keys()].sort()).toEqual(['hub_expired', 'hub_nested', 'hub_live', 'ring_a', 'ring_b'].map(rowid).sort());
    } finally {
      db.close();
    }
  });

  for (const [name, settings] of [
    ['the default batches', {}],
    ['batches of one chunk', { batchMs: 0.001, pauseMs: 0 }],
    ['batches of a few roots', { batchSize: 7, pauseMs: 0 }],
    // The rows a cascade takes lie anywhere in the file: most outside the range of rowids whose candidates the
    // prune holds, and each still counts under the rule it met.
    ['candidates read 37 rowids at a time', { candidateRows: 37, pauseMs: 0 }],
    ['candidates read one rowid at a time', { candidateRows: 1, batchSize: 7, pauseMs: 0 }],
  ] as const) {
    it(`deletes exactly the rows the rules select, with their cascade, beside rows many others are superseded by (${name})`, async () => {
      const rows = withHeavyRows(1500);
      const db = makeStore(join(dir, 'm.db'), rows);
      const expected = referenceDeleted(rows, 180);
      const dry = await prune({ store: 't', dryRun: true }, ctx(db, { prune: settings }));
      const before = new Set(ids(db));
      const result = await prune({ store: 't', dryRun: false }, ctx(db, { prune: settings }));
      const after = new Set(ids(db));
      expect(new Set([...before].filter((id) => !after.has(id)))).toEqual(expected);
      for (const id of ['hub_expired', 'hub_nested', 'hub_nested_c3', 'ring_a', 'ring_b', 'ring_b_c17', 'hub_live_c3']) expect(expected.has(id)).toBe(true);
      for (const id of ['hub_live', 'hub_live_c1']) expect(after.has(id)).toBe(true);
      expect(result.deleted).toBe(expected.size);
      const gone = rows.filter((r) => expected.has(r.id));
      const expired = gone.filter(expiredRow).length;
      const superseded = gone.filter((r) => !expiredRow(r) && supersededRow(r, 180)).length;
      expect([result.expired, result.superseded, result.cascaded]).toEqual([expired, superseded, expected.size - expired - superseded]);
      expect({ ...dry, dryRun: false, durationMs: 0, batches: 0, ids: [], idsTruncated: false }).toEqual({ ...result, durationMs: 0, batches: 0, ids: [], idsTruncated: false });
    });
  }

  it('dry run reports the same numbers and deletes nothing', async () => {
    const rows = mixedFixture(1500);
    const db = makeStore(join(dir, 'm.db'), rows);
    const bytes = readFileSync(db);
    const dry = await prune({ store: 't', dryRun: true }, ctx(db));
    expect(ids(db).length).toBe(rows.length);
    expect(readFileSync(db).equals(bytes)).toBe(true);
    const real = await prune({ store: 't', dryRun: false }, ctx(db));
    expect({ ...dry, dryRun: false, durationMs: 0, batches: 0, ids: [] }).toEqual({ ...real, durationMs: 0, batches: 0, ids: [] });
    expect(dry.deleted).toBe(referenceDeleted(rows, 180).size);
  });

  it('never expires a time that only looks canonical (an impossible date) or is not text', async () => {
    const db = makeStore(join(dir, 'm.db'), [
      { id: 'feb30', expires_at: '2026-02-30 10:00:00' },
      { id: 'nov31', expires_at: '2026-11-31 00:00:00' },
      { id: 'hour24', expires_at: '2026-11-28 24:00:00' },
      { id: 'month13', expires_at: '2026-13-01 00:00:00' },
      { id: 'expired', expires_at: '2026-11-28 10:00:00' },
      { id: 'expired_z', expires_at: '2026-11-28T10:00:00.250Z' },
    ]);
    const raw = new Database(db);
    raw.prepare(`INSERT INTO memory (id, subject, fact, source, expires_at) VALUES ('epoch_int', 'user', 'f', 's', 1700000000)`).run();
    raw.close();
    const result = await prune({ store: 't', dryRun: false }, ctx(db));
    // 24:00:00 is an instant (the midnight that ends Nov 28), as SQLite's julianday() and so live_memory read it.
    expect(ids(db).sort()).toEqual(['epoch_int', 'feb30', 'month13', 'nov31']);
    expect(result).toMatchObject({ deleted: 3, expired: 3 });
  });

  it('lets ON DELETE CASCADE take the older versions and never resurrects a dangling row', async () => {
    const db = makeStore(join(dir, 'm.db'), [
      { id: 'm_0140', fact: 'prefers npm', superseded_by: 'm_0207', created_at: '2026-11-01 00:00:00' },
      { id: 'm_0207', fact: 'prefers pnpm', expires_at: '2026-11-29T11:59:59Z' },
      { id: 'm_0300', fact: 'uses yarn', superseded_by: 'deleted_with_fk_off', created_at: '2026-11-20 00:00:00' },
      { id: 'm_0400', fact: 'fresh' },
    ]);
    const result = await prune({ store: 't', dryRun: false }, ctx(db));
    expect(ids(db)).toEqual(['m_0300', 'm_0400']);
    expect(result).toMatchObject({ deleted: 2, expired: 1, superseded: 0, cascaded: 1 });
    const raw = new Database(db, { readonly: true });
    expect(raw.prepare(`SELECT superseded_by FROM memory WHERE id = 'm_0300'`).get()).toEqual({ superseded_by: 'deleted_with_fk_off' });
    raw.close();
  });

  it('honours configured retention', async () => {
    const db = makeStore(join(dir, 'm.db'), [
      { id: 'a', created_at: '2026-10-01 00:00:00', superseded_by: 'b' },
      { id: 'b', expires_at: '2026-12-01 00:00:00' },
    ]);
    await prune({ store: 't', dryRun: false }, ctx(db, { prune: { supersededAfterDays: 30, expired: false } }));
    expect(ids(db)).toEqual(['b']);
  });

  it('runs from the CLI with --now, --dry-run and --json', () => {
    const db = makeStore(join(dir, 'm.db'), [{ id: 'a', expires_at: '2026-11-29T10:00:00Z' }, { id: 'b' }]);
    const env = { MEMORY_WARDEN_STATE: join(dir, 'state.db') };
    const dry = cli(['run', 'prune', '--db', db, '--now', '2026-11-29T12:00:00Z', '--dry-run', '--json'], env);
    expect(dry.code).toBe(0);
    expect(dry.json()).toMatchObject({ deleted: 1, expired: 1, superseded: 0, cascaded: 0, dryRun: true, ids: ['a'] });
    expect(ids(db)).toEqual(['a', 'b']);
    const early = cli(['run', 'prune', '--db', db, '--now', '2026-11-29T09:59:59Z', '--json'], env);
    expect(early.json()).toMatchObject({ deleted: 0 });
    const real = cli(['run', 'prune', '--db', db, '--now', '2026-11-29T12:00:00Z', '--json'], env);
    expect(real.json()).toMatchObject({ deleted: 1, dryRun: false });
    expect(ids(db)).toEqual(['b']);
  });

  it('refuses a bad --now with exit 2 and deletes nothing', () => {
    const db = makeStore(join(dir, 'm.db'), [{ id: 'a', expires_at: '2020-01-01 00:00:00' }]);
    const r = cli(['run', 'prune', '--db', db, '--now', 'yesterday-ish'], { MEMORY_WARDEN_STATE: join(dir, 'state.db') });
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(ids(db)).toEqual(['a']);
  });
});
