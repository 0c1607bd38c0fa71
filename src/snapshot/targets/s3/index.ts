import { rmSync } from 'node:fs';
import { DeleteObjectCommand, ListMultipartUploadsCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { CLAIM_KEY, MANIFEST_KEY, TARGET_SNAPSHOT_NAME, checkNames, expandTilde, type ObjectDigest, type SnapshotTarget, type TargetFactory } from '../types.js';
import { download } from './bounded.js';
import { uploadJournalFor, type UploadEntry } from './journal.js';
import { s3Request, unsupported } from './requests.js';
import type { S3TargetConfig } from './schema.js';
import { PartPool, partsOf } from './parts.js';
import { abortUpload, putMultipart, putSingle, putSpooled, staleSpools, type Uploader } from './upload.js';

/**
 * S3 and S3-compatible storage. Each object goes up with Content-MD5 and, where the storage takes it, its sha256 as
 * `x-amz-checksum-sha256`; it is then confirmed by the storage's reported sha256, its md5 ETag, or by reading it
 * back (confirm.ts), else deleted and the put fails. A multipart upload is invisible until completed and is
 * journaled locally (journal.ts), so a killed run leaves an unfinished upload `cleanPartial` aborts by id, never a
 * short object. Nothing else is required of the storage: ListMultipartUploads and checksums are used where offered.
 */
export class S3Target implements SnapshotTarget {
  readonly type = 's3';
  readonly name: string;
  readonly where: string;
  private readonly base: string;
  private readonly uploader: Uploader;

  constructor(private readonly config: S3TargetConfig, store: string, private readonly client: S3Client) {
    this.name = config.name;
    this.base = `${config.prefix}${store}/`;
    this.where = `s3://${config.bucket}/${this.base}`;
    this.uploader = {
      client, bucket: config.bucket, target: config.name, concurrency: config.concurrency, verify: config.verifyUploads,
      request: (doing, Key, call) => this.send(doing, Key, call),
      journal: uploadJournalFor(config, store),
      spoolDir: expandTilde(config.uploadJournalDir),
      lacks: { checksums: false, multipart: false },
      shows: { checksums: false },
    };
  }

  async put(snapshot: string, key: string, body: AsyncIterable<Uint8Array>, signal?: AbortSignal): Promise<ObjectDigest> {
    checkNames(this.name, snapshot, key);
    const Key = `${this.base}${snapshot}/${key}`;
    const pool = new PartPool(this.config.partSizeMb * 1024 * 1024);
    const parts = partsOf(body, pool)[Symbol.asyncIterator]();
    try {
      const first = await parts.next();
      const second = first.done ? first : await parts.next();
      if (second.done) return await putSingle(this.uploader, Key, first.done ? Buffer.alloc(0) : first.value, signal);
      const head = [first.value, second.value];
      if (!this.uploader.lacks.multipart) {
        const stored = await putMultipart(this.uploader, Key, head, parts, pool, signal);
        if (stored) return stored;
      }
      return await putSpooled(this.uploader, Key, head, parts, pool, signal);
    } finally {
      await parts.return?.(); // a failed upload stops reading (the file is closed)
    }
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

  /**
   * Only the bytes up to one past `maxBytes` (the size on record) are asked for (an HTTP Range), an object
   * stated larger is refused before a byte is read, and the stream fails at the first byte past it, whatever the
   * storage sends: no storage can fill the disk or stream for ever.
   */
  async get(snapshot: string, key: string, signal: AbortSignal | undefined, maxBytes: number): Promise<AsyncIterable<Uint8Array>> {
    checkNames(this.name, snapshot, key);
    return download(this.uploader, `${this.base}${snapshot}/${key}`, maxBytes, signal);
  }

  async names(): Promise<string[]> {
    return [...new Set((await this.allKeys(this.base)).map((k) => k.split('/')[0]!))].filter((n) => TARGET_SNAPSHOT_NAME.test(n)).sort();
  }

  async delete(snapshot: string): Promise<void> {
    checkNames(this.name, snapshot);
    const keys = await this.keys(snapshot);
    // The manifest first, the claim last: every step of the way, what is left is proven memory-warden's.
    const ordered = [...keys.filter((k) => k === MANIFEST_KEY), ...keys.filter((k) => k !== MANIFEST_KEY && k !== CLAIM_KEY), ...keys.filter((k) => k === CLAIM_KEY)];
    for (const k of ordered) {
      const Key = `${this.base}${snapshot}/${k}`;
      await this.send('delete', Key, () => this.client.send(new DeleteObjectCommand({ Bucket: this.config.bucket, Key })));
    }
  }

  /**
   * Aborts, by id, the multipart uploads this machine's journal holds for this place (those it started and did not
   * finish), and removes spool files killed uploads left. Uploads it did not start are left alone. What it cannot
   * remove (the storage cannot abort, or cannot list an upload whose id was never received) is said so, in the list,
   * and its journal entry is kept: the upload may hold a store's data, and erase keeps finding it until a person
   * deletes the entry.
   */
  async cleanPartial(): Promise<string[]> {
    const removed: string[] = [];
    for (const entry of this.uploader.journal.pending()) removed.push(...(await this.abortJournaled(entry)));
    for (const spool of staleSpools(this.uploader.spoolDir)) {
      rmSync(spool, { force: true });
      removed.push(`${this.name}: spool file ${spool}`);
    }
    return removed;
  }

  async leftovers(): Promise<string[]> {
    return [
      ...this.uploader.journal.pending().map((e) => `${this.name}:${e.key.slice(this.base.length)} (multipart upload${e.uploadId ? ` ${e.uploadId}` : ''}, journal ${e.file})`),
      ...staleSpools(this.uploader.spoolDir).map((f) => `${this.name}: spool file ${f}`),
    ];
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

  /** One journaled upload: aborted by id, or, if its id was never received, looked for by key where the storage lists uploads. */
  private async abortJournaled(entry: UploadEntry): Promise<string[]> {
    const rel = `${this.name}:${entry.key.slice(this.base.length)}`;
    const ids = entry.uploadId !== undefined ? [entry.uploadId] : await this.uploadsOf(entry.key);
    if (ids === 'unknown') return [`${rel} (multipart upload: unknown whether one was started; the storage does not list multipart uploads; journal ${entry.file} kept: delete it once you know none is left)`];
    const out: string[] = [];
    let left = false;
    for (const UploadId of ids) {
      const abort = await abortUpload(this.uploader, entry.key, UploadId);
      if (abort === 'aborted') out.push(`${rel} (multipart upload)`);
      if (abort === 'unsupported') {
        left = true;
        out.push(`${rel} (multipart upload ${UploadId} not removed: the storage does not abort multipart uploads; its parts may stay stored; journal ${entry.file} kept: delete it once they are gone)`);
      }
    }
    if (!left) this.uploader.journal.end(entry);
    return out;
  }

  /** Upload ids of exactly this key, or 'unknown' when the storage does not implement ListMultipartUploads. */
  private async uploadsOf(Key: string): Promise<string[] | 'unknown'> {
    try {
      const page = await this.send('list multipart uploads', Key, () =>
        this.client.send(new ListMultipartUploadsCommand({ Bucket: this.config.bucket, Prefix: Key })));
      return (page.Uploads ?? []).filter((u) => u.Key === Key && u.UploadId).map((u) => u.UploadId!);
    } catch (err) {
      if (unsupported(err)) return 'unknown';
      throw err;
    }
  }

  private send<T>(doing: string, Key: string, call: () => Promise<T>): Promise<T> {
    return s3Request({ target: this.name, bucket: this.config.bucket }, doing, Key, call);
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
