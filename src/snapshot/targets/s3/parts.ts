/**
 * An object cut into parts for S3, in a few buffers reused: a file is read straight into them, any other stream
 * copied into them once. Memory is the parts in flight, whatever the object's size.
 */
import { open } from 'node:fs/promises';
import { isFileBody } from '../types.js';

/**
 * Buffers of one part size, given back once a part is sent and taken again for a later one. Each is a
 * SharedArrayBuffer of its own: posted to the hashing thread, it is shared, not copied. As many are made as are
 * held at once (the sender's parts in flight and the one being filled).
 */
export class PartPool {
  private readonly free: Buffer[] = [];
  made = 0;

  constructor(readonly size: number) {}

  take(): Buffer {
    const b = this.free.pop();
    if (b) return b;
    this.made++;
    return Buffer.from(new SharedArrayBuffer(this.size));
  }

  /** A part (or the start of one) from `take`, no longer read by anything: its buffer is used for a later part. */
  give(part: Buffer): void {
    this.free.push(Buffer.from(part.buffer as SharedArrayBuffer));
  }
}

/**
 * The body in parts of exactly `pool.size` bytes (the last shorter, or one empty part for an empty body), each a
 * buffer from the pool that the consumer gives back once it is done with it. A local file is read into them.
 */
export async function* partsOf(body: AsyncIterable<Uint8Array>, pool: PartPool): AsyncIterable<Buffer> {
  yield* isFileBody(body) ? readParts(body.file, pool) : copyParts(body, pool);
}

async function* readParts(file: string, pool: PartPool): AsyncIterable<Buffer> {
  const fh = await open(file, 'r');
  try {
    for (let first = true; ; first = false) {
      const buf = pool.take();
      let have = 0;
      while (have < buf.length) {
        const { bytesRead } = await fh.read(buf, have, buf.length - have, null);
        if (bytesRead === 0) break;
        have += bytesRead;
      }
      if (have === 0 && !first) return pool.give(buf);
      yield buf.subarray(0, have);
      if (have < buf.length) return;
    }
  } finally {
    await fh.close();
  }
}

async function* copyParts(source: AsyncIterable<Uint8Array>, pool: PartPool): AsyncIterable<Buffer> {
  let buf = pool.take();
  let have = 0;
  let yielded = false;
  for await (const chunk of source) {
    let at = 0;
    while (at < chunk.length) {
      const n = Math.min(chunk.length - at, buf.length - have);
      buf.set(chunk.subarray(at, at + n), have);
      at += n;
      have += n;
      if (have === buf.length) {
        yield buf;
        yielded = true;
        buf = pool.take();
        have = 0;
      }
    }
  }
  if (have > 0 || !yielded) yield buf.subarray(0, have);
  else pool.give(buf);
}
