/**
 * The S3 target against storages that implement less than S3 (no checksums, multipart, upload listing or abort),
 * or that say what is not so (sizes, checksums, ETags): the loopback server's limits and faults.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fileBody } from '../../../src/snapshot/targets/digest.js';
import { hashThreadPolicy } from '../../../src/snapshot/targets/hash-worker.js';
import { openTarget } from '../../../src/snapshot/targets/registry.js';
import { uploadJournalFor } from '../../../src/snapshot/targets/s3/journal.js';
import type { S3TargetConfig } from '../../../src/snapshot/targets/s3/schema.js';
import type { SnapshotTarget } from '../../../src/snapshot/targets/types.js';
import type { WardenError } from '../../../src/core/errors.js';
import type { S3ServerOptions, S3Request } from '../../helpers/s3-server.js';
import { s3Place, type TargetPlace } from './fixtures.js';

async function* bytes(b: Buffer, chunk = 1 << 20): AsyncIterable<Buffer> {
  for (let i = 0; i < b.length; i += chunk) yield b.subarray(i, i + chunk);
  if (b.length === 0) yield b;
}
const SNAP = '2026-11-29T020000Z';
const BIG = 11 * 1024 * 1024 + 7; // three parts of 5 MiB
const hex = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const failure = (p: Promise<unknown>) => p.then(() => { throw new Error('expected a failure'); }, (e: WardenError) => e);

const places: TargetPlace[] = [];
const opened: SnapshotTarget[] = [];
const folders: string[] = [];
const scratch = () => folders[folders.push(mkdtempSync(join(tmpdir(), 'mw-s3-compat-'))) - 1]!;
afterAll(async () => {
  for (const t of opened) await t.close();
  for (const p of places) await p.stop();
  for (const f of folders) rmSync(f, { recursive: true, force: true });
});

/** A fresh server with these limits, and a target on it with its own prefix and journal. */
async function storage(options: S3ServerOptions = {}, extra: Record<string, unknown> = {}) {
  const place = await s3Place(options);
  places.push(place);
  const tcfg = place.config(extra);
  const cfg = tcfg as S3TargetConfig;
  const t = await openTarget(tcfg, 'agent');
  opened.push(t);
  const s3 = place.s3!;
  const key = (k: string) => `${cfg.prefix}agent/${SNAP}/${k}`;
  const requests = (k: string, method?: string) => s3.log.filter((r: S3Request) => r.key === key(k) && (!method || r.method === method));
  return { t, s3, cfg, key, requests, journal: uploadJournalFor(cfg, 'agent') };
}

