/**
 * A snapshot's holds are made once, when it is taken: the file beside its copy, recorded in its manifest, is what
 * every push uploads and what erase searches; one that differs from its record is never taken for it, and a
 * snapshot from before (no holds file) still pushes and is still found, its holds made from its copy then.
 */
import { readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/log/logger.js';
import { takeSnapshot } from '../../src/snapshot/create.js';
import { proveSnapshot, snapshotFolders } from '../../src/snapshot/folders.js';
import { HOLDS_FILE, HOLDS_FORMAT, readManifest, type Manifest } from '../../src/snapshot/manifest.js';
import { eraseKey, eraseKeyId } from '../../src/erase/key.js';
import { sqliteHolds } from '../../src/erase/snapshot-holds.js';
import { remoteSnapshotCopies } from '../../src/erase/targets.js';
import { holdsStream, idMac } from '../../src/snapshot/targets/holds.js';
import { replicateStore, withTarget } from '../../src/snapshot/targets/replicate.js';
import { readRemoteManifest } from '../../src/snapshot/targets/remote-manifest.js';
import { digestOf } from '../../src/snapshot/targets/digest.js';
import type { Config } from '../../src/config/config.js';
import type { WardenError } from '../../src/core/errors.js';
import { qdrantFixture, type QdrantFixture } from '../helpers/qdrant-store.js';
import type { Row } from '../helpers/store.js';
import { localPlace, type TargetPlace } from './targets/fixtures.js';

const T0 = Date.parse('2026-11-29T02:00:00Z');
const ROWS: Row[] = [{ id: 'm_ada', subject: 'ada', fact: 'Ada prefers tea' }, ...Array.from({ length: 5 }, (_, i) => ({ id: `m_${i}`, subject: 'bob', fact: `fact ${i}` }))];
const failure = (p: Promise<unknown>) => p.then(() => { throw new Error('expected a failure'); }, (e: WardenError) => e);

let fx: QdrantFixture;
let place: TargetPlace;
beforeAll(async () => {
  place = await localPlace();
});
afterAll(() => place.stop());
afterEach(async () => {
  await fx?.close();
});

async function bytesOf(source: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const out: Buffer[] = [];
  for await (const c of source) out.push(Buffer.from(c));
  return Buffer.concat(out);
}

async function snapshotted(): Promise<{ config: Config; dir: string; manifest: Manifest; key: Buffer }> {
  fx = await qdrantFixture(ROWS);
  const config = fx.config({ snapshot: { targets: [place.config()] } });
  const snap = await takeSnapshot(config, 'agent', { now: () => T0, log: silentLogger });
  return { config, dir: snap.dir, manifest: readManifest(snap.dir), key: eraseKey(config) };
}

const push = (config: Config) => replicateStore(config, 'agent', { log: silentLogger, now: () => T0 });

describe('holds made when the snapshot is taken', () => {
  it('made while the copy is checked, they count only once it passes: a copy that fails its check leaves no folder, partial or whole', async () => {
    const { config, dir } = await snapshotted();
    // An index whose definition no longer matches its entries: quick_check passes, VACUUM INTO copies the index's
    // pages as they are, and the copy's integrity_check finds every row missing from it.
    const db = new Database(config.stores.agent!.db);
    db.unsafeMode(true);
    db.pragma('writable_schema = ON');
    db.prepare(`UPDATE sqlite_schema SET sql = 'CREATE INDEX memory_expires ON memory(subject)' WHERE name = 'memory_expires'`).run();
    db.close();
    const err = await failure(takeSnapshot(config, 'agent', { now: () => T0 + 3_600_000, log: silentLogger }));
    expect(err.message).toMatch(/integrity_check of the copy .* says "row \d+ missing from index memory_expires/);
    const root = join(dir, '..');
    expect(readdirSync(root).filter((n) => !n.startsWith('.snapshots'))).toEqual([basename(dir)]);
    expect(snapshotFolders(config, 'agent').map((f) => f.name)).toEqual([basename(dir)]);
  });

  it('the snapshot holds holds.json.gz, recorded in its manifest with the erase key that made it; the folder is a snapshot', async () => {
    const { config, dir, manifest, key } = await snapshotted();
    const file = readFileSync(join(dir, HOLDS_FILE));
    expect(manifest.holds).toEqual({ file: HOLDS_FILE, keyId: eraseKeyId(key), format: HOLDS_FORMAT, ...(await digestOf((async function* () { yield file; })())) });
    expect(file.equals(await bytesOf(holdsStream(join(dir, manifest.sqlite!.file), key)))).toBe(true);
    expect(Object.keys(manifest.files)).not.toContain(HOLDS_FILE); // not a part: nothing restores it
    expect(snapshotFolders(config, 'agent').map((s) => s.problem)).toEqual([undefined]);
    expect(await proveSnapshot({ dir }, 'agent')).toBeUndefined();
  });

  it('a push uploads that file as it is; the remote manifest records it once, as the target\'s holds', async () => {
    const { config, dir, manifest } = await snapshotted();
    const [run] = await push(config);
    expect(run!.uploaded).toEqual([manifest.name]);
    await withTarget(config.snapshot.targets[0]!, 'agent', async (t) => {
      const m = await readRemoteManifest(t, manifest.name!);
      expect(m.remote.holds).toMatchObject({ sha256: manifest.holds!.sha256, bytes: manifest.holds!.bytes, keyId: manifest.holds!.keyId });
      expect((m as Partial<Manifest>).holds).toBeUndefined();
      expect((await bytesOf(await t.get(manifest.name!, HOLDS_FILE))).equals(readFileSync(join(dir, HOLDS_FILE)))).toBe(true);
    });
  });

  it('a holds file that no longer matches its manifest is not uploaded: the push fails naming it, nothing looks complete', async () => {
    const { config, dir, manifest } = await snapshotted();
    const file = join(dir, HOLDS_FILE);
    const bytes = readFileSync(file);
    bytes[bytes.length - 9]! ^= 0xff; // the same size: only its digest tells
    writeFileSync(file, bytes);
    expect(await proveSnapshot({ dir }, 'agent')).toBe(`${HOLDS_FILE} does not match its checksum in the manifest`);
    const err = await failure(push(config));
    expect(err.message).toMatch(new RegExp(`${HOLDS_FILE} does not match its checksum`));
    await withTarget(config.snapshot.targets[0]!, 'agent', async (t) => expect(await t.list()).toEqual([]));
    // Nor is it believed by erase: a snapshot whose holds cannot be read cannot be ruled out.
    const search = { key: eraseKey(config), store: 'agent', ids: [], earlier: [idMac(eraseKey(config), 'no_such')] };
    expect(await sqliteHolds(dir, search, silentLogger)).toBe('unsure');
    expect(manifest.holds).toBeDefined();
  });

  it('erase searches the file for ids known by their hash alone', async () => {
    const { dir, key } = await snapshotted();
    const ask = (id: string) => sqliteHolds(dir, { key, store: 'agent', ids: [], earlier: [idMac(key, id)] }, silentLogger);
    expect(await ask('m_3')).toBe('holds');
    expect(await ask('no_such')).toBeNull();
  });

  it('a snapshot from before holds files: pushed with its holds made from its copy, and found by erase', async () => {
    const { config, dir, manifest, key } = await snapshotted();
    const { holds: _holds, ...older } = manifest;
    rmSync(join(dir, HOLDS_FILE));
    writeFileSync(join(dir, 'manifest.json'), JSON.stringify(older, null, 2) + '\n');
    expect(snapshotFolders(config, 'agent').map((s) => s.problem)).toEqual([undefined]);
    expect(await sqliteHolds(dir, { key, store: 'agent', ids: [], earlier: [idMac(key, 'm_ada')] }, silentLogger)).toBe('holds');
    const [run] = await push(config);
    expect(run!.uploaded).toEqual([manifest.name]);
    await withTarget(config.snapshot.targets[0]!, 'agent', async (t) => {
      expect((await readRemoteManifest(t, manifest.name!)).remote.holds.sha256).toBe(manifest.holds!.sha256); // the same file, made now
    });
    const label = `target:disk/${manifest.name}`;
    expect((await remoteSnapshotCopies(config, 'agent', { ids: ['m_ada'] }, { remove: false, log: silentLogger })).found).toEqual([label]);
    expect((await remoteSnapshotCopies(config, 'agent', { ids: ['no_such'] }, { remove: false, log: silentLogger })).found).toEqual([]);
  });

  it('holds made under another erase key are not used: erase and push make them again under this one', async () => {
    const { config, dir, manifest, key } = await snapshotted();
    writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ ...manifest, holds: { ...manifest.holds, keyId: '0'.repeat(16) } }, null, 2) + '\n');
    expect(await sqliteHolds(dir, { key, store: 'agent', ids: [], earlier: [idMac(key, 'm_1')] }, silentLogger)).toBe('holds');
    await push(config);
    await withTarget(config.snapshot.targets[0]!, 'agent', async (t) => {
      expect((await readRemoteManifest(t, manifest.name!)).remote.holds).toMatchObject({ sha256: manifest.holds!.sha256, keyId: eraseKeyId(key) });
    });
  });

  it('a manifest whose holds entry points elsewhere is not a snapshot manifest', async () => {
    const { config, dir, manifest } = await snapshotted();
    writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ ...manifest, holds: { ...manifest.holds, file: '../elsewhere' } }));
    expect(snapshotFolders(config, 'agent')[0]!.problem).toMatch(/holds entry is not one memory-warden writes/);
  });
});
