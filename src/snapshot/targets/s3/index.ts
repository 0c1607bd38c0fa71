import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import {
  AbortMultipartUploadCommand, CompleteMultipartUploadCommand, CreateMultipartUploadCommand, DeleteObjectCommand, GetObjectCommand,
  HeadObjectCommand, ListMultipartUploadsCommand, ListObjectsV2Command, PutObjectCommand, S3Client, UploadPartCommand,
  type CompletedPart,
} from '@aws-sdk/client-s3';
import { storeError, transientError, WardenError } from '../../../errors.js';
import { chunked } from '../digest.js';
import { MANIFEST_KEY, TARGET_SNAPSHOT_NAME, checkNames, type ObjectDigest, type SnapshotTarget, type TargetFactory } from '../types.js';
import type { S3TargetConfig } from './schema.js';

const b64 = (digest: Buffer) => digest.toString('base64');
const sha = (b: Buffer) => createHash('sha256').update(b).digest();

/**
 * S3 and S3-compatible storage. Each object goes up with its sha256 as `x-amz-checksum-sha256` (per part for a
 * multipart upload), which the storage checks on receipt; the checksum it then reports (HEAD with checksum mode)
 * must equal ours, else the object is deleted and the put fails. A multipart upload is invisible until completed,
 * so a killed run leaves an unfinished upload (aborted by `cleanPartial`), never a short object.
 */
export class S3Target implements SnapshotTarget {
  readonly type = 's3';
  readonly name: string;
  readonly where: string;
  private readonly base: string;

  constructor(private readonly config: S3TargetConfig, store: string, private readonly client: S3Client) {
    this.name = config.name;
    this.base = `${config.prefix}${store}/`;
    this.where = `s3://${config.bucket}/${this.base}`;
  }

  async put(snapshot: string, key: string, body: AsyncIterable<Uint8Array>, signal?: AbortSignal): Promise<ObjectDigest> {
    checkNames(this.name, snapshot, key);
    const Key = `${this.base}${snapshot}/${key}`;
    const parts = chunked(body, this.config.partSizeMb * 1024 * 1024)[Symbol.asyncIterator]();
    const first = await parts.next();
    const second = first.done ? first : await parts.next();
    if (second.done) return this.putSingle(Key, first.done ? Buffer.alloc(0) : first.value, signal);
    return this.putMultipart(Key, [first.value, second.value], parts, signal);
  }

  private async putSingle(Key: string, buf: Buffer, signal?: AbortSignal): Promise<ObjectDigest> {
    const digest = sha(buf);
    const out = await this.send('upload', Key, () =>
      this.client.send(new PutObjectCommand({ Bucket: this.config.bucket, Key, Body: buf, ContentLength: buf.length, ChecksumSHA256: b64(digest) }), { abortSignal: signal }));
    await this.confirm(Key, buf.length, b64(digest), out.ChecksumSHA256);
    return { bytes: buf.length, sha256: digest.toString('hex') };
  }

