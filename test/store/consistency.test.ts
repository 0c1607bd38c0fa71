import { afterEach, describe, expect, it } from 'vitest';
import { JOBS } from '../../jobs/index.js';
import Database from 'better-sqlite3';
import { runJob } from '../../src/job/runner.js';
import { silentLogger } from '../../src/log/logger.js';
import { openStore } from '../../src/layouts/open.js';
import { checkConsistency, repairOrphans, type ConsistencyReport } from '../../src/layouts/warden/consistency.js';
import { QdrantStore, type PointId } from '../../src/vectors/qdrant/index.js';
import { initSchema, MEMORY_DDL } from '../../src/layouts/warden/schema.js';
import { insertRows, type Row } from '../helpers/store.js';
import { qdrantFixture, type QdrantFixture } from '../helpers/qdrant-store.js';
import type { Config } from '../../src/config/config.js';
import type { Finding } from '../../src/job/findings.js';

const NOW = Date.parse('2026-11-29T06:00:00Z');
const rows = (n: number, prefix = 'm'): Row[] => Array.from({ length: n }, (_, i) => ({ id: `${prefix}_${String(i).padStart(3, '0')}` }));

let fx: QdrantFixture;
afterEach(async () => fx.close());

async function consistency(config: Config, pageSize = 7) {
  const store = openStore(config, 'agent');
  try {
    return await checkConsistency(store.db, store.vectors as QdrantStore, { now: NOW, pageSize });
  } finally {
    store.close();
  }
}
const byCode = (fs: Finding[], code: string) => fs.find((f) => f.code === code);

describe('consistency check', () => {
  it('a matching pair of stores has no findings, over many pages', async () => {
    const all = rows(40);
    fx = await qdrantFixture(all, { collections: 2 });
    await fx.seedPoints(all, { chunks: ['m_003'] });
    const r = await consistency(fx.config());
    expect(r.findings).toEqual([]);
    expect(r.liveRows).toBe(40);
    expect(r.collections.map((c) => c.points)).toEqual([41, 41]);
  });

  it('finds orphan points, rows without a point and payload text that differs', async () => {
    const all = rows(30);
    fx = await qdrantFixture(all, { collections: 2 });
    await fx.seedPoints([...all.slice(0, 25), { id: 'deleted_1' }, { id: 'deleted_2' }, { id: 'm_026', fact: 'prefers npm' }]);
    await fx.seedPoints([{ id: 'm_027' }], { collections: [fx.collections[0]!] }); // only in the first collection
    const r = await consistency(fx.config());
    const orphans = byCode(r.findings, 'orphan_points')!;
    expect(orphans).toMatchObject({ severity: 'error', count: 4 });
    expect(orphans.ids!.every((id) => fx.collections.some((c) => id.startsWith(`${c}:`)))).toBe(true);
    const missing = byCode(r.findings, 'missing_points')!;
    expect(missing).toMatchObject({ severity: 'warning', count: 4 });
    expect([...missing.ids!].sort()).toEqual(['m_025', 'm_027', 'm_028', 'm_029']);
    const mismatch = byCode(r.findings, 'payload_mismatch')!;
    expect(mismatch.count).toBe(2);
    expect(mismatch.ids!.join()).toContain('row m_026');
    expect(r.collections[0]).toMatchObject({ orphanPoints: 2, missingPoints: 3, payloadMismatch: 1 });
    expect(r.collections[1]).toMatchObject({ orphanPoints: 2, missingPoints: 4, payloadMismatch: 1 });
  });

  it('expectPoints any: a row in one of the collections is not missing; none: only orphans are looked for', async () => {
    const all = rows(4);
    fx = await qdrantFixture(all, { collections: 2 });
    await fx.seedPoints(all.slice(0, 2), { collections: [fx.collections[0]!] });
    await fx.seedPoints(all.slice(2, 3), { collections: [fx.collections[1]!] });
    const any = await consistency(fx.config({ qdrant: { expectPoints: 'any' } }));
    expect(byCode(any.findings, 'missing_points')).toMatchObject({ count: 1, ids: ['m_003'] });
    const none = await consistency(fx.config({ qdrant: { expectPoints: 'none' } }));
    expect(none.findings).toEqual([]);
  });

  it('only live rows need a point; superseded and expired rows may have lost theirs', async () => {
    fx = await qdrantFixture([{ id: 'new' }, { id: 'old', superseded_by: 'new' }, { id: 'gone', expires_at: '2026-11-01 00:00:00' }]);
    await fx.seedPoints([{ id: 'new' }]);
    expect((await consistency(fx.config())).findings).toEqual([]);
  });

  it('points naming no row are reported, not called orphans', async () => {
    fx = await qdrantFixture(rows(1));
    await fx.seedPoints(rows(1));
    await fx.q.upsert(fx.collections[0]!, [{ id: 900, payload: { other: 'x' } }]);
    const r = await consistency(fx.config());
    expect(byCode(r.findings, 'orphan_points')).toBeUndefined();
    expect(byCode(r.findings, 'unmapped_points')).toMatchObject({ count: 1, ids: [`${fx.collections[0]}:900`] });
  });

  it('uuid5 and id mappings', async () => {
    const all = [{ id: '1' }, { id: '2' }, { id: '3' }];
    fx = await qdrantFixture(all);
    const c = fx.collections[0]!;
    await fx.q.upsert(c, [{ id: 1, payload: { text: 'fact of 1' } }, { id: 2, payload: { text: 'fact of 2' } }, { id: 77, payload: {} }]);
    const r = await consistency(fx.config({ qdrant: { pointId: 'id' } }));
    expect(byCode(r.findings, 'orphan_points')).toMatchObject({ count: 1, ids: [`${c}:77`] });
    expect(byCode(r.findings, 'missing_points')).toMatchObject({ count: 1, ids: ['3'] });
  });

  it('the integrity job reports the findings and fails on orphans', async () => {
    fx = await qdrantFixture(rows(3));
    await fx.seedPoints([...rows(3), { id: 'deleted' }]);
    const report = (await runJob('integrity', { store: 'agent' }, { jobs: JOBS, config: fx.config(), log: silentLogger, now: () => NOW, record: false })) as {
      ok: boolean; problems: Finding[]; vectors: { collections: { points: number }[] };
    };
    expect(report.ok).toBe(false);
    expect(report.problems.map((f) => f.code)).toContain('orphan_points');
    expect(report.vectors.collections[0]!.points).toBe(4);
  });
});