describe('uploads to a storage that reports no checksum', () => {
  it('single and multipart uploads are confirmed by the md5 ETag, without reading them back; read-back mode reads each back', async () => {
    for (const verifyUploads of ['auto', 'read-back'] as const) {
      const { t, s3, key, requests } = await storage({ lacks: ['checksums'] }, { verifyUploads });
      const small = randomBytes(1000);
      const big = randomBytes(BIG);
      expect(await t.put(SNAP, 'store.db', bytes(small))).toEqual({ bytes: small.length, sha256: hex(small) });
      expect(await t.put(SNAP, 'big', bytes(big))).toEqual({ bytes: big.length, sha256: hex(big) });
      expect(s3.objects.get(key('store.db'))!.body.equals(small)).toBe(true);
      expect(s3.objects.get(key('big'))!.body.equals(big)).toBe(true);
      expect(requests('store.db', 'GET').length + requests('big', 'GET').length).toBe(verifyUploads === 'auto' ? 0 : 2);
    }
  });

  it('an ETag that is not the md5 (as with encryption at rest): the object is read back, and kept because it matches', async () => {
    const { t, s3, requests } = await storage({ lacks: ['checksums'] });
    s3.faults.push({ match: (r) => r.method === 'HEAD', action: 'wrong-etag', times: 2 });
    const body = randomBytes(5000);
    await t.put(SNAP, 'store.db', bytes(body));
    await t.put(SNAP, 'big', bytes(randomBytes(BIG)));
    expect(requests('store.db', 'GET')).toHaveLength(1);
    expect(requests('big', 'GET')).toHaveLength(1);
    expect((await t.keys(SNAP)).sort()).toEqual(['big', 'store.db']);
  });

  it('a storage that keeps other bytes than it was sent: caught by its ETag and reading back, the object deleted', async () => {
    // Honest ETag, no checksum: caught. One that reports what was sent in every form: caught only by read-back mode.
    for (const [lacks, verifyUploads, action] of [[['checksums'], 'auto', 'store-other'], [['checksums'], 'read-back', 'store-other-lying'], [[], 'read-back', 'store-other-lying']] as const) {
      const { t, s3, journal } = await storage({ lacks: [...lacks] }, { verifyUploads });
      s3.faults.push({ match: (r) => r.method === 'PUT' && r.key.endsWith('/store.db'), action });
      s3.faults.push({ match: (r) => r.method === 'PUT' && r.query.get('partNumber') === '2', action });
      for (const [k, size] of [['store.db', 700], ['big', BIG]] as const) {
        const err = await failure(t.put(SNAP, k, bytes(randomBytes(size))));
        expect(err.transient, err.message).toBe(true);
        expect(err.message).toMatch(new RegExp(`${k}: storage reports when read back sha256 [0-9a-f]{64}, sent sha256 .*object deleted`));
        expect(err.message).not.toContain('\n');
      }
      expect(await t.keys(SNAP)).toEqual([]);
      expect(journal.pending()).toEqual([]);
    }
  });

  it('a storage reporting another size, or a checksum other than sent: the object is deleted', async () => {
    for (const action of ['wrong-size', 'wrong-checksum'] as const) {
      const { t, s3 } = await storage();
      s3.faults.push({ match: (r) => r.method === (action === 'wrong-size' ? 'HEAD' : 'PUT'), action });
      const err = await failure(t.put(SNAP, 'store.db', bytes(randomBytes(300))));
      expect(err.message).toMatch(action === 'wrong-size' ? /storage reports 301 bytes, sent .*object deleted/ : /storage reports sha256 .*object deleted/);
      expect(await t.keys(SNAP)).toEqual([]);
    }
  });

  it('a multipart object\'s sha256 in each form storages report (S3\'s `-N`, moto\'s without it, the whole object\'s): accepted', async () => {
    for (const multipartChecksum of ['composite-n', 'composite', 'whole'] as const) {
      const { t, s3, requests } = await storage({ multipartChecksum });
      const big = randomBytes(BIG);
      expect(await t.put(SNAP, 'big', bytes(big))).toEqual({ bytes: big.length, sha256: hex(big) });
      expect(requests('big', 'GET')).toEqual([]); // the reported sha256 sufficed
      s3.faults.push({ match: (r) => r.method === 'POST' && r.query.has('uploadId'), action: 'wrong-checksum' });
      expect((await failure(t.put(SNAP, 'big', bytes(big)))).message).toMatch(/storage reports sha256 .*object deleted/);
    }
  });

  it('every object and every part goes up with the Content-MD5 of its bytes', async () => {
    const { t, s3 } = await storage({ lacks: ['checksums'] });
    await t.put(SNAP, 'store.db', bytes(randomBytes(10)));
    await t.put(SNAP, 'big', bytes(randomBytes(BIG)));
    const puts = s3.log.filter((r) => r.method === 'PUT');
    expect(puts).toHaveLength(4); // one object, three parts
    for (const r of puts) expect(r.headers['content-md5'], `${r.key} ${r.query}`).toMatch(/^[A-Za-z0-9+/]{22}==$/);
  });
});

