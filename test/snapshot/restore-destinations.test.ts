// Restore takes every destination from the store's config: manifests naming another store's file or collection,
// or files swapped between parts, are refused before anything changes.
import { afterEach, describe, expect, it } from 'vitest';
import { copyFileSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { silentLogger } from '../../src/log/logger.js';
import { takeSnapshot } from '../../src/snapshot/create.js';
import { restoreSnapshot } from '../../src/snapshot/restore.js';
import type { Manifest } from '../../src/snapshot/manifest.js';
import type { Config } from '../../src/config/config.js';
import type { WardenError } from '../../src/core/errors.js';
import { makeStore, tempDir, type Row } from '../helpers/store.js';
import { validateConfig } from '../../src/config/config.js';
import { sdkStore } from '../layouts/mem0-sdk.js';
import Database from 'better-sqlite3';
import { qdrantFixture, type QdrantFixture } from '../helpers/qdrant-store.js';

/**
 * A snapshot's manifest says what each file is, never where it goes: every destination comes from the store's config.
 * Each forgery below is refused before anything changes: the store, another store's database and another store's
 * collection keep every byte and point.
 */
const T0 = Date.parse('2026-11-29T06:00:00Z');
const ROWS: Row[] = Array.from({ length: 6 }, (_, i) => ({ id: `m_${i}` }));
const OTHER_ROWS: Row[] = [{ id: 'b_1', fact: 'store b keeps its own facts' }];
const failure = (p: Promise<unknown>) => p.then(() => { throw new Error('expected a refusal'); }, (e: WardenError) => e);

let fixture: QdrantFixture | undefined;
afterEach(async () => {
  await fixture?.close();
  fixture = undefined;
});

describe('restore takes destinations from the config only', () => {
  it('refuses a manifest naming another store\'s file or collection, another layout or store; nothing changes', async () => {
    const fx = await qdrantFixture(ROWS, { collections: 2 });
    fixture = fx;
    const [mine, theirs] = fx.collections as [string, string];
    await fx.seedPoints(ROWS, { collections: [mine] });
    await fx.seedPoints(OTHER_ROWS, { collections: [theirs] }); // store b's collection, on the same Qdrant
    const config: Config = fx.config({ qdrant: { collections: [mine] } });
    const storeB = makeStore(join(fx.dir, 'b.db'), OTHER_ROWS);
    const snap = await takeSnapshot(config, 'agent', { now: () => T0, log: silentLogger });
    const manifestPath = join(snap.dir, 'manifest.json');
    const original = readFileSync(manifestPath, 'utf8');
    const m = JSON.parse(original) as Manifest;
    copyFileSync(join(snap.dir, m.qdrant[0]!.file), join(snap.dir, `qdrant/1-${theirs}.snapshot`)); // what a forger adds

    const before = { a: readFileSync(fx.dbPath), b: readFileSync(storeB), mine: await fx.pointRows(mine), theirs: await fx.pointRows(theirs) };
    const forgeries: Array<[string, Partial<Manifest> & Record<string, unknown>, RegExp]> = [
      ['vector file naming store b\'s database', { vectorFiles: [{ ...m.sqlite!, source: storeB }] }, /vector file for .*b\.db.*not one of store "agent"'s vector files/],
      ['vector file naming the store\'s own database', { vectorFiles: [{ ...m.sqlite!, source: fx.dbPath }] }, /not one of store "agent"'s vector files/],
      ['vector file by a relative path', { vectorFiles: [{ ...m.sqlite!, source: '../b.db' }] }, /not one of store "agent"'s vector files/],
      ['vector file outside any store', { vectorFiles: [{ ...m.sqlite!, source: join(fx.dir, 'new.db') }] }, /not one of store "agent"'s vector files/],
      ['a part for store b\'s collection', { qdrant: [...m.qdrant, { ...m.qdrant[0]!, collection: theirs }] }, new RegExp(`as collection ${theirs}'s snapshot: refused`)],
      ['a part for store b\'s collection, its file named for it', { qdrant: [...m.qdrant, { ...m.qdrant[0]!, collection: theirs, file: m.qdrant[0]!.file.replace(/^qdrant\/0-.*/, `qdrant/1-${theirs}.snapshot`) }], files: { ...m.files, [`qdrant/1-${theirs}.snapshot`]: m.files[m.qdrant[0]!.file]! } }, new RegExp(`collection\\(s\\) ${theirs} that store "agent" does not have`)],
      ['the collection renamed to store b\'s', { qdrant: [{ ...m.qdrant[0]!, collection: theirs }] }, /as collection .*'s snapshot: refused/],
      ['the store\'s collection twice', { qdrant: [m.qdrant[0]!, m.qdrant[0]!] }, /as collection .*'s snapshot: refused/],
      ['another layout', { layout: 'mem0' }, /snapshot of a mem0 store; store "agent" is warden/],
      ['another store', { store: 'b' }, /snapshot of store "b", not "agent"/],
      ['the store copy named as the collection\'s file', { sqlite: { ...m.sqlite!, file: m.qdrant[0]!.file } }, /records its store copy as .*not store\.db/],
    ];
    for (const [label, change, why] of forgeries) {
      writeFileSync(manifestPath, JSON.stringify({ ...m, ...change }, null, 2));
      for (const dryRun of [true, false]) {
        const err = await failure(restoreSnapshot(config, 'agent', snap.dir, { now: () => T0 + 60_000, log: silentLogger, dryRun }));
        expect(err.message, label).toMatch(why);
        expect(err.exitCode, label).toBe(2);
        expect(err.message, label).not.toContain('\n');
      }
      expect(readFileSync(fx.dbPath).equals(before.a), label).toBe(true);
      expect(readFileSync(storeB).equals(before.b), label).toBe(true);
      expect(await fx.pointRows(mine), label).toEqual(before.mine);
      expect(await fx.pointRows(theirs), label).toEqual(before.theirs);
      // refused before the pre-restore snapshot: no new folder
      expect(readdirSync(join(fx.dir, 'backups', 'agent')).filter((n) => n.endsWith('-pre-restore')), label).toEqual([]);
    }

    writeFileSync(manifestPath, original); // the manifest as written restores as before
    const done = await restoreSnapshot(config, 'agent', snap.dir, { now: () => T0 + 120_000, log: silentLogger });
    expect(done.undo).toMatch(/-pre-restore$/);
    expect(await fx.pointRows(theirs)).toEqual(before.theirs);
    expect(readFileSync(storeB).equals(before.b)).toBe(true);
  });

  it('two collections: files swapped between their parts are refused', async () => {
    const q = (fixture = await qdrantFixture(ROWS, { collections: 2 }));
    await q.seedPoints(ROWS);
    const config = q.config();
    const snap = await takeSnapshot(config, 'agent', { now: () => T0, log: silentLogger });
    const m = JSON.parse(readFileSync(join(snap.dir, 'manifest.json'), 'utf8')) as Manifest;
    const [p0, p1] = m.qdrant as [Manifest['qdrant'][0], Manifest['qdrant'][0]];
    writeFileSync(join(snap.dir, 'manifest.json'), JSON.stringify({ ...m, qdrant: [{ ...p0, file: p1.file, qdrantChecksum: p1.qdrantChecksum }, { ...p1, file: p0.file, qdrantChecksum: p0.qdrantChecksum }] }));
    const before = await Promise.all(q.collections.map((c) => q.pointRows(c)));
    expect((await failure(restoreSnapshot(config, 'agent', snap.dir, { now: () => T0 + 60_000, log: silentLogger }))).message).toMatch(/records "qdrant\/1-.*" as collection .*'s snapshot: refused/);
    expect(await Promise.all(q.collections.map((c) => q.pointRows(c)))).toEqual(before);
  });
});

describe('restore of mem0\'s SQLite vector files (the SDK\'s own files)', () => {
  it('each goes back to the file the config names; swapped, missing or foreign entries are refused', { timeout: 60_000 }, async () => {
    const tmp = tempDir('mw-vdest-');
    const s = await sdkStore('sqlite', tmp.dir);
    const mem = await s.open();
    await mem.add('Hana Ito prefers window seats', { userId: 'hana', infer: false });
    s.close(mem);
    new Database(s.entityVectorDb).exec('CREATE TABLE entity_marker (x); INSERT INTO entity_marker VALUES (1)'); // a second vector file
    const config = validateConfig({ stateDb: join(tmp.dir, 'state.db'), snapshot: { root: join(tmp.dir, 'b') }, stores: { m: { layout: 'mem0', db: s.historyPath, mem0: { vectorStore: 'sqlite', vectorDb: s.vectorDb } } } });
    const snap = await takeSnapshot(config, 'm', { now: () => T0, log: silentLogger });
    const manifestPath = join(snap.dir, 'manifest.json');
    const original = readFileSync(manifestPath, 'utf8');
    const m = JSON.parse(original) as Manifest;
    expect(m.vectorFiles!.map((p) => p.file)).toEqual(['vectors/0-vector_store.db', 'vectors/1-vector_store_entities.db']);
    const again = await s.open();
    await again.add('Hana Ito moved to Kyoto', { userId: 'hana', infer: false });
    s.close(again);
    const vectorsNow = () => (new Database(s.vectorDb, { readonly: true }).prepare('SELECT count(*) AS n FROM vectors').get() as { n: number }).n;
    expect(vectorsNow()).toBe(2);
    const before = { v: readFileSync(s.vectorDb), e: readFileSync(s.entityVectorDb), h: readFileSync(s.historyPath) };
    const [v0, v1] = m.vectorFiles! as [NonNullable<Manifest['vectorFiles']>[0], NonNullable<Manifest['vectorFiles']>[0]];
    const forgeries: Array<[string, unknown, RegExp]> = [
      ['the two files swapped', { ...m, vectorFiles: [{ ...v0, source: v1.source }, { ...v1, source: v0.source }] }, /not one of store "m"'s vector files/],
      ['one file twice', { ...m, vectorFiles: [v0, { ...v0, file: v1.file }] }, /not one of store "m"'s vector files/],
      ['the entity file left out', { ...m, vectorFiles: [v0] }, /holds no copy of .*vector_store_entities\.db/],
      ['the history database as a vector file', { ...m, vectorFiles: [{ ...v0, source: s.historyPath }, v1] }, /not one of store "m"'s vector files/],
    ];
    for (const [label, forged, why] of forgeries) {
      writeFileSync(manifestPath, JSON.stringify(forged));
      expect((await failure(restoreSnapshot(config, 'm', snap.dir, { now: () => T0 + 60_000, log: silentLogger }))).message, label).toMatch(why);
      expect(readFileSync(s.vectorDb).equals(before.v), label).toBe(true);
      expect(readFileSync(s.entityVectorDb).equals(before.e), label).toBe(true);
      expect(readFileSync(s.historyPath).equals(before.h), label).toBe(true);
    }
    writeFileSync(manifestPath, original);
    const done = await restoreSnapshot(config, 'm', snap.dir, { now: () => T0 + 120_000, log: silentLogger });
    expect(done.steps).toEqual(expect.arrayContaining([`replaced ${s.vectorDb}`, `replaced ${s.entityVectorDb}`]));
    expect(vectorsNow()).toBe(1);
    expect(new Database(s.entityVectorDb, { readonly: true }).prepare('SELECT x FROM entity_marker').pluck().get()).toBe(1);
    tmp.cleanup();
  });
});
