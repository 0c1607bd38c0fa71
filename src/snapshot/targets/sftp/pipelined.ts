import type { SFTPWrapper } from 'ssh2';

/**
 * Reads and writes of a remote file with several requests in flight, as OpenSSH's own `sftp` does (64 requests of
 * 32 KiB there): one request at a time, as ssh2's streams do, waits a round trip per chunk. Memory stays bounded
 * by `depth` chunks whatever the file's size.
 */
export const DEPTH = 32;
export const CHUNK = 64 * 1024;

type Cb<T> = (err?: Error | null, value?: T) => void;
export const call = <T>(f: (cb: Cb<T>) => void) => new Promise<T>((resolve, reject) => f((err, v) => (err ? reject(err) : resolve(v as T))));

export const openRemote = (sftp: SFTPWrapper, path: string, flags: 'r' | 'wx', mode = 0o600) =>
  call<Buffer>((cb) => sftp.open(path, flags, { mode }, cb));

export const closeRemote = (sftp: SFTPWrapper, handle: Buffer) => call<void>((cb) => sftp.close(handle, cb));

/**
 * Ask the server to fsync a file (OpenSSH's `fsync@openssh.com`, what `sftp put -f` sends). A server without the
 * extension cannot be asked: false, and the file is as durable as the server makes it.
 */
export async function fsyncRemote(sftp: SFTPWrapper, handle: Buffer): Promise<boolean> {
  try {
    await call<unknown>((cb) => sftp.ext_openssh_fsync(handle, cb));
    return true;
  } catch (err) {
    if (/does not support/i.test((err as Error).message)) return false;
    throw err;
  }
}

/**
 * Write a stream to an open handle from offset 0, up to `depth` writes in flight, each chunk at its own offset.
 * Resolves with the byte count once the server acknowledged every write; on a failed write or a failing source,
 * rejects only after every write already sent was answered (none is left behind a close).
 */
export async function writeAll(sftp: SFTPWrapper, handle: Buffer, source: AsyncIterable<Buffer>, depth = DEPTH): Promise<number> {
  const inFlight = new Set<Promise<void>>();
  let failure: { err: unknown } | undefined;
  let pos = 0;
  try {
    for await (const chunk of source) {
      if (failure) break;
      if (chunk.length === 0) continue;
      // ssh2 copies the chunk into its packet now, or later for the part beyond one request: the chunk is not
      // reused by the sources here (file streams, age, hashing all hand out fresh buffers).
      const p: Promise<void> = call<unknown>((cb) => sftp.write(handle, chunk, 0, chunk.length, pos, cb))
        .then(() => undefined, (err: unknown) => void (failure ??= { err }))
        .finally(() => inFlight.delete(p));
      inFlight.add(p);
      pos += chunk.length;
      if (inFlight.size >= depth) await Promise.race(inFlight);
    }
  } finally {
    await Promise.all(inFlight);
  }
  if (failure) throw failure.err;
  return pos;
}

/**
 * A remote file's bytes from offset 0 to its end, in order, with up to `depth` reads in flight. A short answer
 * (allowed by the protocol anywhere) is followed by a read of the rest; the end is the first empty answer (EOF).
 * Reads still in flight when the consumer stops are awaited before the generator returns. Nothing at or past `limit`
 * is asked for: a file that never ends (or a server that says so) is read only that far.
 */
export async function* readAll(sftp: SFTPWrapper, handle: Buffer, depth = DEPTH, chunk = CHUNK, limit = Infinity): AsyncIterable<Buffer> {
  interface Req { pos: number; len: number; done: Promise<Buffer> }
  const read = (pos: number, len: number): Req => {
    const buf = Buffer.allocUnsafe(len);
    const done = call<number>((cb) => sftp.read(handle, buf, 0, len, pos, cb as unknown as Cb<number>)).then((n) => buf.subarray(0, n));
    done.catch(() => undefined); // awaited in order below; a rejection not reached yet is not unhandled
    return { pos, len, done };
  };
  const queue: Req[] = [];
  let ahead = 0;
  try {
    for (;;) {
      while (queue.length < depth && ahead < limit) {
        queue.push(read(ahead, Math.min(chunk, limit - ahead)));
        ahead += chunk;
      }
      const head = queue.shift();
      if (!head) return; // read up to the limit
      const data = await head.done;
      if (data.length === 0) return; // the end: what is still queued lies beyond it (awaited in finally)
      if (data.length < head.len) queue.unshift(read(head.pos + data.length, head.len - data.length));
      yield data;
    }
  } finally {
    await Promise.allSettled(queue.map((r) => r.done));
  }
}
