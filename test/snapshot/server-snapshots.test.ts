import { afterEach, describe, expect, it } from 'vitest';
import { JOBS } from '../../jobs/index.js';
import { existsSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runJob } from '../../src/job/runner.js';
import { silentLogger } from '../../src/log/logger.js';
import { restoreSnapshot } from '../../src/snapshot/restore.js';
import { erase } from '../../src/erase/erase.js';
import { NOTES_DIR, UPLOAD_PREFIX } from '../../src/snapshot/server-snapshots.js';
import type { SnapshotResult } from '../../src/snapshot/create.js';
import type { Config } from '../../src/config/config.js';
import type { Row } from '../helpers/store.js';
import { startFaultProxy, type FaultProxy } from '../helpers/qdrant-server.js';
import { qdrantFixture, type QdrantFixture } from '../helpers/qdrant-store.js';

const T0 = Date.parse('2026-11-29T06:00:00Z');
const HOUR = 3_600_000;
const ROWS: Row[] = Array.from({ length: 6 }, (_, i) => ({ id: `m_${i}`, fact: `secret fact number ${i} of the test` }));

let fx: QdrantFixture;
let proxy: FaultProxy | undefined;
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
  await fx.close();
});

const snap = (config: Config, at: number) =>
  runJob('snapshot', { store: 'agent' }, { jobs: JOBS, config, log: silentLogger, now: () => at, record: false }) as Promise<SnapshotResult>;
const notesDir = () => join(fx.dir, 'backups', 'agent', NOTES_DIR);
const notes = () => (existsSync(notesDir()) ? readdirSync(notesDir()) : []);
const onServer = async () => (await Promise.all(fx.collections.map((c) => fx.q.snapshotNames(c)))).flat();

async function setUp(collections = 2): Promise<void> {
  fx = await qdrantFixture(ROWS, { collections });
  await fx.seedPoints(ROWS);
}

/** Fail the next `times` server-side snapshot deletes (503), whatever their name. */
async function failDeletes(times: number, name = '[^/]+'): Promise<Config> {
  proxy = await startFaultProxy(fx.q.url);
  proxy.fail({ method: 'DELETE', path: new RegExp(`/snapshots/${name}$`), times });
  return fx.config({ url: proxy.url });
}

describe('server-side snapshots are never left behind', () => {
  it('a 503 on the delete after the download: the snapshot is published, the copy noted, and the next snapshot deletes it', async () => {
    await setUp();
    const first = await snap(await failDeletes(1), T0);
    expect(proxy!.failed).toBe(1);
    expect(existsSync(join(first.dir, 'manifest.json'))).toBe(true);
    expect(await onServer()).toHaveLength(1);
    expect(notes()).toHaveLength(1);

    await snap(fx.config(), T0 + HOUR);
    expect(await onServer()).toEqual([]);
    expect(existsSync(notesDir())).toBe(false);
  });

  it('the next restore deletes them too, and a note for a snapshot already gone is simply dropped (retry-safe)', async () => {
    await setUp();
    const s = await snap(await failDeletes(2), T0);
    expect(await onServer()).toHaveLength(2);
    writeFileSync(join(notesDir(), 'gone.json'), JSON.stringify({ collection: fx.collections[0], snapshot: 'deleted-by-hand.snapshot', kind: 'created', at: '', pid: 1 }));
    const r = await restoreSnapshot(fx.config(), 'agent', s.dir, { now: () => T0 + HOUR, log: silentLogger });
    expect(r.steps.join('\n')).toMatch(/deleted 3 server-side snapshot/);
    expect(await onServer()).toEqual([]);
    expect(existsSync(notesDir())).toBe(false);
  });

  it('an uploaded snapshot is deleted after the restore; one whose delete failed is found by its name even without a note', async () => {
    await setUp();
    const s = await snap(fx.config(), T0);
    await restoreSnapshot(fx.config(), 'agent', s.dir, { now: () => T0 + HOUR, log: silentLogger });
    expect(await onServer()).toEqual([]); // both uploads gone, and the pre-restore snapshot's server-side copies

    const config = await failDeletes(1, `${UPLOAD_PREFIX}[^/]+`);
    await restoreSnapshot(config, 'agent', s.dir, { now: () => T0 + 2 * HOUR, log: silentLogger });
    expect(proxy!.failed).toBe(1);
    const left = await onServer();
    expect(left).toHaveLength(1);
    expect(left[0]).toMatch(new RegExp(`^${UPLOAD_PREFIX}`));
    rmSync(notesDir(), { recursive: true }); // the note lost: the name is enough
    await snap(fx.config(), T0 + 3 * HOUR);
    expect(await onServer()).toEqual([]);
  });

  it('a failed upload is deleted as well, and the restore rolls back', async () => {
    await setUp();
    const s = await snap(fx.config(), T0);
    proxy = await startFaultProxy(fx.q.url);
    // Applied by Qdrant (so the upload is kept), the answer lost: the restore fails and rolls back.
    proxy.fail({ method: 'POST', path: new RegExp(`/collections/${fx.collections[1]}/snapshots/upload$`), mode: 'lose-answer', times: 1 });
    await expect(restoreSnapshot(fx.config({ url: proxy.url }), 'agent', s.dir, { now: () => T0 + HOUR, log: silentLogger })).rejects.toMatchObject({ kind: 'transient' });
    expect(await onServer()).toEqual([]);
    expect(existsSync(join(fx.dir, 'memory.db.warden-restore.json'))).toBe(false);
  });

  it('erase lists every server-side snapshot of the store (its own and others), and --snapshots deletes them', async () => {
    await setUp(1);
    const c = fx.collections[0]!;
    await snap(await failDeletes(1), T0); // memory-warden's leftover
    const res = await fetch(`${fx.q.url}/collections/${c}/snapshots?wait=true`, { method: 'POST' }); // someone else's
    expect(res.ok).toBe(true);
    const names = await fx.q.snapshotNames(c);
    expect(names).toHaveLength(2);

    const dry = await erase(fx.config(), 'agent', { ids: ['m_1'] }, { now: () => T0 + HOUR, log: silentLogger, dryRun: true });
    expect(dry.snapshots.found).toEqual(expect.arrayContaining(names.map((n) => `qdrant:${c}/${n}`)));
    expect(dry.snapshots.deleted).toEqual([]);
    expect(await fx.q.snapshotNames(c)).toHaveLength(2);

    const r = await erase(fx.config(), 'agent', { ids: ['m_1'] }, { now: () => T0 + HOUR, log: silentLogger, snapshots: true, record: false });
    expect(r.snapshots.deleted).toEqual(expect.arrayContaining(names.map((n) => `qdrant:${c}/${n}`)));
    expect(r.snapshots.found.length).toBe(r.snapshots.deleted.length);
    expect(await fx.q.snapshotNames(c)).toEqual([]);
    expect(existsSync(notesDir())).toBe(false);
  });
});