describe('repair orphans', () => {
  it('deletes orphan points only, in every collection; dry run deletes nothing', async () => {
    const all = rows(20);
    fx = await qdrantFixture(all, { collections: 2 });
    await fx.seedPoints([...all, { id: 'x_1' }, { id: 'x_2' }, { id: 'x_3' }], { chunks: ['x_2'] });
    const store = openStore(fx.config(), 'agent');
    try {
      const dry = await repairOrphans(store, { dryRun: true, pageSize: 6 });
      expect(dry.deleted).toBe(8);
      expect((await fx.pointRows()).length).toBe(24);
      const r = await repairOrphans(store, { pageSize: 6 });
      expect(r.collections.map((c) => c.deleted)).toEqual([4, 4]);
      for (const c of fx.collections) expect(await fx.pointRows(c)).toEqual(all.map((x) => x.id));
    } finally {
      store.close();
    }
  });

  it('keeps the point of a row the agent wrote between the first look and the delete', async () => {
    fx = await qdrantFixture(rows(2));
    await fx.seedPoints([...rows(2), { id: 'late' }]);
    const store = openStore(fx.config(), 'agent');
    // The agent's row lands right after repair's first lookup of the page found 'late' missing.
    const prepare = store.db.prepare.bind(store.db);
    let lookups = 0;
    store.db.prepare = ((sql: string) => {
      const stmt = prepare(sql);
      if (!sql.includes('json_each')) return stmt;
      const all = stmt.all.bind(stmt);
      return Object.assign(Object.create(stmt), {
        all: (...args: unknown[]) => {
          const out = all(...(args as [string]));
          if (++lookups === 1) {
            const agent = new Database(fx.dbPath);
            insertRows(agent, [{ id: 'late' }]);
            agent.close();
          }
          return out;
        },
      });
    }) as typeof store.db.prepare;
    try {
      const r = await repairOrphans(store);
      expect(lookups).toBe(2);
      expect(r.deleted).toBe(0);
      expect(await fx.pointRows()).toEqual(['late', 'm_000', 'm_001']);
    } finally {
      store.close();
    }
  });
});