describe('what each request carries: every byte hashed once, and checked by the storage', () => {
  const partsOf = (requests: S3Request[]) => requests.filter((r) => r.method === 'PUT' && r.query.has('partNumber'))
    .sort((a, b) => Number(a.query.get('partNumber')) - Number(b.query.get('partNumber')));

  it('each part is signed with its own sha256; once the storage has answered with the sha256 it was sent, no Content-MD5', async () => {
    const { t, s3, requests } = await storage();
    const big = randomBytes(BIG);
    expect(await t.put(SNAP, 'big', bytes(big))).toEqual({ bytes: big.length, sha256: hex(big) });
    // Nothing shown yet: the first upload's parts carry Content-MD5 as well.
    const first = partsOf(requests('big'));
    expect(first).toHaveLength(3);
    for (const r of first) expect(r.headers['content-md5']).toMatch(/^[A-Za-z0-9+/]{22}==$/);
    s3.log.length = 0;
    expect(await t.put(SNAP, 'big', bytes(big))).toEqual({ bytes: big.length, sha256: hex(big) });
    const parts = partsOf(requests('big'));
    const want = [0, 1, 2].map((i) => hex(big.subarray(i * 5 * 1024 * 1024, (i + 1) * 5 * 1024 * 1024)));
    expect(parts.map((r) => r.headers['x-amz-content-sha256'])).toEqual(want);
    expect(parts.map((r) => r.headers['x-amz-checksum-sha256'])).toEqual(want.map((h) => Buffer.from(h, 'hex').toString('base64')));
    expect(parts.filter((r) => r.headers['content-md5'] !== undefined)).toEqual([]);
    expect(requests('big', 'GET')).toEqual([]); // confirmed by the sha256 the storage reports
  });

  it('the storage refuses a body that is not what its x-amz-content-sha256 or x-amz-checksum-sha256 says', async () => {
    const { s3, key } = await storage();
    const body = Buffer.from('the bytes sent');
    const put = (headers: Record<string, string>) => fetch(`${(s3 as unknown as { endpoint: string }).endpoint}/${s3.bucket}/${key('x')}`, {
      method: 'PUT', body, headers: { authorization: `AWS4-HMAC-SHA256 Credential=${s3.accessKeyId}/20261129/us-east-1/s3/aws4_request`, ...headers },
    });
    const other = createHash('sha256').update('other bytes').digest();
    expect(await (await put({ 'x-amz-content-sha256': other.toString('hex') })).text()).toContain('XAmzContentSHA256Mismatch');
    expect(await (await put({ 'x-amz-content-sha256': hex(body), 'x-amz-checksum-sha256': other.toString('base64') })).text()).toContain('BadDigest');
    expect(s3.objects.size).toBe(0);
    expect((await put({ 'x-amz-content-sha256': hex(body) })).status).toBe(200);
  });

  it('a storage without multipart uploads: the spooled PUT is signed with the object\'s sha256', async () => {
    const { t, requests } = await storage({ lacks: ['multipart'] });
    const big = randomBytes(BIG);
    expect(await t.put(SNAP, 'big', bytes(big))).toEqual({ bytes: big.length, sha256: hex(big) });
    expect(requests('big', 'PUT').map((r) => r.headers['x-amz-content-sha256'])).toEqual([hex(big)]);
  });

  it('parts hashed on the hashing thread or here, one or more in flight, from a file or a stream: stored byte for byte', async () => {
    const dir = scratch();
    const big = randomBytes(4 * 5 * 1024 * 1024 + 13);
    writeFileSync(join(dir, 'big'), big);
    try {
      // One part in flight: each buffer is taken again at once, for the part after next.
      for (const [policy, concurrency, body] of [['always', 1, () => bytes(big, 3 * 1024 * 1024 + 1)], ['always', 2, () => fileBody(join(dir, 'big'), 1 << 20)], ['never', 1, () => fileBody(join(dir, 'big'), 1 << 20)]] as const) {
        hashThreadPolicy(policy);
        const { t, s3, key } = await storage({}, { concurrency });
        await t.put(SNAP, 'warm', bytes(Buffer.from('a small object first: the storage shows it takes checksums')));
        expect(await t.put(SNAP, 'big', body())).toEqual({ bytes: big.length, sha256: hex(big) });
        expect(s3.objects.get(key('big'))!.body.equals(big)).toBe(true);
      }
    } finally {
      hashThreadPolicy('auto');
    }
  });
});

