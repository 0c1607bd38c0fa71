import { afterEach, describe, expect, it } from 'vitest';
import { JOBS } from '../../jobs/index.js';
import { runJob } from '../../src/job/runner.js';
import { silentLogger } from '../../src/log/logger.js';
import { openStore } from '../../src/layouts/open.js';
import { checkConsistency } from '../../src/layouts/warden/consistency.js';
import { QdrantStore } from '../../src/vectors/qdrant/index.js';
import { repairDangling } from '../../src/layouts/warden/repair.js';
import { ids, type Row } from '../helpers/store.js';
import { startFaultProxy, vectorFor, type FaultProxy } from '../helpers/qdrant-server.js';
import { qdrantFixture, type QdrantFixture } from '../helpers/qdrant-store.js';
import { startAgent } from '../helpers/agent.js';
import type { Config } from '../../src/config/config.js';

const NOW = Date.parse('2026-11-29T06:00:00Z');
const opts = (config: Config) => ({ jobs: JOBS, config, log: silentLogger, now: () => NOW, record: false });

/** 6 expired rows, 3 live ones, and a chain: old_1 superseded by new_1, which has expired (the cascade takes both). */
const ROWS: Row[] = [
  ...Array.from({ length: 6 }, (_, i) => ({ id: `exp_${i}`, expires_at: '2026-11-01 00:00:00' })),
  { id: 'live_1' }, { id: 'live_2' }, { id: 'live_3', expires_at: '2027-01-01 00:00:00' },
  { id: 'new_1', expires_at: '2026-11-02 00:00:00' },
  { id: 'old_1', superseded_by: 'new_1', created_at: '2026-11-01 00:00:00' },
];
const LIVE = ['live_1', 'live_2', 'live_3'];

let fx: QdrantFixture;
let proxy: FaultProxy | undefined;
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
  await fx.close();
});

/** Every point's row exists in SQLite: the invariant no failure may break. */
async function expectNoOrphans(config: Config): Promise<void> {
  const store = openStore(config, 'agent');
  try {
    const r = await checkConsistency(store.db, store.vectors as QdrantStore, { now: NOW });
    expect(r.findings.filter((f) => f.code === 'orphan_points')).toEqual([]);
  } finally {
    store.close();
  }
}