// The two ways rows → points is settled: from the bits the scroll set (a row whose bit is unset is asked about in
// Qdrant), or, without the bits (WITHOUT ROWID, rowids too sparse), every live row asked about. Each test records
// which rows were asked about (the real QdrantStore, its rowsWithPoints wrapped to note the ids), so it can tell
// which path it went down as well as what it found.

const MODES = ['payload', 'id', 'uuid5'] as const;
type Mode = (typeof MODES)[number];
/** Row ids every mapping can use (`pointId: id` needs unsigned integers). */
const numbered = (n: number, from = 101): Row[] => Array.from({ length: n }, (_, i) => ({ id: String(from + i) }));
const idsOf = (list: Row[]) => list.map((r) => r.id);
const sorted = (ids: readonly string[]) => [...ids].sort();

let payloadPoint = 5000;
/** A point per row in `mode`'s mapping (payload memory_id + text either way); the point id of each row. */
async function seedMode(fx: QdrantFixture, mode: Mode, list: Row[], collections: readonly string[] = fx.collections): Promise<Map<string, PointId>> {
  const q = new QdrantStore(fx.config({ qdrant: { pointId: mode } }).stores.agent!.qdrant!);
  const ids = new Map(list.map((r) => [r.id, q.pointIdFor(r.id) ?? payloadPoint++] as const));
  for (const c of collections) {
    await fx.q.upsert(c, list.map((r) => ({ id: ids.get(r.id)!, payload: { memory_id: r.id, text: r.fact ?? `fact of ${r.id}` } })));
  }
  return ids;
}

/** The fixture's store rebuilt as a WITHOUT ROWID table with the same columns (the schema check accepts it). */
function rebuildWithoutRowid(path: string, list: Row[]): void {
  const db = new Database(path);
  try {
    db.exec('DROP VIEW IF EXISTS live_memory; DROP TABLE memory;');
    const ddl = MEMORY_DDL.replace(/\);\s*$/, ') WITHOUT ROWID;');
    expect(ddl).toContain('WITHOUT ROWID');
    db.exec(ddl);
    initSchema(db, path);
    insertRows(db, list);
    expect(() => db.prepare('SELECT rowid FROM memory').all()).toThrow(/rowid/);
  } finally {
    db.close();
  }
}

/** Gives the rows (in id order) these rowids. */
function setRowids(path: string, rowids: number[]): void {
  const db = new Database(path);
  try {
    const ids = (db.prepare('SELECT id FROM memory ORDER BY id').all() as { id: string }[]).map((r) => r.id);
    expect(ids.length).toBe(rowids.length);
    db.transaction(() => {
      db.prepare('UPDATE memory SET rowid = -rowid').run(); // out of the way of the new ones
      const set = db.prepare('UPDATE memory SET rowid = ? WHERE id = ?');
      ids.forEach((id, i) => set.run(rowids[i], id));
    })();
  } finally {
    db.close();
  }
}

interface Traced {
  report: ConsistencyReport;
  /** Per collection, the row ids asked about in Qdrant (rowsWithPoints), sorted. */
  asked: string[][];
}

/** checkConsistency on the real store; `afterScroll` runs once the last page of the last collection is fetched. */
async function traced(config: Config, opts: { pageSize?: number; afterScroll?: () => Promise<void> } = {}): Promise<Traced> {
  const store = openStore(config, 'agent');
  const q = store.vectors as QdrantStore;
  const asked = q.collections.map(() => [] as string[]);
  const rowsWithPoints = q.rowsWithPoints.bind(q);
  q.rowsWithPoints = async (collection, rowIds) => {
    asked[q.collections.indexOf(collection)]!.push(...rowIds);
    return rowsWithPoints(collection, rowIds);
  };
  if (opts.afterScroll) {
    const scrollPage = q.scrollPage.bind(q);
    const last = q.collections[q.collections.length - 1];
    let done = false;
    q.scrollPage = async (collection, ...rest) => {
      const page = await scrollPage(collection, ...rest);
      if (!done && collection === last && page.next === null) {
        done = true;
        await opts.afterScroll!();
      }
      return page;
    };
  }
  try {
    const report = await checkConsistency(store.db, q, { now: NOW, pageSize: opts.pageSize ?? 4 });
    if (opts.afterScroll) expect(asked.flat().length, 'afterScroll ran before the rows were asked about').toBeGreaterThan(0);
    return { report, asked: asked.map(sorted) };
  } finally {
    store.close();
  }
}

