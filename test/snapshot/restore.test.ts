import { afterEach, describe, expect, it } from 'vitest';
import { JOBS } from '../../jobs/index.js';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { runJob } from '../../src/job/runner.js';
import { silentLogger } from '../../src/log/logger.js';
import { openStore } from '../../src/layouts/open.js';
import { deleteWithCascade } from '../../src/layouts/warden/delete.js';
import { restoreSnapshot } from '../../src/snapshot/restore.js';
import { readManifest } from '../../src/snapshot/manifest.js';
import { journalPath } from '../../src/snapshot/journal.js';
import { finishPendingRestore } from '../../src/snapshot/resume.js';
import type { SnapshotResult } from '../../src/snapshot/create.js';
import type { Config } from '../../src/config/config.js';
import { ids, insertRows, type Row } from '../helpers/store.js';
import { startFaultProxy, type FaultProxy } from '../helpers/qdrant-server.js';
import { qdrantFixture, type QdrantFixture } from '../helpers/qdrant-store.js';

const T0 = Date.parse('2026-11-29T06:00:00Z');
const T1 = T0 + 3_600_000;
const ROWS: Row[] = Array.from({ length: 10 }, (_, i) => ({ id: `m_${i}` }));
const ORIGINAL = ROWS.map((r) => r.id);

let fx: QdrantFixture;
let proxy: FaultProxy | undefined;
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
  await fx.close();
});

const snap = (config: Config, at = T0) =>
  runJob('snapshot', { store: 'agent' }, { jobs: JOBS, config, log: silentLogger, now: () => at, record: false }) as Promise<SnapshotResult>;
const restore = (config: Config, dir: string, o: { force?: boolean; dryRun?: boolean; at?: number } = {}) =>
  restoreSnapshot(config, 'agent', dir, { now: () => o.at ?? T1, log: silentLogger, ...o });

/** After the snapshot: half the memories deleted through both stores, one new memory in both. */
async function changeBothStores(config: Config): Promise<void> {
  const store = openStore(config, 'agent');
  try {
    await deleteWithCascade(store.db, ORIGINAL.slice(0, 5), { vectors: store.vectors });
    insertRows(store.db, [{ id: 'after' }]);
  } finally {
    store.close();
  }
  await fx.seedPoints([{ id: 'after' }]);
}
const CHANGED = ['after', ...ORIGINAL.slice(5)];

async function state(): Promise<{ rows: string[]; points: string[][] }> {
  return { rows: ids(fx.dbPath).sort(), points: await Promise.all(fx.collections.map((c) => fx.pointRows(c))) };
}
const published = () => readdirSync(join(fx.dir, 'backups', 'agent')).filter((n) => !n.startsWith('.')).sort();

