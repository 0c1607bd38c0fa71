/**
 * Downloads that stop at an object's recorded size: a byte range asked for, a larger stated size refused before a
 * byte is read, and the stream failed at the first byte past it, whatever the storage sends.
 */
import type { Readable } from 'node:stream';
import { GetObjectCommand, type GetObjectCommandOutput } from '@aws-sdk/client-s3';
import { storeError } from '../../../core/errors.js';
import { atMost } from '../digest.js';
import { httpStatus, type S3Context } from './requests.js';

/**
 * One object's bytes, at most `maxBytes` (its size on record). Only bytes 0..maxBytes are asked for (an HTTP Range:
 * the byte past the record shows an object grew), an object stated larger is refused before a byte is read, and the
 * stream fails at the first byte past `maxBytes` whatever the storage sends.
 */
export async function download(s3: S3Context, Key: string, maxBytes: number, signal?: AbortSignal): Promise<AsyncIterable<Uint8Array>> {
  let out: GetObjectCommandOutput;
  try {
    out = await s3.request('download', Key, () => s3.client.send(new GetObjectCommand({ Bucket: s3.bucket, Key, Range: `bytes=0-${maxBytes}` }), { abortSignal: signal }));
  } catch (err) {
    // 416: not even byte 0 exists, the object is empty (S3's answer to a range on an empty object).
    if (httpStatus(err) === 416) return nothing();
    throw err;
  }
  const body = out.Body as Readable;
  const what = `target ${s3.target}: download s3://${s3.bucket}/${Key}`;
  const size = statedSize(out);
  if (size === 0) {
    body.destroy(); // s3rver states `bytes 0-0/0` for an empty object, with a length of 1 it never sends
    return nothing();
  }
  if (size !== undefined && size > maxBytes) {
    body.destroy();
    throw storeError(`${what}: larger than its recorded ${maxBytes} bytes (the storage states ${size}); not read`);
  }
  return atMost(body, maxBytes, what);
}

async function* nothing(): AsyncIterable<Uint8Array> {}

/** The object's whole size as the answer states it (Content-Range of a 206, else Content-Length), if it does. */
function statedSize(out: Pick<GetObjectCommandOutput, 'ContentRange' | 'ContentLength'>): number | undefined {
  const total = /\/(\d+)$/.exec(out.ContentRange ?? '')?.[1];
  return total !== undefined ? Number(total) : out.ContentLength;
}