/**
 * Rows 101..112 (and 120, superseded: needs no point) in two collections: 101..108 and 110 in both (110's text
 * stale), 109 only in the first, 111 and 112 in neither; points of rows 901 and 902, which do not exist, in both.
 */
const LIVE = numbered(12);
const SCENARIO_ROWS: Row[] = [...LIVE, { id: '120', superseded_by: '101' }];
async function seedScenario(fx: QdrantFixture, mode: Mode): Promise<Map<string, PointId>> {
  return new Map([
    ...await seedMode(fx, mode, [...numbered(8), { id: '110', fact: 'stale text' }, { id: '901' }, { id: '902' }]),
    ...await seedMode(fx, mode, [{ id: '109' }], [fx.collections[0]!]),
  ]);
}

function expectScenarioFindings(fx: QdrantFixture, pid: Map<string, PointId>, r: ConsistencyReport): void {
  const [c0, c1] = fx.collections as [string, string];
  expect(r.liveRows).toBe(12);
  expect(r.unmappableRows).toBe(0);
  expect(r.findings.map((f) => f.code).sort()).toEqual(['missing_points', 'orphan_points', 'payload_mismatch']);
  const orphans = byCode(r.findings, 'orphan_points')!;
  expect(orphans.count).toBe(4);
  expect(sorted(orphans.ids!)).toEqual(sorted([c0, c1].flatMap((c) => [`${c}:${pid.get('901')}`, `${c}:${pid.get('902')}`])));
  const missing = byCode(r.findings, 'missing_points')!;
  expect(missing.count).toBe(3);
  expect(sorted(missing.ids!)).toEqual(['109', '111', '112']);
  const mismatch = byCode(r.findings, 'payload_mismatch')!;
  expect(mismatch.count).toBe(2);
  expect(sorted(mismatch.ids!)).toEqual(sorted([c0, c1].map((c) => `${c}:${pid.get('110')} (row 110)`)));
  expect(r.collections).toEqual([
    { collection: c0, points: 12, orphanPoints: 2, missingPoints: 2, payloadMismatch: 1, unmappedPoints: 0 },
    { collection: c1, points: 11, orphanPoints: 2, missingPoints: 3, payloadMismatch: 1, unmappedPoints: 0 },
  ]);
}

