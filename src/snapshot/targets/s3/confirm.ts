/**
 * Whether the storage holds exactly what was sent: its reported sha256, else its md5 ETag, else the object read
 * back. A verdict; an object that differs is deleted.
 */
import { createHash } from 'node:crypto';
import { DeleteObjectCommand, HeadObjectCommand } from '@aws-sdk/client-s3';
import { transientError } from '../../../core/errors.js';
import { download } from './bounded.js';
import { withOptionalChecksum, type S3Context } from './requests.js';


/** What went up, in every form a storage may report it back. */
export interface Sent {
  bytes: number;
  /** Hex sha256 of the whole object. */
  sha256: string;
  /**
   * The `x-amz-checksum-sha256` values that prove these bytes: the whole object's sha256, and for a multipart
   * upload the sha256 of its parts' sha256s with and without `-N` (storages report either, or the whole one).
   */
  checksums: string[];
  /** ETags that prove these bytes: the md5 (single PUT, or the whole object) and the multipart form `md5(md5s)-N`. */
  etags: string[];
}

/** How an upload was confirmed: a verdict, not an exception. */
export type UploadCheck = { by: 'sha256' | 'etag' | 'read-back' } | { problem: string };

/**
 * `auto` takes the storage's word (a reported sha256, or an md5 ETag) where it gives one; `read-back` always reads
 * the object back as well. Nothing reported either way: read back. A reported sha256 or size that differs fails.
 */
export async function checkUpload(s3: S3Context, Key: string, sent: Sent, reported: string | undefined, mode: 'auto' | 'read-back', signal?: AbortSignal): Promise<UploadCheck> {
  const head = await withOptionalChecksum(s3.lacks, (checksums) => s3.request('check', Key, () =>
    s3.client.send(new HeadObjectCommand({ Bucket: s3.bucket, Key, ...(checksums ? { ChecksumMode: 'ENABLED' as const } : {}) }), { abortSignal: signal })));
  if (head.ContentLength !== undefined && head.ContentLength !== sent.bytes) return { problem: `${head.ContentLength} bytes` };
  const seen = [reported, head.ChecksumSHA256].filter((c): c is string => c !== undefined);
  const wrong = seen.find((c) => !sent.checksums.includes(c));
  if (wrong !== undefined) return { problem: `sha256 ${wrong}` };
  if (mode === 'auto' && seen.length > 0) return { by: 'sha256' };
  if (mode === 'auto' && head.ETag !== undefined && sent.etags.includes(head.ETag.replace(/"/g, '').toLowerCase())) return { by: 'etag' };
  const hash = createHash('sha256');
  let bytes = 0;
  try {
    for await (const b of await download(s3, Key, sent.bytes, signal)) {
      hash.update(b);
      bytes += b.length;
    }
  } catch (err) {
    return { problem: `when read back: ${(err as Error).message}` };
  }
  const got = hash.digest('hex');
  return got === sent.sha256 && bytes === sent.bytes ? { by: 'read-back' } : { problem: `when read back sha256 ${got}` };
}

/** Confirm, or delete the object and fail (retryable: the next run uploads it again). */
export async function confirmUpload(s3: S3Context, Key: string, sent: Sent, reported: string | undefined, mode: 'auto' | 'read-back', signal?: AbortSignal): Promise<void> {
  let check: UploadCheck;
  try {
    check = await checkUpload(s3, Key, sent, reported, mode, signal);
  } catch (err) {
    await deleteQuietly(s3, Key);
    throw err;
  }
  if (!('problem' in check)) return;
  await deleteQuietly(s3, Key);
  throw transientError(`target ${s3.target}: s3://${s3.bucket}/${Key}: storage reports ${check.problem}, sent sha256 ${sent.sha256} (${sent.bytes} bytes); object deleted`);
}

async function deleteQuietly(s3: S3Context, Key: string): Promise<void> {
  await s3.client.send(new DeleteObjectCommand({ Bucket: s3.bucket, Key })).catch(() => undefined);
}