describe('optional calls the storage does not implement', () => {
  it('501 to any checksum header: sent again without, once; later uploads do not send them', async () => {
    const { t, s3 } = await storage({ lacks: ['checksum-headers'] });
    const small = randomBytes(100);
    const big = randomBytes(BIG);
    expect(await t.put(SNAP, 'store.db', bytes(small))).toEqual({ bytes: small.length, sha256: hex(small) });
    expect(await t.put(SNAP, 'big', bytes(big))).toEqual({ bytes: big.length, sha256: hex(big) });
    expect(s3.objects.get(`${[...s3.objects.keys()].find((k) => k.endsWith('/big'))}`)!.body.equals(big)).toBe(true);
    expect(s3.log.filter((r) => Object.keys(r.headers).some((h) => h.startsWith('x-amz-checksum-')))).toHaveLength(1);
  });

  it('no multipart uploads (501): a large file goes up as one PUT from a spool file that is gone; learnt once', async () => {
    const { t, s3, cfg, requests } = await storage({ lacks: ['multipart'] });
    const big = randomBytes(BIG);
    expect(await t.put(SNAP, 'big', bytes(big))).toEqual({ bytes: big.length, sha256: hex(big) });
    expect(await t.put(SNAP, 'big2', bytes(big))).toEqual({ bytes: big.length, sha256: hex(big) });
    expect(requests('big', 'PUT')).toHaveLength(1);
    // Asked twice (with the checksum algorithm, then without), then never again.
    expect(s3.log.filter((r) => r.query.has('uploads'))).toHaveLength(2);
    expect(readdirSync(cfg.uploadJournalDir)).toEqual([]);
    await expect(t.put(SNAP, 'failing', (async function* () {
      yield randomBytes(BIG);
      throw new Error('source died mid-way');
    })())).rejects.toThrow(/source died mid-way/);
    s3.faults.push({ match: (r) => r.method === 'PUT' && r.key.endsWith('/big3'), action: { status: 503 } });
    const err = await failure(t.put(SNAP, 'big3', bytes(big)));
    expect(err.transient, err.message).toBe(true);
    expect((await t.keys(SNAP)).sort()).toEqual(['big', 'big2']);
    expect(readdirSync(cfg.uploadJournalDir)).toEqual([]);
  });
});