describe.each(MODES)('consistency with and without row marks (pointId: %s)', (mode) => {
  const config = () => fx.config({ qdrant: { pointId: mode } });

  it('dense rowids: the rows whose point the scroll saw are not asked about again', async () => {
    fx = await qdrantFixture(SCENARIO_ROWS, { collections: 2 });
    const pid = await seedScenario(fx, mode);
    const { report, asked } = await traced(config());
    expectScenarioFindings(fx, pid, report);
    expect(asked).toEqual([['111', '112'], ['109', '111', '112']]);
  });

  it('a WITHOUT ROWID memory table: every live row is asked about, page by page, with the same findings', async () => {
    fx = await qdrantFixture([], { collections: 2 });
    rebuildWithoutRowid(fx.dbPath, SCENARIO_ROWS);
    const pid = await seedScenario(fx, mode);
    const { report, asked } = await traced(config());
    expectScenarioFindings(fx, pid, report);
    expect(asked).toEqual([sorted(idsOf(LIVE)), sorted(idsOf(LIVE))]);
  });

  it('rowids 1, 10^9, 2·10^9 …: too sparse for the marks; every live row is asked about, with the same findings', async () => {
    fx = await qdrantFixture(SCENARIO_ROWS, { collections: 2 });
    setRowids(fx.dbPath, SCENARIO_ROWS.map((_, i) => (i === 0 ? 1 : i * 1e9)));
    const pid = await seedScenario(fx, mode);
    const { report, asked } = await traced(config());
    expectScenarioFindings(fx, pid, report);
    expect(asked).toEqual([sorted(idsOf(LIVE)), sorted(idsOf(LIVE))]);
  });

  /**
   * Rows 101..110 at the start. In both collections: 101..106, 107 (stale text), an orphan (901); 110 only in
   * the first; 108 and 109 in neither. Once the scroll has gone past, the agent writes: 108's points (row in the
   * marks' range, bit unset), row 111 with its points, row 112 with a point in the first collection only.
   */
  async function lateWrites(expectPoints: 'every' | 'any') {
    fx = await qdrantFixture(numbered(10), { collections: 2 });
    const [c0, c1] = fx.collections as [string, string];
    const pid = await seedMode(fx, mode, [...numbered(6), { id: '107', fact: 'stale text' }, { id: '901' }]);
    await seedMode(fx, mode, [{ id: '110' }], [c0]);
    let wrote = false;
    const afterScroll = async () => {
      const agent = new Database(fx.dbPath);
      insertRows(agent, [{ id: '111' }, { id: '112' }]);
      agent.close();
      await seedMode(fx, mode, [{ id: '108' }, { id: '111' }]);
      await seedMode(fx, mode, [{ id: '112' }], [c0]);
      wrote = true;
    };
    const { report, asked } = await traced(fx.config({ qdrant: { pointId: mode, expectPoints } }), { pageSize: 3, afterScroll });
    expect(wrote).toBe(true);
    expect(report.liveRows).toBe(12);
    // What the scroll saw is reported as ever; the late points were not scrolled.
    expect(byCode(report.findings, 'orphan_points')).toMatchObject({ count: 2, ids: [`${c0}:${pid.get('901')}`, `${c1}:${pid.get('901')}`] });
    expect(byCode(report.findings, 'payload_mismatch')).toMatchObject({ count: 2, ids: [`${c0}:${pid.get('107')} (row 107)`, `${c1}:${pid.get('107')} (row 107)`] });
    expect(report.collections.map((c) => c.points)).toEqual([9, 8]);
    return { report, asked, c0, c1 };
  }

  it('rows whose bit is unset but whose point Qdrant has (written after the scroll passed) are not missing', async () => {
    const { report, asked } = await lateWrites('every');
    // Only the rows without a set bit were asked about, each in the collections whose bit is unset.
    expect(asked).toEqual([['108', '109', '111', '112'], ['108', '109', '110', '111', '112']]);
    const missing = byCode(report.findings, 'missing_points')!;
    expect(missing.count).toBe(3);
    expect(sorted(missing.ids!)).toEqual(['109', '110', '112']);
    expect(report.collections.map((c) => c.missingPoints)).toEqual([1, 3]);
  });

  it('expectPoints any: a late point in one collection is enough', async () => {
    const { report, asked } = await lateWrites('any');
    // A row with its bit set in either collection is done; the others are asked about in both.
    expect(asked).toEqual([['108', '109', '111', '112'], ['108', '109', '111', '112']]);
    expect(byCode(report.findings, 'missing_points')).toMatchObject({ count: 1, ids: ['109'] });
    expect(report.collections.map((c) => c.missingPoints)).toEqual([1, 1]);
  });
});

describe('row marks: the cap on their size', () => {
  // MAX_MARKS in src/layouts/warden/consistency.ts: 2^28 bits, all collections together.
  const cases = [
    { collections: 1, span: 2 ** 28, marks: true },
    { collections: 1, span: 2 ** 28 + 1, marks: false },
    { collections: 2, span: 2 ** 27, marks: true },
    { collections: 2, span: 2 ** 27 + 1, marks: false },
  ];
  it.each(cases)('$collections collection(s), rowids spanning $span: marks $marks', async ({ collections, span, marks }) => {
    const all = numbered(3);
    fx = await qdrantFixture(all, { collections });
    setRowids(fx.dbPath, [1, Math.floor(span / 2), span]);
    await seedMode(fx, 'payload', all.slice(0, 2));
    const { report, asked } = await traced(fx.config());
    expect(byCode(report.findings, 'missing_points')).toMatchObject({ count: 1, ids: ['103'] });
    expect(report.findings).toHaveLength(1);
    for (const a of asked) expect(a).toEqual(marks ? ['103'] : ['101', '102', '103']);
  });
});