  private async putMultipart(Key: string, head: Buffer[], rest: AsyncIterator<Buffer>, signal?: AbortSignal): Promise<ObjectDigest> {
    const Bucket = this.config.bucket;
    const created = await this.send('start multipart upload', Key, () =>
      this.client.send(new CreateMultipartUploadCommand({ Bucket, Key, ChecksumAlgorithm: 'SHA256' }), { abortSignal: signal }));
    const UploadId = created.UploadId!;
    const whole = createHash('sha256');
    const partDigests: Buffer[] = [];
    const done: CompletedPart[] = [];
    let bytes = 0;
    try {
      const inFlight = new Set<Promise<void>>();
      const upload = async (PartNumber: number, buf: Buffer) => {
        const ChecksumSHA256 = b64(partDigests[PartNumber - 1]!);
        const r = await this.send(`upload part ${PartNumber}`, Key, () =>
          this.client.send(new UploadPartCommand({ Bucket, Key, UploadId, PartNumber, Body: buf, ContentLength: buf.length, ChecksumSHA256 }), { abortSignal: signal }));
        if (r.ChecksumSHA256 !== undefined && r.ChecksumSHA256 !== ChecksumSHA256) {
          throw transientError(`target ${this.name}: s3://${Bucket}/${Key} part ${PartNumber}: storage reports sha256 ${r.ChecksumSHA256}, sent ${ChecksumSHA256}`);
        }
        done[PartNumber - 1] = { PartNumber, ETag: r.ETag, ChecksumSHA256 };
      };
      let n = 0;
      const next = async (): Promise<Buffer | undefined> => (n < head.length ? head[n] : ((await rest.next()).value as Buffer | undefined));
      for (let buf = await next(); buf; buf = await next()) {
        n++;
        whole.update(buf);
        bytes += buf.length;
        partDigests.push(sha(buf));
        const p = upload(n, buf).finally(() => inFlight.delete(p));
        inFlight.add(p);
        if (inFlight.size >= this.config.concurrency) await Promise.race(inFlight);
      }
      await Promise.all(inFlight);
      const composite = `${b64(sha(Buffer.concat(partDigests)))}-${partDigests.length}`;
      const out = await this.send('complete multipart upload', Key, () =>
        this.client.send(new CompleteMultipartUploadCommand({ Bucket, Key, UploadId, MultipartUpload: { Parts: done } }), { abortSignal: signal }));
      await this.confirm(Key, bytes, composite, out.ChecksumSHA256);
      return { bytes, sha256: whole.digest('hex') };
    } catch (err) {
      await this.client.send(new AbortMultipartUploadCommand({ Bucket, Key, UploadId })).catch(() => undefined);
      throw err;
    }
  }

  /** The storage's own word on what it now holds; an object that differs is deleted, never left to be read. */
  private async confirm(Key: string, bytes: number, checksum: string, reported: string | undefined): Promise<void> {
    const head = await this.send('check', Key, () =>
      this.client.send(new HeadObjectCommand({ Bucket: this.config.bucket, Key, ChecksumMode: 'ENABLED' })));
    const seen = [reported, head.ChecksumSHA256].filter((c): c is string => c !== undefined);
    const bad = seen.find((c) => c !== checksum) ?? (head.ContentLength !== bytes ? `${head.ContentLength} bytes` : undefined);
    if (bad === undefined && seen.length > 0) return;
    await this.client.send(new DeleteObjectCommand({ Bucket: this.config.bucket, Key })).catch(() => undefined);
    const why = seen.length === 0 ? 'reports no sha256 checksum' : `reports ${bad}`;
    throw transientError(`target ${this.name}: s3://${this.config.bucket}/${Key}: storage ${why}, sent ${checksum} (${bytes} bytes); object deleted`);
  }

  async list(): Promise<string[]> {
    return [...new Set((await this.allKeys(this.base)).filter((k) => k.endsWith(`/${MANIFEST_KEY}`) && k.split('/').length === 2).map((k) => k.split('/')[0]!))]
      .filter((n) => TARGET_SNAPSHOT_NAME.test(n))
      .sort();
  }

  async keys(snapshot: string): Promise<string[]> {
    checkNames(this.name, snapshot);
    return (await this.allKeys(`${this.base}${snapshot}/`)).sort();
  }

  async get(snapshot: string, key: string, signal?: AbortSignal): Promise<AsyncIterable<Uint8Array>> {
    checkNames(this.name, snapshot, key);
    const Key = `${this.base}${snapshot}/${key}`;
    const out = await this.send('download', Key, () => this.client.send(new GetObjectCommand({ Bucket: this.config.bucket, Key }), { abortSignal: signal }));
    return out.Body as Readable;
  }

  async delete(snapshot: string): Promise<void> {
    checkNames(this.name, snapshot);
    const keys = await this.keys(snapshot);
    const ordered = [...keys.filter((k) => k === MANIFEST_KEY), ...keys.filter((k) => k !== MANIFEST_KEY)];
    for (const k of ordered) {
      const Key = `${this.base}${snapshot}/${k}`;
      await this.send('delete', Key, () => this.client.send(new DeleteObjectCommand({ Bucket: this.config.bucket, Key })));
    }
  }

