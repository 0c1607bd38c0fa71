import type { GetObjectCommandOutput } from '@aws-sdk/client-s3';
import { storeError } from '../../../errors.js';

/**
 * Reading an object no further than its recorded size, without trusting the storage to stop: a byte range is asked
 * for, a larger size announced is refused before a byte is read, and the stream ends at the first byte past it.
 */

/** The Range header that asks for the recorded size and one byte more (the byte that shows an object grew). */
export const rangeFor = (maxBytes: number) => `bytes=0-${maxBytes}`;

/**
 * Passes on at most `maxBytes`. A storage sending more (an endless stream, an object replaced by a larger one, a
 * Range ignored) fails at the first byte past them; leaving the loop destroys the response, so nothing more is read.
 */
export async function* atMost(body: AsyncIterable<Uint8Array>, maxBytes: number, what: string): AsyncIterable<Buffer> {
  let seen = 0;
  for await (const chunk of body) {
    const b = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    if (seen + b.length > maxBytes) {
      if (maxBytes > seen) yield b.subarray(0, maxBytes - seen);
      throw storeError(`${what}: larger than its recorded ${maxBytes} bytes; not read further`);
    }
    seen += b.length;
    yield b;
  }
}

/** The object's whole size as the answer states it (Content-Range of a 206, else Content-Length), if it does. */
export function statedSize(out: Pick<GetObjectCommandOutput, 'ContentRange' | 'ContentLength'>): number | undefined {
  const total = /\/(\d+)$/.exec(out.ContentRange ?? '')?.[1];
  return total !== undefined ? Number(total) : out.ContentLength;
}
