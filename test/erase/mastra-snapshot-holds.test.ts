import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { createHash } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { validateConfig, type Config } from '../../src/config/config.js';
import { silentLogger } from '../../src/log/logger.js';
import { erase } from '../../src/erase/erase.js';
import { eraseKey } from '../../src/erase/key.js';
import { takeSnapshot } from '../../src/snapshot/create.js';
import { readManifest } from '../../src/snapshot/manifest.js';
import { replicateStore } from '../../src/snapshot/targets/replicate.js';
import { holdsComplete, holdsContain, snapshotHolds, userMac } from '../../src/snapshot/targets/holds.js';
import { tempDir } from '../helpers/store.js';
import { MastraFixture } from '../layouts/mastra-fixture.js';
import { localPlace, type TargetPlace } from '../snapshot/targets/fixtures.js';

/**
 * A Mastra store's person is a resource id, its memories threads and messages: a snapshot's holds name them
 * (Layout.copyNames), so a target's copy is found by the ids and the person erase knows, in the first run and in
 * every later one, which knows them only as keyed hashes; and holds made before they did are not believed.
 */
const T0 = Date.parse('2026-11-29T02:00:00Z');
const log = silentLogger;

let disk: TargetPlace;
let tmp: ReturnType<typeof tempDir> | undefined;
beforeAll(async () => {
  disk = await localPlace();
});
afterAll(async () => disk.stop());
afterEach(() => {
  tmp?.cleanup();
  tmp = undefined;
});

function world(): { config: Config; db: string; target: string } {
  tmp = tempDir('mw-mastra-holds-');
  const db = join(tmp.dir, 'mastra.db');
  const target = disk.config() as unknown as { name: string; path: string };
  const config = validateConfig({
    stateDb: join(tmp.dir, 'state.db'),
    snapshot: { root: join(tmp.dir, 'backups'), targets: [target] },
    stores: { agent: { layout: 'mastra', db } },
  });
  return { config, db, target: target.path };
}

const run = (config: Config, sel: { user: string } | { ids: string[] }, opts: { dryRun?: boolean; snapshots?: boolean } = {}) =>
  erase(config, 'agent', sel, { now: () => T0 + 7_200_000, log, ...opts });

describe('a Mastra store\'s snapshots on a target are found by the person and the ids erase knows', { timeout: 120_000 }, () => {
  it('taken before and after Carol\'s second thread: --ids of that thread finds only the later one, --user both, in every run', async () => {
    const w = world();
    const fx = MastraFixture.create(w.db);
    fx.thread('carol', 'Carol keeps the spare key under the blue flowerpot', T0 - 86_400_000);
    fx.thread('bob', 'Bob prefers pnpm', T0 - 86_400_000);
    fx.close();
    const before = await takeSnapshot(w.config, 'agent', { now: () => T0, log });
    const fx2 = new MastraFixture(w.db);
    const second = fx2.thread('carol', 'Carol moved the key to the shed', T0 + 1000);
    fx2.close();
    const after = await takeSnapshot(w.config, 'agent', { now: () => T0 + 3_600_000, log });
    await replicateStore(w.config, 'agent', { log, now: () => T0 + 3_600_000 });
    // The target holds the only copies: nothing local to compare them with.
    rmSync(before.dir, { recursive: true });
    rmSync(after.dir, { recursive: true });
    const label = (s: { name: string }) => `target:disk/${s.name}`;

    const dry = await run(w.config, { ids: [second] }, { dryRun: true });
    expect(dry.snapshots.found).toEqual([label(after)]);
    const first = await run(w.config, { ids: [second] });
    expect(first.memories).toBeGreaterThan(0);
    expect(first.snapshots.found).toEqual([label(after)]);
    expect(first.snapshots.unverified).toEqual([]);
    // The store no longer has the thread: the later run knows it by the id given and the hashes the first kept.
    const later = await run(w.config, { ids: [second] }, { dryRun: true });
    expect(later.memories).toBe(0);
    expect(later.snapshots.found).toEqual([label(after)]);

    const person = await run(w.config, { user: 'carol' }, { dryRun: true });
    expect(person.snapshots.found.sort()).toEqual([label(before), label(after)].sort());
    await run(w.config, { user: 'carol' });
    // Carol is gone from the store: the run after knows her by her resource id alone.
    const gone = await run(w.config, { user: 'carol' }, { snapshots: true });
    expect(gone.memories).toBe(0);
    expect(gone.snapshots.deleted.sort()).toEqual([label(before), label(after)].sort());
    expect(existsSync(join(w.target, 'agent', before.name))).toBe(false);
    expect(existsSync(join(w.target, 'agent', after.name))).toBe(false);
    expect((await run(w.config, { user: 'carol' })).snapshots.found).toEqual([]);
  });

  it('holds made before they named Mastra\'s people are made again from a local copy, and a target\'s are not believed', async () => {
    const w = world();
    const fx = MastraFixture.create(w.db);
    fx.thread('carol', 'Carol keeps the spare key under the blue flowerpot', T0 - 86_400_000);
    fx.close();
    const s = await takeSnapshot(w.config, 'agent', { now: () => T0, log });
    const key = eraseKey(w.config);
    const m = readManifest(s.dir);
    expect(m.holds?.format).toBe(2);
    // What the holds of a Mastra snapshot said before: nobody. Its manifest's entry has no format.
    const old = gzipSync('{"ids":[],"users":[]}');
    writeFileSync(join(s.dir, 'holds.json.gz'), old);
    const oldManifest = { ...m, holds: { file: 'holds.json.gz' as const, keyId: m.holds!.keyId, bytes: old.length, sha256: createHash('sha256').update(old).digest('hex') } };
    expect(holdsComplete(undefined, oldManifest)).toBe(false);
    const want = { ids: new Set<string>(), user: userMac(key, 'carol') };
    expect(await holdsContain(snapshotHolds(s.dir, oldManifest, key), want, s.dir)).toBe(true);
    // On a target, holds pushed before (no format) cannot be made again without the copy: found, cannot be ruled out.
    rmSync(s.dir, { recursive: true });
    const pushed = await takeSnapshot(w.config, 'agent', { now: () => T0 + 60_000, log });
    await replicateStore(w.config, 'agent', { log, now: () => T0 + 60_000 });
    rmSync(pushed.dir, { recursive: true });
    const remote = join(w.target, 'agent', pushed.name, 'manifest.json');
    const record = JSON.parse(readFileSync(remote, 'utf8')) as { remote: { holds: { format?: number } } };
    expect(record.remote.holds.format).toBe(2);
    delete record.remote.holds.format;
    writeFileSync(remote, JSON.stringify(record));
    const dry = await run(w.config, { user: 'dora' }, { dryRun: true });
    expect(dry.snapshots.found).toEqual([`target:disk/${pushed.name}`]);
    expect(dry.snapshots.unverified).toEqual([`target:disk/${pushed.name}`]);
    // A warden store's holds always named its people: believed as they are.
    expect(holdsComplete(undefined, { sqlite: { ...m.sqlite!, tables: { memory: 3 } } })).toBe(true);
  });
});
