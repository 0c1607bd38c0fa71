import { afterEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { runJob } from '../../src/runner.js';
import { silentLogger } from '../../src/logger.js';
import { openStore } from '../../src/store/open.js';
import { checkConsistency, repairOrphans } from '../../src/store/consistency.js';
import { QdrantStore } from '../../src/store/qdrant.js';
import { insertRows, type Row } from '../helpers/store.js';
import { qdrantFixture, type QdrantFixture } from '../helpers/qdrant-store.js';
import type { Config } from '../../src/config.js';
import type { Finding } from '../../src/findings.js';

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
    const report = (await runJob('integrity', { store: 'agent' }, { config: fx.config(), log: silentLogger, now: () => NOW, record: false })) as {
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
