/**
 * Sending one object to S3: a single PUT, a journaled multipart upload, or one PUT from a spool file where the
 * storage has no multipart uploads; each signed with its sha256 (`x-amz-content-sha256`, hashed once, here) and
 * sent with, where taken, `x-amz-checksum-sha256`, and Content-MD5 unless the storage has shown it checks sha256.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync } from 'node:fs';
import { open, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import {
  AbortMultipartUploadCommand, CompleteMultipartUploadCommand, CreateMultipartUploadCommand, PutObjectCommand, UploadPartCommand,
  type CompletedPart,
} from '@aws-sdk/client-s3';
import { transientError } from '../../../core/errors.js';
import { running } from '../../../core/pid.js';
import { DIR_MODE, FILE_MODE } from '../../layout.js';
import { PieceHash, type Algo } from '../hash-worker.js';
import type { ObjectDigest } from '../types.js';
import { confirmUpload, type Sent } from './confirm.js';
import type { UploadJournal } from './journal.js';
import type { PartPool } from './parts.js';
import { notThere, signedPayload, unsupported, withOptionalChecksum, type S3Context } from './requests.js';

export interface Uploader extends S3Context {
  concurrency: number;
  verify: 'auto' | 'read-back';
  journal: UploadJournal;
  /** A folder on a disk (not tmpfs) for the spool file of the no-multipart fallback. */
  spoolDir: string;
  /** What the storage has shown it lacks, learnt once per target. */
  lacks: { checksums: boolean; multipart: boolean };
  /**
   * What the storage has shown it does: `checksums` once it answered a request with the very
   * `x-amz-checksum-sha256` it was sent (S3 refuses a body that does not match it: BadDigest). Its parts then go
   * without Content-MD5, and no md5 is made: the sha256 checked by the storage is the stronger check of the two.
   */
  shows: { checksums: boolean };
}

const b64 = (d: Buffer) => d.toString('base64');
const digest = (algo: 'sha256' | 'md5', b: Buffer) => createHash(algo).update(b).digest();

export async function putSingle(u: Uploader, Key: string, buf: Buffer, signal?: AbortSignal): Promise<ObjectDigest> {
  const sha = digest('sha256', buf);
  const md5 = digest('md5', buf);
  const out = await withOptionalChecksum(u.lacks, (checksums) => u.request('upload', Key, () =>
    u.client.send(signedPayload(new PutObjectCommand({
      Bucket: u.bucket, Key, Body: buf, ContentLength: buf.length, ContentMD5: b64(md5), ...(checksums ? { ChecksumSHA256: b64(sha) } : {}),
    }), sha.toString('hex')), { abortSignal: signal })));
  if (out.ChecksumSHA256 !== undefined && out.ChecksumSHA256 === b64(sha)) u.shows.checksums = true;
  const sent: Sent = { bytes: buf.length, sha256: sha.toString('hex'), checksums: [b64(sha)], etags: [md5.toString('hex')] };
  await confirmUpload(u, Key, sent, out.ChecksumSHA256, u.verify, signal);
  return { bytes: sent.bytes, sha256: sent.sha256 };
}

/** A multipart upload, or undefined when the storage does not implement them (nothing was consumed from `rest`). */
export async function putMultipart(u: Uploader, Key: string, head: Buffer[], rest: AsyncIterator<Buffer>, pool: PartPool, signal?: AbortSignal): Promise<ObjectDigest | undefined> {
  const entry = u.journal.begin(Key);
  const lackedChecksums = u.lacks.checksums;
  let UploadId: string;
  let checksums = false;
  try {
    UploadId = await withOptionalChecksum(u.lacks, async (c) => {
      checksums = c;
      const created = await u.request('start multipart upload', Key, () =>
        u.client.send(new CreateMultipartUploadCommand({ Bucket: u.bucket, Key, ...(c ? { ChecksumAlgorithm: 'SHA256' as const } : {}) }), { abortSignal: signal }));
      if (!created.UploadId) throw transientError(`target ${u.target}: start multipart upload s3://${u.bucket}/${Key}: the storage named no upload id`);
      return created.UploadId;
    });
  } catch (err) {
    // A refused start created nothing; a timed-out one may have: the entry stays for cleanPartial to look for it.
    if (!(err as { transient?: boolean }).transient) u.journal.end(entry);
    if (unsupported(err)) {
      u.lacks.checksums = lackedChecksums; // refused without them too: it was the multipart upload it lacks
      u.lacks.multipart = true;
      return undefined;
    }
    throw err;
  }
  let sent: Awaited<ReturnType<typeof sendParts>>;
  try {
    u.journal.started(entry, UploadId);
    sent = await sendParts(u, Key, UploadId, checksums, remaining(head, rest), pool, signal);
  } catch (err) {
    // Aborted or gone: nothing left. Otherwise the entry stays, and cleanPartial tries again (or says it cannot).
    const abort = await abortUpload(u, Key, UploadId).catch(() => 'failed');
    if (abort === 'aborted' || abort === 'gone') u.journal.end(entry);
    throw err;
  }
  u.journal.end(entry); // complete: an object now, which confirmUpload deletes if it is not what was sent
  await confirmUpload(u, Key, sent.sent, sent.reported, u.verify, signal);
  return { bytes: sent.sent.bytes, sha256: sent.sent.sha256 };
}

