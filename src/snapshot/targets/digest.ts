import { createReadStream } from 'node:fs';
import { open } from 'node:fs/promises';
import { PieceHash, StreamHash, type Offload } from './hash-worker.js';
import { UnverifiedSnapshotError, type FileBody, type ObjectDigest } from './types.js';

/** A local file as a put's body (types.ts): read in pieces of `chunk` bytes when iterated. */
export function fileBody(file: string, chunk: number): FileBody {
  return { file, [Symbol.asyncIterator]: () => createReadStream(file, { highWaterMark: chunk })[Symbol.asyncIterator]() };
}

/**
 * Pass bytes through while counting and hashing them; `digest()` once the stream is drained. Each piece is taken
 * by the hash before it is handed on; a long stream may be hashed on another thread (hash-worker.ts: `offload`),
 * and the stream ends only once its hash is known.
 */
export function hashing(source: AsyncIterable<Uint8Array>, offload?: Offload): { stream: AsyncIterable<Buffer>; digest(): ObjectDigest } {
  let result: ObjectDigest | undefined;
  async function* stream(): AsyncIterable<Buffer> {
    const hash = new StreamHash(offload);
    let bytes = 0;
    try {
      for await (const chunk of source) {
        const b = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
        const wait = hash.update(b);
        if (wait) await wait;
        bytes += b.length;
        yield b;
      }
      result = { bytes, sha256: await hash.digest() };
    } finally {
      if (!result) hash.drop();
    }
  }
  return {
    stream: stream(),
    digest() {
      if (!result) throw new Error('hashing: digest() before the stream was drained');
      return result;
    },
  };
}

/** Buffers a file is read into by hashedFile: as many as may be hashed or read at once. */
const SHARED_READS = 8;

/**
 * A local file read in pieces of `chunk` bytes into a few buffers shared with the hashing thread (hash-worker.ts),
 * which makes the sha256 of the very bytes handed on without a copy of them: an encrypted upload's plaintext,
 * hashed on another core while this one encrypts it. The consumer must be done with a piece once it asks for the
 * next (as the cipher is): its buffer is read into again SHARED_READS pieces later, once the thread has hashed it.
 * `digest()` once the stream is drained.
 */
export function hashedFile(file: string, chunk: number): { stream: AsyncIterable<Buffer>; digest(): ObjectDigest } {
  let result: ObjectDigest | undefined;
  async function* stream(): AsyncIterable<Buffer> {
    const fh = await open(file, 'r'); // first: a file that cannot be opened leaves no stream open on the thread
    const hash = new PieceHash(['sha256'], [], 'shared');
    const bufs = Array.from({ length: SHARED_READS }, () => Buffer.from(new SharedArrayBuffer(chunk)));
    const hashed: Promise<unknown>[] = [];
    let bytes = 0;
    try {
      for (let i = 0; ; i++) {
        const slot = i % SHARED_READS;
        await hashed[slot]; // the piece this buffer held last is hashed (and its consumer asked for more since)
        const buf = bufs[slot]!;
        let n = 0;
        while (n < chunk) {
          const { bytesRead } = await fh.read(buf, n, chunk - n, null);
          if (bytesRead === 0) break;
          n += bytesRead;
        }
        if (n === 0) break;
        const piece = buf.subarray(0, n);
        hashed[slot] = hash.piece(piece);
        hashed[slot].catch(() => {}); // a failure is the digest's, below
        bytes += n;
        yield piece;
        if (n < chunk) break;
      }
      const [sha] = await hash.digest();
      result = { bytes, sha256: sha!.toString('hex') };
    } finally {
      if (!result) {
        hash.drop();
        await Promise.allSettled(hashed); // the thread no longer reads the buffers
      }
      await fh.close();
    }
  }
  return {
    stream: stream(),
    digest() {
      if (!result) throw new Error('hashing: digest() before the stream was drained');
      return result;
    },
  };
}

/** sha256 and size of a whole stream. */
export async function digestOf(source: AsyncIterable<Uint8Array>): Promise<ObjectDigest> {
  const h = hashing(source);
  for await (const _ of h.stream) void _;
  return h.digest();
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