describe('restore', () => {
  it('round trip: deleted data comes back in both stores; the pre-restore snapshot undoes it', async () => {
    fx = await qdrantFixture(ROWS, { collections: 2 });
    await fx.seedPoints(ROWS);
    const config = fx.config();
    const s = await snap(config);
    await changeBothStores(config);
    expect(await state()).toEqual({ rows: [...CHANGED].sort(), points: [CHANGED.sort(), CHANGED.sort()] });

    const r = await restore(config, s.dir);
    expect(r.undo).toBe(join(fx.dir, 'backups', 'agent', '2026-11-29T070000Z-pre-restore'));
    expect(await state()).toEqual({ rows: ORIGINAL, points: [ORIGINAL, ORIGINAL] });
    expect(r.points).toEqual(Object.fromEntries(fx.collections.map((c) => [c, 10])));
    const db = new Database(fx.dbPath, { readonly: true });
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
    db.close();
    expect(readManifest(r.undo!).reason).toBe('pre-restore');

    await restore(config, r.undo!, { at: T1 + 60_000 });
    expect(await state()).toEqual({ rows: [...CHANGED].sort(), points: [CHANGED.sort(), CHANGED.sort()] });
  });

  it('verifies every checksum before touching anything', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const config = fx.config();
    const s = await snap(config);
    await changeBothStores(config);
    const before = await state();
    const m = readManifest(s.dir);
    const file = join(s.dir, m.qdrant[0]!.file);
    const bytes = readFileSync(file);
    bytes[10] = bytes[10]! ^ 0x01;
    writeFileSync(file, bytes);
    await expect(restore(config, s.dir)).rejects.toThrow(/does not match its checksum/);
    expect(await state()).toEqual(before);
    expect(published()).toEqual([s.name]); // not even a pre-restore snapshot was taken
  });

  it('refuses while the store is open elsewhere, unless --force', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const config = fx.config();
    const s = await snap(config);
    await changeBothStores(config);
    const before = await state();
    const agent = new Database(fx.dbPath);
    agent.pragma('journal_mode = WAL');
    agent.prepare('SELECT count(*) FROM memory').get();
    try {
      await expect(restore(config, s.dir)).rejects.toMatchObject({ kind: 'usage', message: expect.stringMatching(/in use/) });
      expect(await state()).toEqual(before);
    } finally {
      agent.close();
    }
    await restore(config, s.dir, { force: true });
    expect(await state()).toEqual({ rows: ORIGINAL, points: [ORIGINAL] });
  });

  it('dry run verifies and says what it would do, changing nothing', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const config = fx.config();
    const s = await snap(config);
    await changeBothStores(config);
    const before = await state();
    const r = await restore(config, s.dir, { dryRun: true });
    expect(r.steps[0]).toMatch(/verified 2 file/);
    expect(r.steps.slice(1).every((x) => x.startsWith('would '))).toBe(true);
    expect(r.steps.join('\n')).toContain(`recover Qdrant collection ${fx.collections[0]}`);
    expect(await state()).toEqual(before);
    expect(published()).toEqual([s.name]);
  });

  it('refuses a snapshot of another store', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const s = await snap(fx.config());
    const config = fx.config();
    config.stores.other = config.stores.agent!;
    await expect(restoreSnapshot(config, 'other', s.dir, { now: () => T1, log: silentLogger })).rejects.toThrow(/snapshot of store "agent"/);
  });

  it('both or neither: a collection failing mid-restore puts the restored ones back and leaves SQLite untouched', async () => {
    fx = await qdrantFixture(ROWS, { collections: 2 });
    await fx.seedPoints(ROWS);
    const s = await snap(fx.config());
    await changeBothStores(fx.config());
    const before = await state();
    proxy = await startFaultProxy(fx.q.url);
    // The second collection's upload fails once: the first was restored, and is rolled back.
    proxy.fail({ method: 'POST', path: new RegExp(`/collections/${fx.collections[1]}/snapshots/upload$`), times: 1 });
    await expect(restore(fx.config({ url: proxy.url }), s.dir)).rejects.toMatchObject({ kind: 'transient' });
    expect(proxy.failed).toBe(1);
    expect(await state()).toEqual(before);
  });

  it('says where to go back to when the rollback itself fails', async () => {
    fx = await qdrantFixture(ROWS, { collections: 2 });
    await fx.seedPoints(ROWS);
    const s = await snap(fx.config());
    await changeBothStores(fx.config());
    const rowsBefore = ids(fx.dbPath);
    const before = await state();
    proxy = await startFaultProxy(fx.q.url);
    proxy.fail({ method: 'POST', path: new RegExp(`/collections/${fx.collections[1]}/snapshots/upload$`) });
    const err = await restore(fx.config({ url: proxy.url }), s.dir).catch((e: Error) => e);
    expect(err).toMatchObject({ kind: 'store' });
    expect((err as Error).message).toMatch(/pre-restore/);
    expect(ids(fx.dbPath)).toEqual(rowsBefore);
    expect(await fx.pointRows(fx.collections[0])).toEqual([...CHANGED].sort()); // the first one was put back
    // The journal kept the half-done roll back; once Qdrant answers again, the worker start (or a restore) ends it.
    expect(existsSync(journalPath(fx.dbPath))).toBe(true);
    expect(await finishPendingRestore(fx.config(), 'agent', { now: () => T1, log: silentLogger })).toEqual(expect.arrayContaining([expect.stringMatching(/^rolling back/)]));
    expect(await state()).toEqual(before);
    expect(existsSync(journalPath(fx.dbPath))).toBe(false);
  });
});