  async cleanPartial(): Promise<string[]> {
    const removed: string[] = [];
    let KeyMarker: string | undefined;
    let UploadIdMarker: string | undefined;
    do {
      const page = await this.send('list multipart uploads', this.base, () =>
        this.client.send(new ListMultipartUploadsCommand({ Bucket: this.config.bucket, Prefix: this.base, KeyMarker, UploadIdMarker })));
      for (const u of page.Uploads ?? []) {
        await this.send('abort multipart upload', u.Key!, () =>
          this.client.send(new AbortMultipartUploadCommand({ Bucket: this.config.bucket, Key: u.Key!, UploadId: u.UploadId! })));
        removed.push(`${this.name}:${u.Key!.slice(this.base.length)} (multipart upload)`);
      }
      [KeyMarker, UploadIdMarker] = page.IsTruncated ? [page.NextKeyMarker, page.NextUploadIdMarker] : [undefined, undefined];
    } while (KeyMarker !== undefined);
    const complete = new Set(await this.list());
    const bySnapshot = new Map<string, string[]>();
    for (const k of await this.allKeys(this.base)) {
      const snap = k.split('/')[0]!;
      if (!TARGET_SNAPSHOT_NAME.test(snap) || complete.has(snap)) continue;
      bySnapshot.set(snap, [...(bySnapshot.get(snap) ?? []), k]);
    }
    for (const [snap, keys] of bySnapshot) {
      for (const k of keys) {
        const Key = `${this.base}${k}`;
        await this.send('delete', Key, () => this.client.send(new DeleteObjectCommand({ Bucket: this.config.bucket, Key })));
      }
      removed.push(`${this.name}:${snap}/`);
    }
    return removed;
  }

  async close(): Promise<void> {
    this.client.destroy();
  }

  /** Keys under a prefix, relative to it. */
  private async allKeys(Prefix: string): Promise<string[]> {
    const out: string[] = [];
    let ContinuationToken: string | undefined;
    do {
      const page = await this.send('list', Prefix, () => this.client.send(new ListObjectsV2Command({ Bucket: this.config.bucket, Prefix, ContinuationToken })));
      for (const o of page.Contents ?? []) out.push(o.Key!.slice(Prefix.length));
      ContinuationToken = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (ContinuationToken);
    return out;
  }

  /** One request, its failure said in one line: 5xx, throttling, timeouts and network errors are transient. */
  private async send<T>(doing: string, Key: string, call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (err) {
      if (err instanceof WardenError) throw err;
      const e = err as { name?: string; message?: string; $metadata?: { httpStatusCode?: number }; $retryable?: unknown; code?: string };
      const status = e.$metadata?.httpStatusCode;
      const what = `target ${this.name}: ${doing} s3://${this.config.bucket}/${Key}: ${status ? `HTTP ${status} ` : ''}${e.name ?? ''} ${e.message ?? String(err)}`.trim();
      const transient = status === undefined || status >= 500 || status === 429 || e.$retryable !== undefined || e.name === 'TimeoutError' || e.name === 'AbortError';
      if (status === 404 || e.name === 'NoSuchKey') throw storeError(what, err);
      throw transient ? transientError(what, err) : storeError(what, err);
    }
  }
}

/** Credentials come from config only as `${ENV}` references (checked at load), or from the SDK's own chain. */
export const createS3Target: TargetFactory<S3TargetConfig> = async (config, store) => {
  const credentials = config.accessKeyId && config.secretAccessKey
    ? { accessKeyId: config.accessKeyId, secretAccessKey: config.secretAccessKey, sessionToken: config.sessionToken }
    : undefined;
  const client = new S3Client({
    region: config.region,
    endpoint: config.endpoint,
    forcePathStyle: config.forcePathStyle,
    credentials,
    maxAttempts: config.maxAttempts,
    // We send sha256 ourselves on every upload; no extra CRC trailers (which many S3-compatible servers refuse).
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    requestHandler: { requestTimeout: config.timeoutMs, connectionTimeout: Math.min(config.timeoutMs, 10_000), throwOnRequestTimeout: true },
  });
  return new S3Target(config, store, client);
};
