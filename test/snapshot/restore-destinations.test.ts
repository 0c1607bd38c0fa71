import { afterEach, describe, expect, it } from 'vitest';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { silentLogger } from '../../src/logger.js';
import { takeSnapshot } from '../../src/snapshot/create.js';
import { restoreSnapshot } from '../../src/snapshot/restore.js';
import type { Manifest } from '../../src/snapshot/manifest.js';
import type { Config } from '../../src/config.js';
import type { WardenError } from '../../src/errors.js';
import { makeStore, type Row } from '../helpers/store.js';
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

let fx: QdrantFixture;
afterEach(async () => {
  await fx?.close();
});

describe('restore takes destinations from the config only', () => {
  it('refuses a manifest naming another store\'s file or collection, another layout or store; nothing changes', async () => {
    fx = await qdrantFixture(ROWS, { collections: 2 });
    const [mine, theirs] = fx.collections as [string, string];
    await fx.seedPoints(ROWS, { collections: [mine] });
    await fx.seedPoints(OTHER_ROWS, { collections: [theirs] }); // store b's collection, on the same Qdrant
    const config: Config = fx.config({ qdrant: { collections: [mine] } });
    const storeB = makeStore(join(fx.dir, 'b.db'), OTHER_ROWS);
    const snap = await takeSnapshot(config, 'agent', { now: () => T0, log: silentLogger });
    const manifestPath = join(snap.dir, 'manifest.json');
    const original = readFileSync(manifestPath, 'utf8');
    const m = JSON.parse(original) as Manifest;

    const before = { a: readFileSync(fx.dbPath), b: readFileSync(storeB), mine: await fx.pointRows(mine), theirs: await fx.pointRows(theirs) };
    const forgeries: Array<[string, Partial<Manifest> & Record<string, unknown>, RegExp]> = [
      ['vector file naming store b\'s database', { vectorFiles: [{ ...m.sqlite, source: storeB }] }, /vector file for .*b\.db.*not one of store "agent"'s vector files/],
      ['vector file naming the store\'s own database', { vectorFiles: [{ ...m.sqlite, source: fx.dbPath }] }, /not one of store "agent"'s vector files/],
      ['vector file by a relative path', { vectorFiles: [{ ...m.sqlite, source: '../b.db' }] }, /not one of store "agent"'s vector files/],
      ['vector file outside any store', { vectorFiles: [{ ...m.sqlite, source: join(fx.dir, 'new.db') }] }, /not one of store "agent"'s vector files/],
      ['a part for store b\'s collection', { qdrant: [...m.qdrant, { ...m.qdrant[0]!, collection: theirs }] }, new RegExp(`collection\\(s\\) ${theirs} that store "agent" does not have`)],
      ['the collection renamed to store b\'s', { qdrant: [{ ...m.qdrant[0]!, collection: theirs }] }, /does not have|holds no snapshot of collection/],
      ['the store\'s collection twice', { qdrant: [m.qdrant[0]!, m.qdrant[0]!] }, /does not have \(or twice\)/],
      ['another layout', { layout: 'mem0' }, /snapshot of a mem0 store; store "agent" is warden/],
      ['another store', { store: 'b' }, /snapshot of store "b", not "agent"/],
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
});