describe('deletes go through both stores', () => {
  it('prune deletes the rows, their cascade and every point of them in every collection', async () => {
    fx = await qdrantFixture(ROWS, { collections: 2 });
    await fx.seedPoints(ROWS, { chunks: ['exp_0', 'live_1', 'old_1'] });
    const config = fx.config();
    const result = (await runJob('prune', { store: 'agent' }, opts(config))) as { deleted: number; cascaded: number };
    expect(result.deleted).toBe(8);
    expect(result.cascaded).toBe(1);
    expect(ids(fx.dbPath)).toEqual(LIVE);
    for (const c of fx.collections) expect(await fx.pointRows(c)).toEqual(['live_1', 'live_1', 'live_2', 'live_3']);
  });

  it('beside a writing agent, a row hundreds are superseded by goes in pieces: the rows and every point of them, no orphan point', async () => {
    const rows: Row[] = [
      ...ROWS,
      { id: 'hub', expires_at: '2026-11-01 00:00:00' },
      ...Array.from({ length: 400 }, (_, i): Row => ({ id: `hub_v${i}`, superseded_by: 'hub', created_at: '2026-11-20 00:00:00' })),
    ];
    fx = await qdrantFixture(rows, { collections: 2 });
    await fx.seedPoints(rows, { chunks: ['hub', 'hub_v3'] });
    const config = fx.config();
    const agent = await startAgent(fx.dbPath);
    const result = (await runJob('prune', { store: 'agent' }, opts(config))) as { deleted: number; cascaded: number };
    const summary = await agent.stop();
    expect(summary.errors).toBe(0);
    expect(result.deleted).toBe(8 + 401);
    expect(result.cascaded).toBe(1 + 400);
    expect(ids(fx.dbPath).filter((id) => !id.startsWith('agent_'))).toEqual(LIVE);
    for (const c of fx.collections) expect(await fx.pointRows(c)).toEqual(['live_1', 'live_2', 'live_3']);
    await expectNoOrphans(config);
  });

  it('after prune, retrieval (POST /points/query) returns live memories only', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const config = fx.config();
    const store = openStore(config, 'agent');
    const q = store.vectors as QdrantStore;
    const retrieve = async () => {
      const r = await q.client.query(fx.collections[0]!, { query: vectorFor('exp_0'), limit: 100, with_payload: true });
      return r.points.map((p) => String(p.payload?.memory_id)).sort();
    };
    try {
      expect(await retrieve()).toHaveLength(ROWS.length);
      await runJob('prune', { store: 'agent' }, opts(config));
      expect(await retrieve()).toEqual(LIVE);
    } finally {
      store.close();
    }
  });

  it('repair dangling deletes the points of the rows it deletes', async () => {
    fx = await qdrantFixture([{ id: 'a' }, { id: 'b', superseded_by: 'gone' }, { id: 'c', superseded_by: 'b' }]);
    await fx.seedPoints([{ id: 'a' }, { id: 'b' }, { id: 'c' }]);
    const store = openStore(fx.config(), 'agent');
    try {
      const r = await repairDangling(store);
      expect(r.deleted).toBe(2);
    } finally {
      store.close();
    }
    expect(ids(fx.dbPath)).toEqual(['a']);
    expect(await fx.pointRows()).toEqual(['a']);
  });

  it.each(['status', 'reset'] as const)('Qdrant failing mid-prune (%s): transient, rows of the failed batch kept, no orphan points', async (mode) => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    proxy = await startFaultProxy(fx.q.url);
    const config = fx.config({ url: proxy.url, prune: { batchSize: 2 } });
    proxy.fail({ path: /\/points\/delete$/, after: 1, mode });
    await expect(runJob('prune', { store: 'agent' }, opts(config))).rejects.toMatchObject({ kind: 'transient' });
    expect(proxy.failed).toBe(1);
    const left = ids(fx.dbPath);
    expect(left.length).toBe(ROWS.length - 2); // the first batch went, the second failed before any row was deleted
    expect(await fx.pointRows()).toEqual([...left].sort());
    await expectNoOrphans(config);

    proxy.clear();
    await runJob('prune', { store: 'agent' }, opts(config));
    expect(ids(fx.dbPath)).toEqual(LIVE);
    expect(await fx.pointRows()).toEqual(LIVE);
  });

  it('Qdrant applying a delete whose answer is lost: the rows stay, the next run deletes them, never the reverse', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    proxy = await startFaultProxy(fx.q.url);
    const config = fx.config({ url: proxy.url, prune: { batchSize: 2 } });
    proxy.fail({ path: /\/points\/delete$/, times: 1, mode: 'lose-answer' });
    await expect(runJob('prune', { store: 'agent' }, opts(config))).rejects.toMatchObject({ kind: 'transient' });
    expect(ids(fx.dbPath)).toHaveLength(ROWS.length); // no row deleted, though two rows' vectors are gone
    expect((await fx.pointRows()).length).toBe(ROWS.length - 2);
    await expectNoOrphans(config);
    proxy.clear();
    await runJob('prune', { store: 'agent' }, opts(config));
    expect(ids(fx.dbPath)).toEqual(LIVE);
    expect(await fx.pointRows()).toEqual(LIVE);
  });

  it('an unreachable Qdrant deletes nothing at all', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    proxy = await startFaultProxy(fx.q.url);
    const config = fx.config({ url: proxy.url });
    await proxy.close();
    proxy = undefined;
    await expect(runJob('prune', { store: 'agent' }, opts(config))).rejects.toMatchObject({ kind: 'transient' });
    expect(ids(fx.dbPath)).toHaveLength(ROWS.length);
    expect(await fx.pointRows()).toHaveLength(ROWS.length);
  });
});
