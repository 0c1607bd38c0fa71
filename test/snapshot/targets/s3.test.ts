import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTarget } from '../../../src/snapshot/targets/registry.js';
import { WardenError } from '../../../src/core/errors.js';
import { s3Place, type TargetPlace } from './fixtures.js';
import { uploadJournalFor } from '../../../src/snapshot/targets/s3/journal.js';
import type { S3TargetConfig } from '../../../src/snapshot/targets/s3/schema.js';

async function* bytes(b: Buffer): AsyncIterable<Buffer> {
  yield b;
}
const SNAP = '2026-11-29T020000Z';
const failure = (p: Promise<unknown>) => p.then(() => { throw new Error('expected a failure'); }, (e: WardenError) => e);

/** What S3 storage can do wrong, injected by the loopback server. */
describe('s3 target faults', () => {
  let place: TargetPlace;
  beforeAll(async () => {
    place = await s3Place();
  });
  afterAll(() => place.stop());
  const s3 = () => place.s3!;
  const open = (extra: Record<string, unknown> = {}) => openTarget(place.config(extra), 'agent');

  it('storage reporting a different checksum than sent: the put fails (retryable) and the object is deleted', async () => {
    for (const size of [100, 7 * 1024 * 1024]) {
      const t = await open();
      s3().faults.push({ match: (r) => r.method === (size > 100 ? 'POST' : 'PUT') && r.key.endsWith('/store.db') && (size === 100 || r.query.has('uploadId')), action: 'wrong-checksum' });
      const err = await failure(t.put(SNAP, 'store.db', bytes(randomBytes(size))));
      expect(err.transient, err.message).toBe(true);
      expect(err.message).toMatch(/storage reports .* sent .*object deleted/);
      expect(await t.keys(SNAP)).toEqual([]);
      await t.close();
    }
  });

  it('a part whose reported checksum differs aborts the multipart upload', async () => {
    const t = await open();
    s3().faults.push({ match: (r) => r.method === 'PUT' && r.query.get('partNumber') === '2', action: 'wrong-checksum' });
    const err = await failure(t.put(SNAP, 'big', bytes(randomBytes(11 * 1024 * 1024))));
    expect(err.message).toMatch(/part 2: storage reports sha256/);
    expect([...s3().uploads.values()].filter((u) => u.key.includes('/big'))).toEqual([]);
    await t.close();
  });

  it('503s: retried by the SDK up to maxAttempts, then a transient failure naming the status', async () => {
    const t = await open({ maxAttempts: 2 });
    s3().faults.push({ match: (r) => r.key.endsWith('manifest.json'), action: { status: 503 }, times: 1 });
    await t.put(SNAP, 'manifest.json', bytes(Buffer.from('{}'))); // one 503, then the retry goes through
    s3().faults.push({ match: (r) => r.key.endsWith('manifest.json'), action: { status: 503 }, times: 2 });
    const err = await failure(t.put(SNAP, 'manifest.json', bytes(Buffer.from('{"b":1}'))));
    expect(err.transient).toBe(true);
    expect(err.message).toMatch(/HTTP 503/);
    await t.close();
  });

  it('a storage that never answers fails as transient after timeoutMs', async () => {
    const t = await open({ timeoutMs: 300 });
    s3().faults.push({ match: (r) => r.method === 'PUT', action: 'hang' });
    const err = await failure(t.put(SNAP, 'store.db', bytes(Buffer.from('x'))));
    expect(err.transient, err.message).toBe(true);
    await t.close();
  });

  it('unreachable is transient; refused credentials are not, and never appear in the message', async () => {
    const down = await openTarget(place.config({ endpoint: 'http://127.0.0.1:9' }), 'agent');
    expect((await failure(down.list())).transient).toBe(true);
    await down.close();
    const secret = 'wrong-secret-value-123';
    const bad = await openTarget(place.config({ accessKeyId: 'AKWRONG', secretAccessKey: secret }), 'agent');
    const err = await failure(bad.list());
    expect(err.transient).toBe(false);
    expect(err.message).toMatch(/HTTP 403/);
    expect(err.message).not.toContain(secret);
    await bad.close();
  });

  it('cleanPartial aborts the unfinished uploads this machine journaled, by id, and no upload it did not start', async () => {
    const cfg = place.config();
    const t = await openTarget(cfg, 'agent');
    const key = `${(cfg as S3TargetConfig).prefix}agent/${SNAP}/store.db`;
    const journal = uploadJournalFor(cfg as S3TargetConfig, 'agent');
    journal.started(journal.begin(key), 'left-by-kill');
    s3().uploads.set('left-by-kill', { key, parts: new Map() });
    s3().uploads.set('not-started-here', { key, parts: new Map() });
    s3().uploads.set('someone-else', { key: `other/agent/${SNAP}/store.db`, parts: new Map() });
    expect(await t.cleanPartial()).toEqual([`bucket:${SNAP}/store.db (multipart upload)`]);
    expect(s3().uploads.has('left-by-kill')).toBe(false);
    expect(s3().uploads.has('not-started-here')).toBe(true);
    expect(s3().uploads.has('someone-else')).toBe(true);
    expect(await t.cleanPartial()).toEqual([]);
    await t.close();
  });
});
