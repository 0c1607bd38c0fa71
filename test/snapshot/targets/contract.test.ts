import { randomBytes, createHash } from 'node:crypto';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTarget } from '../../../src/snapshot/targets/registry.js';
import type { SnapshotTarget } from '../../../src/snapshot/targets/types.js';
import { digestOf, fileBody } from '../../../src/snapshot/targets/digest.js';
import { PLACES, type TargetPlace } from './fixtures.js';

async function* bytes(b: Buffer, chunk = 64 * 1024): AsyncIterable<Buffer> {
  for (let i = 0; i < b.length; i += chunk) yield b.subarray(i, i + chunk);
}
async function* failing(b: Buffer): AsyncIterable<Buffer> {
  yield b;
  throw new Error('source died mid-way');
}
const hex = (b: Buffer) => createHash('sha256').update(b).digest('hex');
async function read(t: SnapshotTarget, snap: string, key: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of await t.get(snap, key, undefined, 200_000)) chunks.push(Buffer.from(c));
  return Buffer.concat(chunks);
}

const SNAP = '2026-11-29T020000Z';
const SNAP2 = '2026-11-30T020000Z';

/** The one contract every target type passes: the same cases against every place. */
describe.each(PLACES)('snapshot target contract: %s', (_label, start) => {
  let place: TargetPlace;
  const opened: SnapshotTarget[] = [];
  const fresh = async () => {
    const t = await openTarget(place.config(), 'agent');
    opened.push(t);
    return t;
  };
  beforeAll(async () => {
    place = await start();
  }, 60_000);
  afterAll(async () => {
    for (const t of opened) await t.close();
    await place?.stop();
  });

  it('stores small, empty and multi-part files byte for byte, and reports their sha256', async () => {
    const t = await fresh();
    const small = randomBytes(1000);
    const big = randomBytes(11 * 1024 * 1024 + 123); // three parts of 5 MiB on S3
    expect(await t.put(SNAP, 'store.db', bytes(small))).toEqual({ bytes: small.length, sha256: hex(small) });
    expect(await t.put(SNAP, 'qdrant/0-memories.snapshot', bytes(big, 1 << 20))).toEqual({ bytes: big.length, sha256: hex(big) });
    expect(await t.put(SNAP, 'empty', bytes(Buffer.alloc(0)))).toEqual({ bytes: 0, sha256: hex(Buffer.alloc(0)) });
    expect((await read(t, SNAP, 'store.db')).equals(small)).toBe(true);
    expect(await digestOf(await t.get(SNAP, 'qdrant/0-memories.snapshot', undefined, big.length))).toEqual({ bytes: big.length, sha256: hex(big) });
    expect(await t.keys(SNAP)).toEqual(['empty', 'qdrant/0-memories.snapshot', 'store.db']);
  });

  it('stores a local file given as a file body byte for byte (empty, small, one of many pieces), mode 0600 where it is a file', async () => {
    const cfg = place.config();
    const t = await openTarget(cfg, 'agent');
    opened.push(t);
    const dir = mkdtempSync(join(tmpdir(), 'mw-filebody-'));
    try {
      for (const [key, b] of [['store.db', randomBytes(9 * 1024 * 1024 + 7)], ['empty', Buffer.alloc(0)], ['vectors/x.snapshot', randomBytes(100)]] as const) {
        const file = join(dir, key.replace('/', '-'));
        writeFileSync(file, b, { mode: 0o644 });
        expect(await t.put(SNAP, key, fileBody(file, 1 << 20))).toEqual({ bytes: b.length, sha256: hex(b) });
        expect(await digestOf(await t.get(SNAP, key, undefined, b.length))).toEqual({ bytes: b.length, sha256: hex(b) });
        if (cfg.type === 'local') expect(statSync(join(cfg.path, 'agent', SNAP, key)).mode & 0o777).toBe(0o600);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('lists a snapshot only once its manifest is there, oldest first', async () => {
    const t = await fresh();
    await t.put(SNAP2, 'store.db', bytes(Buffer.from('b')));
    await t.put(SNAP, 'store.db', bytes(Buffer.from('a')));
    expect(await t.list()).toEqual([]);
    await t.put(SNAP2, 'manifest.json', bytes(Buffer.from('{}')));
    expect(await t.list()).toEqual([SNAP2]);
    await t.put(SNAP, 'manifest.json', bytes(Buffer.from('{}')));
    expect(await t.list()).toEqual([SNAP, SNAP2]);
  });

  it('replaces an object whole when put again', async () => {
    const t = await fresh();
    await t.put(SNAP, 'store.db', bytes(Buffer.from('first version, longer')));
    await t.put(SNAP, 'store.db', bytes(Buffer.from('second')));
    expect((await read(t, SNAP, 'store.db')).toString()).toBe('second');
  });

  it('deletes a snapshot: gone from list, no keys left, others kept', async () => {
    const t = await fresh();
    for (const s of [SNAP, SNAP2]) {
      await t.put(s, 'qdrant/0-m.snapshot', bytes(Buffer.from('q')));
      await t.put(s, 'manifest.json', bytes(Buffer.from('{}')));
    }
    await t.delete(SNAP);
    expect(await t.list()).toEqual([SNAP2]);
    expect(await t.keys(SNAP)).toEqual([]);
    expect(await t.keys(SNAP2)).toEqual(['manifest.json', 'qdrant/0-m.snapshot']);
    await t.delete(SNAP); // twice is fine
  });

  it('a source that fails mid-way leaves nothing under the key, and nothing listed', async () => {
    const t = await fresh();
    await expect(t.put(SNAP, 'store.db', failing(randomBytes(6 * 1024 * 1024)))).rejects.toThrow(/source died mid-way/);
    await expect(t.put(SNAP, 'manifest.json', failing(Buffer.from('{"partial":')))).rejects.toThrow(/source died mid-way/);
    expect(await t.list()).toEqual([]);
    expect((await t.keys(SNAP)).filter((k) => k === 'store.db' || k === 'manifest.json')).toEqual([]);
  });

  it('names every snapshot holding anything, complete or not; cleanPartial leaves objects of snapshots alone', async () => {
    const t = await fresh();
    await t.put(SNAP, 'store.db', bytes(Buffer.from('kept')));
    await t.put(SNAP, 'manifest.json', bytes(Buffer.from('{}')));
    await t.put(SNAP2, 'store.db', bytes(Buffer.from('orphan')));
    expect(await t.list()).toEqual([SNAP]);
    expect(await t.names()).toEqual([SNAP, SNAP2]);
    // A folder without a manifest is the feature's to judge (it removes only what its claim proves ours: checked.ts).
    expect(await t.leftovers()).toEqual([]);
    expect(await t.cleanPartial()).toEqual([]);
    expect(await t.keys(SNAP2)).toEqual(['store.db']);
    expect(await t.keys(SNAP)).toEqual(['manifest.json', 'store.db']);
  });

  it('a delete removes every object, claim and temp files included, and the name with them', async () => {
    const t = await fresh();
    for (const k of ['claim.json', 'store.db', 'qdrant/0-m.snapshot', 'holds.json.gz', 'manifest.json']) await t.put(SNAP, k, bytes(Buffer.from(k)));
    expect(await t.names()).toEqual([SNAP]);
    await t.delete(SNAP);
    expect(await t.names()).toEqual([]);
    expect(await t.keys(SNAP)).toEqual([]);
    // Which order (manifest first, claim last) a kill at each step shows: test/erase/killed-copies.test.ts.
  });

  it('refuses names that would leave the snapshot', async () => {
    const t = await fresh();
    for (const key of ['../x', 'a/../../x', '/etc/passwd', 'a//b', '', '.', 'qdrant/..']) {
      await expect(t.put(SNAP, key, bytes(Buffer.from('x'))), key).rejects.toThrow(/not a safe key/);
    }
    for (const snap of ['..', '../other', 'latest', '2026-11-29T020000Z/../x']) {
      await expect(t.put(snap, 'store.db', bytes(Buffer.from('x'))), snap).rejects.toThrow(/not a snapshot name/);
      await expect(t.delete(snap), snap).rejects.toThrow(/not a snapshot name/);
    }
  });

  it('get yields no more than maxBytes: a larger object is a store error naming it, a smaller one is read whole', async () => {
    const t = await fresh();
    const b = randomBytes(200_000);
    await t.put(SNAP, 'store.db', bytes(b));
    for (const max of [0, 1, 65_535, 199_999]) {
      const got: Buffer[] = [];
      const err = await (async () => { for await (const c of await t.get(SNAP, 'store.db', undefined, max)) got.push(Buffer.from(c)); })().then(() => null, (e: Error) => e);
      expect(err?.message, `max ${max}`).toMatch(/target \w+: .*store\.db.*larger than its recorded/);
      expect(err?.message, `max ${max}`).not.toContain('\n');
      expect(Buffer.concat(got).length, `max ${max}`).toBeLessThanOrEqual(max);
      expect(b.subarray(0, Buffer.concat(got).length).equals(Buffer.concat(got)), `max ${max}`).toBe(true);
    }
    expect((await read(t, SNAP, 'store.db')).equals(b)).toBe(true); // maxBytes = its size, or more
  });

  it('a missing object is a one-line store error naming it', async () => {
    const t = await fresh();
    const err = await t.get(SNAP, 'store.db', undefined, 100).then(async (s) => { for await (const _ of s) void _; }).then(() => null, (e: Error) => e);
    expect(err?.message).toMatch(/target \w+: .*store\.db/);
    expect(err?.message).not.toContain('\n');
  });
});
