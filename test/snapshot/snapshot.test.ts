import { afterEach, describe, expect, it } from 'vitest';
import { JOBS } from '../../jobs/index.js';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { runJob } from '../../src/job/runner.js';
import { silentLogger } from '../../src/log/logger.js';
import { snapshotFolders } from '../../src/snapshot/folders.js';
import { readManifest } from '../../src/snapshot/manifest.js';
import { toolVersion } from '../../src/snapshot/manifest.js';
import type { SnapshotResult } from '../../src/snapshot/create.js';
import type { Config } from '../../src/config/config.js';
import { ids, type Row } from '../helpers/store.js';
import { startFaultProxy, type FaultProxy } from '../helpers/qdrant-server.js';
import { qdrantFixture, type QdrantFixture } from '../helpers/qdrant-store.js';

const T0 = Date.parse('2026-11-29T06:00:00Z');
const ROWS: Row[] = Array.from({ length: 12 }, (_, i) => ({ id: `m_${i}` }));

let fx: QdrantFixture;
let proxy: FaultProxy | undefined;
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
  await fx.close();
});

const snap = (config: Config, at = T0) =>
  runJob('snapshot', { store: 'agent' }, { jobs: JOBS, config, log: silentLogger, now: () => at, record: false }) as Promise<SnapshotResult>;
const sha = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');
const mode = (path: string) => statSync(path).mode & 0o777;
const storeDir = () => join(fx.dir, 'backups', 'agent');