describe('cleanPartial: the uploads this machine started, by id', () => {
  it('no ListMultipartUploads (501): a journaled upload is aborted by id; one whose id a kill lost is said to be unknown', async () => {
    const { t, s3, key, journal } = await storage({ lacks: ['list-uploads'] });
    journal.started(journal.begin(key('store.db')), 'by-id');
    s3.uploads.set('by-id', { key: key('store.db'), parts: new Map() });
    journal.begin(key('big'));
    const unknown = /^bucket:2026-11-29T020000Z\/big \(multipart upload: unknown whether one was started; the storage does not list multipart uploads; journal \S+\.json kept: delete it once you know none is left\)$/;
    expect((await t.cleanPartial()).sort()).toEqual([expect.stringMatching(unknown), `bucket:${SNAP}/store.db (multipart upload)`]);
    expect(s3.uploads.has('by-id')).toBe(false);
    // Unknown stays unknown: the entry is kept, so erase keeps saying it cannot rule the upload out.
    expect(journal.pending().map((e) => e.key)).toEqual([key('big')]);
    expect(await t.leftovers()).toEqual([expect.stringMatching(/^bucket:2026-11-29T020000Z\/big \(multipart upload, journal /)]);
  });

  it('an upload whose id a kill lost is found by its exact key where the storage lists uploads', async () => {
    const { t, s3, key, journal } = await storage();
    journal.begin(key('store.db'));
    s3.uploads.set('lost-id', { key: key('store.db'), parts: new Map() });
    s3.uploads.set('other-key', { key: key('store.db.other'), parts: new Map() });
    expect(await t.cleanPartial()).toEqual([`bucket:${SNAP}/store.db (multipart upload)`]);
    expect([...s3.uploads.keys()]).toEqual(['other-key']);
  });

  it('no AbortMultipartUpload (405): a failed upload keeps its entry, and cleanPartial says it could not remove it', async () => {
    const { t, s3, journal } = await storage({ lacks: ['abort-upload'] });
    s3.faults.push({ match: (r) => r.query.get('partNumber') === '2', action: { status: 400 } });
    await expect(t.put(SNAP, 'big', bytes(randomBytes(BIG)))).rejects.toThrow(/upload part 2 .*HTTP 400/);
    expect(journal.pending()).toHaveLength(1);
    const [said] = await t.cleanPartial();
    expect(said).toMatch(/^bucket:2026-11-29T020000Z\/big \(multipart upload [0-9a-f]+ not removed: the storage does not abort multipart uploads; its parts may stay stored; journal \S+\.json kept: delete it once they are gone\)$/);
    expect(journal.pending()).toHaveLength(1); // its parts may hold a store's data: erase keeps finding it
  });

  it('a failed upload that was aborted leaves no entry; a transient abort failure keeps it for the next run', async () => {
    const { t, s3, journal } = await storage();
    s3.faults.push({ match: (r) => r.query.get('partNumber') === '2', action: { status: 400 } });
    await expect(t.put(SNAP, 'big', bytes(randomBytes(BIG)))).rejects.toThrow(/HTTP 400/);
    expect(journal.pending()).toEqual([]);
    s3.faults.push({ match: (r) => r.query.get('partNumber') === '2', action: { status: 400 } });
    s3.faults.push({ match: (r) => r.method === 'DELETE' && r.query.has('uploadId'), action: { status: 503 } });
    await expect(t.put(SNAP, 'big', bytes(randomBytes(BIG)))).rejects.toThrow(/HTTP 400/);
    expect(journal.pending()).toHaveLength(1);
    expect(s3.uploads.size).toBe(1);
    expect(await t.cleanPartial()).toEqual([`bucket:${SNAP}/big (multipart upload)`]);
    expect(s3.uploads.size).toBe(0);
  });

  it('a journal that cannot be written: the multipart upload is not started, and the failure names the folder', async () => {
    const { t, s3, cfg } = await storage({}, { uploadJournalDir: join(scratch(), 'not-a-folder') });
    writeFileSync(cfg.uploadJournalDir, 'a file where the folder should be');
    const err = await failure(t.put(SNAP, 'big', bytes(randomBytes(BIG))));
    expect(err.message).toMatch(new RegExp(`record the S3 upload of .*/big in ${cfg.uploadJournalDir}: EEXIST$`));
    expect(s3.log.filter((r) => r.query.has('uploads'))).toEqual([]);
  });

  it('a journal entry that cannot be read: a one-line error naming the file, and nothing is aborted', async () => {
    const { t, s3, cfg, key, journal } = await storage();
    journal.started(journal.begin(key('store.db')), 'kept');
    s3.uploads.set('kept', { key: key('store.db'), parts: new Map() });
    for (const text of ['{"format":"memory-warden-s3-upload/1",', '{"format":"other"}', JSON.stringify({ format: 'memory-warden-s3-upload/1', endpoint: 'e', bucket: 'b', base: 'x/', key: 'y/z' })]) {
      const bad = join(cfg.uploadJournalDir, `${'0'.repeat(24)}.json`);
      writeFileSync(bad, text);
      const err = await failure(t.cleanPartial());
      expect(err.message).toContain(bad);
      expect(err.message).not.toContain('\n');
      expect(s3.uploads.has('kept')).toBe(true);
    }
  });
});