/** The chunks already read, then the rest of the source. */
async function* remaining(head: Buffer[], rest: AsyncIterator<Buffer>): AsyncIterable<Buffer> {
  yield* head;
  for (let r = await rest.next(); !r.done; r = await rest.next()) yield r.value;
}

/**
 * Abort by id: 'aborted', 'gone' (already aborted or completed), or 'unsupported' (the storage cannot abort: its
 * parts stay stored); any other failure is thrown.
 */
export async function abortUpload(u: S3Context, Key: string, UploadId: string): Promise<'aborted' | 'gone' | 'unsupported'> {
  try {
    await u.request('abort multipart upload', Key, () => u.client.send(new AbortMultipartUploadCommand({ Bucket: u.bucket, Key, UploadId })));
    return 'aborted';
  } catch (err) {
    if (notThere(err)) return 'gone';
    if (unsupported(err)) return 'unsupported';
    throw err;
  }
}

/**
 * The parts in order, up to `concurrency` in flight, each buffer given back to the pool once its part is stored.
 * Each part's sha256 (its checksum and its signature's payload hash) and md5 (Content-MD5, unless the storage has
 * shown it checks sha256: `shows`), and the whole object's, are computed on the hashing thread (hash-worker.ts)
 * while the parts before it are sent.
 */
async function sendParts(u: Uploader, Key: string, UploadId: string, checksums: boolean, source: AsyncIterable<Buffer>, pool: PartPool, signal?: AbortSignal) {
  const md5s = !(checksums && u.shows.checksums);
  const algos: Algo[] = md5s ? ['sha256', 'md5'] : ['sha256'];
  const hasher = new PieceHash(algos, algos);
  const partSha: Buffer[] = [];
  const partMd5: Buffer[] = [];
  const done: CompletedPart[] = [];
  let bytes = 0;
  const upload = async (PartNumber: number, buf: Buffer, digests: Promise<Buffer[]>) => {
    const [sha, md5] = (await digests) as [Buffer, Buffer | undefined];
    partSha[PartNumber - 1] = sha;
    if (md5) partMd5[PartNumber - 1] = md5;
    const ChecksumSHA256 = checksums ? b64(sha) : undefined;
    const r = await u.request(`upload part ${PartNumber}`, Key, () =>
      u.client.send(signedPayload(new UploadPartCommand({
        Bucket: u.bucket, Key, UploadId, PartNumber, Body: buf, ContentLength: buf.length, ...(md5 ? { ContentMD5: b64(md5) } : {}), ChecksumSHA256,
      }), sha.toString('hex')), { abortSignal: signal }));
    if (r.ChecksumSHA256 !== undefined && r.ChecksumSHA256 !== ChecksumSHA256) {
      throw transientError(`target ${u.target}: s3://${u.bucket}/${Key} part ${PartNumber}: storage reports sha256 ${r.ChecksumSHA256}, sent ${ChecksumSHA256 ?? 'none'}`);
    }
    if (r.ChecksumSHA256 !== undefined) u.shows.checksums = true;
    done[PartNumber - 1] = { PartNumber, ETag: r.ETag, ...(ChecksumSHA256 ? { ChecksumSHA256 } : {}) };
    pool.give(buf); // stored: the request no longer reads it (a failed part's buffer is never reused)
  };
  const all: Promise<void>[] = [];
  const inFlight = new Set<Promise<void>>();
  let whole: Buffer[];
  try {
    for await (const buf of source) {
      bytes += buf.length;
      const p = upload(all.length + 1, buf, hasher.piece(buf)).finally(() => inFlight.delete(p));
      all.push(p);
      inFlight.add(p);
      if (inFlight.size >= u.concurrency) await Promise.race(inFlight);
    }
    await Promise.all(all);
    whole = await hasher.digest();
  } catch (err) {
    hasher.drop();
    // Parts still in flight settle before the caller aborts (a late part could otherwise outlive the abort).
    await Promise.allSettled(all);
    throw err;
  }
  const out = await u.request('complete multipart upload', Key, () =>
    u.client.send(new CompleteMultipartUploadCommand({ Bucket: u.bucket, Key, UploadId, MultipartUpload: { Parts: done } }), { abortSignal: signal }));
  const [wholeSha, wholeMd5] = whole as [Buffer, Buffer | undefined];
  const composite = b64(digest('sha256', Buffer.concat(partSha)));
  const sent: Sent = {
    bytes,
    sha256: wholeSha.toString('hex'),
    checksums: [`${composite}-${partSha.length}`, composite, b64(wholeSha)],
    // Without md5s (a storage that checks sha256), an object it reports no sha256 for is read back.
    etags: wholeMd5 ? [`${digest('md5', Buffer.concat(partMd5)).toString('hex')}-${partMd5.length}`, wholeMd5.toString('hex')] : [],
  };
  return { sent, reported: out.ChecksumSHA256 };
}