describe('snapshot', () => {
  it('writes one dated folder: SQLite copy, every collection, manifest last; all verified, owner-only', async () => {
    fx = await qdrantFixture(ROWS, { collections: 2 });
    await fx.seedPoints(ROWS, { chunks: ['m_1'] });
    const r = await snap(fx.config());
    expect(r.name).toBe('2026-11-29T060000Z');
    const dir = join(storeDir(), r.name);
    expect(r.dir).toBe(dir);
    expect(readdirSync(storeDir())).toEqual(['.snapshots.warden-lock', r.name]);
    expect(readdirSync(dir).sort()).toEqual(['holds.json.gz', 'manifest.json', 'qdrant', 'store.db']);
    expect(readdirSync(join(dir, 'qdrant')).sort()).toEqual([`0-${fx.collections[0]}.snapshot`, `1-${fx.collections[1]}.snapshot`]);

    const m = readManifest(dir);
    expect(m).toMatchObject({ store: 'agent', layout: 'warden', reason: 'scheduled', tool: { name: 'memory-warden', version: toolVersion() } });
    expect(toolVersion()).toMatch(/^\d+\.\d+\.\d+/);
    expect(m.sqlite).toMatchObject({ integrity: 'ok', rows: 12, file: 'store.db' });
    expect(m.qdrant.map((p) => [p.collection, p.points])).toEqual(fx.collections.map((c) => [c, 13]));
    expect(m.skewMs).toBeGreaterThanOrEqual(0);
    expect(Object.keys(m.files).sort()).toEqual(['qdrant/0-' + fx.collections[0] + '.snapshot', 'qdrant/1-' + fx.collections[1] + '.snapshot', 'store.db'].sort());
    for (const [rel, f] of Object.entries(m.files)) {
      expect(sha(join(dir, rel))).toBe(f.sha256);
      expect(statSync(join(dir, rel)).size).toBe(f.bytes);
      expect(mode(join(dir, rel))).toBe(0o600);
    }
    for (const p of m.qdrant) expect(m.files[p.file]!.sha256).toBe(p.qdrantChecksum);
    expect(mode(join(dir, 'manifest.json'))).toBe(0o600);
    for (const d of [storeDir(), dir, join(dir, 'qdrant')]) expect(mode(d)).toBe(0o700);

    const copy = new Database(join(dir, 'store.db'), { readonly: true });
    expect((copy.prepare('SELECT count(*) AS n FROM memory').get() as { n: number }).n).toBe(12);
    copy.close();
    for (const c of fx.collections) expect(await fx.q.snapshotNames(c)).toEqual([]); // deleted from the server
  });

  it('keeps the last N scheduled snapshots; folders it cannot read are left to a person', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const config = fx.config({ snapshot: { keep: 2 } });
    mkdirSync(join(storeDir(), '2026-01-01T000000Z'), { recursive: true }); // no manifest: not ours to delete
    const names: string[] = [];
    for (let i = 0; i < 4; i++) names.push((await snap(config, T0 + i * 3_600_000)).name);
    const left = snapshotFolders(config, 'agent');
    expect(left.map((s) => s.name)).toEqual(['2026-01-01T000000Z', ...names.slice(2)]);
    expect(left[0]!.problem).toMatch(/manifest/);
  });

  it('a corrupt download publishes nothing, keeps the earlier snapshots and deletes the server-side copy', async () => {
    fx = await qdrantFixture(ROWS, { collections: 2 });
    await fx.seedPoints(ROWS);
    const config = fx.config();
    const first = await snap(config);
    const before = readManifest(first.dir);
    if (fx.q.kind === 'real') return; // real Qdrant cannot be made to corrupt a download; the proxy cases below run
    fx.q.server!.corruptNextDownload(fx.collections[1]!);
    await expect(snap(config, T0 + 3_600_000)).rejects.toThrow(/sha256/);
    expect(readdirSync(storeDir()).filter((n) => !n.startsWith('.snapshots'))).toEqual([first.name]);
    expect(readManifest(first.dir)).toEqual(before);
    for (const [rel, f] of Object.entries(before.files)) expect(sha(join(first.dir, rel))).toBe(f.sha256);
    for (const c of fx.collections) expect(await fx.q.snapshotNames(c)).toEqual([]);
  });

  it.each([
    ['create fails', { method: 'POST', path: /\/snapshots$/, after: 1 }],
    ['download dropped', { method: 'GET', path: /\/snapshots\/[^/]+$/, mode: 'reset' as const }],
    ['count fails', { path: /\/points\/count$/, after: 1 }],
  ])('Qdrant failing (%s) fails the job as transient and publishes nothing', async (_name, rule) => {
    fx = await qdrantFixture(ROWS, { collections: 2 });
    await fx.seedPoints(ROWS);
    const first = await snap(fx.config());
    proxy = await startFaultProxy(fx.q.url);
    proxy.fail(rule);
    await expect(snap(fx.config({ url: proxy.url }), T0 + 3_600_000)).rejects.toMatchObject({ kind: 'transient' });
    expect(readdirSync(storeDir()).filter((n) => !n.startsWith('.snapshots'))).toEqual([first.name]);
    proxy.clear();
    for (const c of fx.collections) expect(await fx.q.snapshotNames(c)).toEqual([]);
  });

  it('a download that stops sending is abandoned after qdrant.timeoutMs without data, publishing nothing', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    proxy = await startFaultProxy(fx.q.url);
    proxy.fail({ method: 'GET', path: /\/snapshots\/[^/]+$/, mode: 'stall' });
    const config = fx.config({ url: proxy.url, qdrant: { timeoutMs: 200 } });
    await expect(snap(config)).rejects.toMatchObject({ kind: 'transient', message: expect.stringMatching(/no data for 200 ms/) });
    expect(readdirSync(storeDir()).filter((n) => !n.startsWith('.snapshots'))).toEqual([]);
    proxy.clear();
    expect(await fx.q.snapshotNames(fx.collections[0]!)).toEqual([]);
  });

  it('a store that is not SQLite fails before anything is written', async () => {
    fx = await qdrantFixture(ROWS);
    const config = fx.config();
    config.stores.agent!.db = join(fx.dir, 'nope.db');
    await expect(snap(config)).rejects.toMatchObject({ kind: 'store' });
    expect(existsSync(storeDir())).toBe(false);
  });

  it('copies a WAL store while the agent holds it open, recording its journal mode', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const agent = new Database(fx.dbPath);
    agent.pragma('journal_mode = WAL');
    agent.exec(`INSERT INTO memory (id, subject, fact, source) VALUES ('during', 's', 'f', 'message:2')`);
    const r = await snap(fx.config());
    agent.close();
    expect(readManifest(r.dir).sqlite).toMatchObject({ rows: 13, journalMode: 'wal', integrity: 'ok' });
    expect(ids(join(r.dir, 'store.db'))).toContain('during');
  });
});
