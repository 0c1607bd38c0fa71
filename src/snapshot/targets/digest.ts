import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { UnverifiedSnapshotError, type FileBody, type ObjectDigest } from './types.js';

/** A local file as a put's body (types.ts): read in pieces of `chunk` bytes when iterated. */
export function fileBody(file: string, chunk: number): FileBody {
  return { file, [Symbol.asyncIterator]: () => createReadStream(file, { highWaterMark: chunk })[Symbol.asyncIterator]() };
}

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

/**
 * Pass at most `maxBytes` through: the first byte beyond them is a store error naming `what`, and nothing more is
 * read, so an object that never ends (a FIFO, /dev/zero, a hostile server) cannot hold the reader or fill a disk.
 */
export async function* atMost(source: AsyncIterable<Uint8Array>, maxBytes: number, what: string): AsyncIterable<Uint8Array> {
  let seen = 0;
  for await (const chunk of source) {
    seen += chunk.length;
    if (seen > maxBytes) throw new UnverifiedSnapshotError(`${what}: larger than its recorded ${maxBytes} bytes; not read further`);
    yield chunk;
  }
}

/**
 * The bytes of a stored object, checked against what its (authenticated) record says as they pass: more bytes than
 * recorded stop the read at once; a different size or sha256 at the end is a store error naming `what`, thrown
 * before the reader sees the stream end, so nothing is taken for the object unless it is exactly that object.
 */
export async function* checkedObject(source: AsyncIterable<Uint8Array>, want: ObjectDigest, what: string): AsyncIterable<Buffer> {
  const h = hashing(atMost(source, want.bytes, what));
  yield* h.stream;
  const got = h.digest();
  if (got.sha256 !== want.sha256 || got.bytes !== want.bytes) {
    throw new UnverifiedSnapshotError(`${what} does not match its checksum (sha256 ${got.sha256}, ${got.bytes} bytes; manifest ${want.sha256}, ${want.bytes} bytes)`);
  }
}