describe('payload mode: the bits vouch for what the lookup would find, no more', () => {
  it.each([{ table: 'rowid', withoutRowid: false }, { table: 'WITHOUT ROWID', withoutRowid: true }])(
    'a point whose memory_id is a number names its row for the scroll, not for the keyword lookup: missing ($table table)',
    async ({ withoutRowid }) => {
      const all = numbered(2);
      fx = await qdrantFixture(withoutRowid ? [] : all);
      if (withoutRowid) rebuildWithoutRowid(fx.dbPath, all);
      await seedMode(fx, 'payload', all.slice(0, 1));
      await fx.q.upsert(fx.collections[0]!, [{ id: 77, payload: { memory_id: 102, text: 'fact of 102' } }]);
      const { report, asked } = await traced(fx.config());
      expect(report.findings).toEqual([expect.objectContaining({ code: 'missing_points', count: 1, ids: ['102'] })]);
      expect(asked).toEqual([withoutRowid ? ['101', '102'] : ['102']]);
    },
  );
});

describe('an INTEGER PRIMARY KEY id (the rowid itself), pointId id', () => {
  /** The fixture's store rebuilt with `id INTEGER PRIMARY KEY`: each row's rowid is its id. */
  function rebuildIntegerIds(path: string, list: Row[]): void {
    const db = new Database(path);
    try {
      db.exec('DROP VIEW IF EXISTS live_memory; DROP TABLE memory;');
      const ddl = MEMORY_DDL.replace(/id\s+TEXT PRIMARY KEY/, 'id INTEGER PRIMARY KEY');
      expect(ddl).toContain('id INTEGER PRIMARY KEY');
      db.exec(ddl);
      initSchema(db, path);
      insertRows(db, list);
      expect(db.prepare('SELECT count(*) AS n FROM memory WHERE rowid = id AND typeof(id) = ?').get('integer')).toEqual({ n: list.length });
    } finally {
      db.close();
    }
  }

  it.each([
    { ids: [101, 102, 103, 104, 105], marks: true },
    { ids: [1, 1e9, 2e9, 3e9, 4e9], marks: false },
  ])('ids $ids: every live row is walked (marks $marks)', async ({ ids, marks }) => {
    const all = ids.map((n) => ({ id: String(n) }));
    fx = await qdrantFixture([]);
    rebuildIntegerIds(fx.dbPath, all);
    const c = fx.collections[0]!;
    // 1st and 2nd have their point (the 2nd's text stale), 3rd to 5th have none; point 9 names no row.
    await fx.q.upsert(c, [
      { id: ids[0]!, payload: { text: `fact of ${ids[0]}` } },
      { id: ids[1]!, payload: { text: 'stale text' } },
      { id: 9, payload: {} },
    ]);
    const { report, asked } = await traced(fx.config({ qdrant: { pointId: 'id' } }), { pageSize: 2 });
    expect(report.liveRows).toBe(5);
    expect(byCode(report.findings, 'orphan_points')).toMatchObject({ count: 1, ids: [`${c}:9`] });
    expect(byCode(report.findings, 'payload_mismatch')).toMatchObject({ count: 1, ids: [`${c}:${ids[1]} (row ${ids[1]})`] });
    expect(byCode(report.findings, 'missing_points')).toMatchObject({ count: 3 });
    expect(sorted(byCode(report.findings, 'missing_points')!.ids!)).toEqual(sorted(all.slice(2).map((r) => r.id)));
    expect(asked).toEqual([sorted((marks ? all.slice(2) : all).map((r) => r.id))]);
  });
});

describe('the live-row walk', () => {
  it('a row with a NULL id (a TEXT PRIMARY KEY allows one) is passed over; the rows after it are walked', async () => {
    fx = await qdrantFixture(numbered(3));
    const db = new Database(fx.dbPath);
    db.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES (NULL, 'user', 'no id', 'message:1')`).run();
    db.close();
    await seedMode(fx, 'payload', numbered(1));
    const { report, asked } = await traced(fx.config(), { pageSize: 1 });
    expect(report.liveRows).toBe(3);
    expect(byCode(report.findings, 'missing_points')).toMatchObject({ count: 2, ids: ['102', '103'] });
    expect(asked).toEqual([['102', '103']]);
  });
});