const SPOOL = 'spool-';

/**
 * Spool files of uploads that are no longer running (named `spool-<pid>-<random>`, unlinked as soon as they are
 * opened: one is left only by a process killed in between, or one that could not unlink it).
 */
export function staleSpools(spoolDir: string): string[] {
  let names: string[];
  try {
    names = readdirSync(spoolDir);
  } catch {
    return [];
  }
  return names.filter((n) => n.startsWith(SPOOL) && !running(Number(/^spool-(\d+)-/.exec(n)?.[1]))).map((n) => join(spoolDir, n));
}

/**
 * The fallback where the storage has no multipart uploads: the object is spooled to a file unlinked as soon as it
 * is opened (a kill leaves nothing behind but an empty file), then sent as one PUT of known length.
 */
export async function putSpooled(u: Uploader, Key: string, head: Buffer[], rest: AsyncIterator<Buffer>, pool: PartPool, signal?: AbortSignal): Promise<ObjectDigest> {
  mkdirSync(u.spoolDir, { recursive: true, mode: DIR_MODE });
  const path = join(u.spoolDir, `${SPOOL}${process.pid}-${randomBytes(12).toString('hex')}`);
  const file = await open(path, 'wx+', FILE_MODE);
  try {
    await unlink(path);
    const sha = createHash('sha256');
    const md5 = createHash('md5');
    let bytes = 0;
    for await (const b of remaining(head, rest)) {
      sha.update(b);
      md5.update(b);
      await file.writeFile(b); // all of it, from the current position
      bytes += b.length;
      pool.give(b);
    }
    const shaRaw = sha.digest();
    const md5Raw = md5.digest();
    const out = await withOptionalChecksum(u.lacks, (checksums) => u.request('upload', Key, () =>
      u.client.send(signedPayload(new PutObjectCommand({
        Bucket: u.bucket, Key, Body: file.createReadStream({ start: 0, autoClose: false }), ContentLength: bytes, ContentMD5: b64(md5Raw),
        ...(checksums ? { ChecksumSHA256: b64(shaRaw) } : {}),
      }), shaRaw.toString('hex')), { abortSignal: signal })));
    const sent: Sent = { bytes, sha256: shaRaw.toString('hex'), checksums: [b64(shaRaw)], etags: [md5Raw.toString('hex')] };
    await confirmUpload(u, Key, sent, out.ChecksumSHA256, u.verify, signal);
    return { bytes, sha256: sent.sha256 };
  } finally {
    await file.close();
  }
}
