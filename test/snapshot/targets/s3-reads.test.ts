/**
 * S3 downloads stop at the size on record plus one byte: endless answers, objects stated larger, empty objects,
 * and restore --target's fetch and verify against a storage that streams for ever.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/log/logger.js';
import { takeSnapshot } from '../../../src/snapshot/create.js';
import { openTarget } from '../../../src/snapshot/targets/registry.js';
import { fetchSnapshot, replicateStore, verifyRemote, withTarget } from '../../../src/snapshot/targets/replicate.js';
import type { SnapshotTarget } from '../../../src/snapshot/targets/types.js';
import type { WardenError } from '../../../src/core/errors.js';
import { qdrantFixture, type QdrantFixture } from '../../helpers/qdrant-store.js';
import { motoPlace, s3Place, s3rverPlace, type TargetPlace } from './fixtures.js';

async function* bytes(b: Buffer): AsyncIterable<Buffer> {
  yield b;
}
const SNAP = '2026-11-29T020000Z';
const failure = (p: Promise<unknown>) => p.then(() => { throw new Error('expected a failure'); }, (e: WardenError) => e);

/** Read a stream to its end, counting what it passed on: the failure, if any, and the bytes before it. */
async function drain(source: AsyncIterable<Uint8Array>): Promise<{ passed: number; error?: WardenError }> {
  let passed = 0;
  try {
    for await (const c of source) passed += c.length;
    return { passed };
  } catch (error) {
    return { passed, error: error as WardenError };
  }
}

describe('s3 target: downloads bounded by the size on record', () => {
  let place: TargetPlace;
  let rver: TargetPlace;
  let moto: TargetPlace;
  const opened: SnapshotTarget[] = [];
  beforeAll(async () => {
    place = await s3Place();
    rver = await s3rverPlace();
    moto = await motoPlace();
  });
  afterAll(async () => {
    for (const t of opened) await t.close();
    await place.stop();
    await rver.stop();
    await moto.stop();
  });
  const open = async (p: TargetPlace) => {
    const t = await openTarget(p.config(), 'agent');
    opened.push(t);
    return t;
  };

  it('an endless answer (an object linked to /dev/zero): passes on at most the recorded size, fails past it, hangs up', async () => {
    const t = await open(place);
    for (const size of [0, 1, 1000, 200_000]) {
      await t.put(SNAP, 'store.db', bytes(randomBytes(size)));
      place.s3!.faults.push({ match: (r) => r.method === 'GET' && r.key.endsWith('/store.db'), action: 'endless' });
      const { passed, error } = await drain(await t.get(SNAP, 'store.db', undefined, size));
      expect(passed).toBeLessThanOrEqual(size);
      expect(error?.message).toMatch(new RegExp(`^target bucket: download s3://.*/store\\.db: larger than its recorded ${size} bytes; not read further$`));
      const endless = place.s3!.log.filter((r) => r.streamed !== undefined).at(-1)!;
      await endless.hungUp; // the connection is closed: this settles, the stream does not go on
      expect(endless.streamed).toBeLessThan(64 * 1024 * 1024);
    }
  });

  it('asks for the recorded size and one byte more; an object stated larger is refused before a byte is read', async () => {
    const mark = place.s3!.log.length;
    const noRange = await s3Place({ lacks: ['range'] });
    for (const p of [place, rver, moto, noRange]) {
      const t = await open(p);
      await t.put(SNAP, 'store.db', bytes(randomBytes(5000)));
      for (const recorded of [4999, 1, 0]) {
        const err = await failure(t.get(SNAP, 'store.db', undefined, recorded));
        expect(err.message).toMatch(new RegExp(`store\\.db: larger than its recorded ${recorded} bytes \\(the storage states 5000\\); not read$`));
      }
      for (const recorded of [5000, 5001, 1 << 30]) expect((await drain(await t.get(SNAP, 'store.db', undefined, recorded))).passed).toBe(5000);
    }
    await noRange.stop();
    const ranges = place.s3!.log.slice(mark).filter((r) => r.method === 'GET').map((r) => r.headers.range);
    expect(ranges).toEqual(['bytes=0-4999', 'bytes=0-1', 'bytes=0-0', 'bytes=0-5000', 'bytes=0-5001', `bytes=0-${1 << 30}`]);
  });

  it('an empty object read with its size (0) or more: empty, on the loopback server (416 to the range, as S3), s3rver and moto', async () => {
    for (const p of [place, rver, moto]) {
      const t = await open(p);
      await t.put(SNAP, 'empty', bytes(Buffer.alloc(0)));
      expect(await drain(await t.get(SNAP, 'empty', undefined, 0))).toEqual({ passed: 0 });
      expect(await drain(await t.get(SNAP, 'empty', undefined, 10))).toEqual({ passed: 0 });
    }
  });
});

describe('fetch and verify from an S3 storage that streams for ever', () => {
  let place: TargetPlace;
  let fx: QdrantFixture;
  beforeAll(async () => {
    place = await s3Place();
  });
  afterAll(() => place.stop());
  afterEach(async () => {
    await fx?.close();
  });

  it('restore --target\'s download writes no more than each file\'s recorded size, and fails naming the file', async () => {
    fx = await qdrantFixture([{ id: 'm_1', subject: 's', fact: 'a fact' }]);
    const tcfg = place.config();
    const config = fx.config({ snapshot: { targets: [tcfg] } });
    const local = await takeSnapshot(config, 'agent', { now: () => Date.parse('2026-11-29T02:00:00Z'), log: silentLogger });
    await replicateStore(config, 'agent', { log: silentLogger, now: () => Date.now() });
    const recorded = statSync(join(local.dir, 'store.db')).size;
    await withTarget(tcfg, 'agent', async (t) => {
      place.s3!.faults.push({ match: (r) => r.method === 'GET' && r.key.endsWith('/store.db'), action: 'endless' });
      expect((await failure(verifyRemote(t, local.name))).message).toMatch(/store\.db: larger than its recorded \d+ bytes; not read further/);
      place.s3!.faults.push({ match: (r) => r.method === 'GET' && r.key.endsWith('/store.db'), action: 'endless' });
      const fetchDir = mkdtempSync(join(tmpdir(), 'mw-fetch-'));
      const dest = join(fetchDir, 'got');
      expect((await failure(fetchSnapshot(t, tcfg, local.name, dest))).message).toMatch(/store\.db: larger than its recorded \d+ bytes; not read further/);
      const written = join(dest, 'store.db');
      expect(existsSync(written) ? statSync(written).size : 0).toBeLessThanOrEqual(recorded);
      rmSync(fetchDir, { recursive: true, force: true, maxRetries: 10 });
    });
  });
});
