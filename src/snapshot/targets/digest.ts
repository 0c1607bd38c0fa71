import { createHash } from 'node:crypto';
import type { ObjectDigest } from './types.js';

/** Pass bytes through while counting and hashing them; `digest()` once the stream is drained. */
export function hashing(source: AsyncIterable<Uint8Array>): { stream: AsyncIterable<Buffer>; digest(): ObjectDigest } {
  const hash = createHash('sha256');
  let bytes = 0;
  let done = false;
  let result: ObjectDigest | undefined;
  async function* stream(): AsyncIterable<Buffer> {
    for await (const chunk of source) {
      const b = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
      hash.update(b);
      bytes += b.length;
      yield b;
    }
    done = true;
  }
  return {
    stream: stream(),
    digest() {
      if (!done) throw new Error('hashing: digest() before the stream was drained');
      return (result ??= { bytes, sha256: hash.digest('hex') });
    },
  };
}

/** sha256 and size of a whole stream. */
export async function digestOf(source: AsyncIterable<Uint8Array>): Promise<ObjectDigest> {
  const h = hashing(source);
  for await (const _ of h.stream) void _;
  return h.digest();
}

/** Split a stream into buffers of exactly `size` bytes (the last one shorter), for multipart uploads. */
export async function* chunked(source: AsyncIterable<Uint8Array>, size: number): AsyncIterable<Buffer> {
  let parts: Buffer[] = [];
  let have = 0;
  for await (const chunk of source) {
    let b = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    while (have + b.length >= size) {
      const take = size - have;
      parts.push(b.subarray(0, take));
      yield Buffer.concat(parts);
      parts = [];
      have = 0;
      b = b.subarray(take);
    }
    if (b.length > 0) {
      parts.push(Buffer.from(b)); // copied: the producer may reuse its buffer
      have += b.length;
    }
  }
  if (have > 0 || parts.length > 0) yield Buffer.concat(parts);
}
