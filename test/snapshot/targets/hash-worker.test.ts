import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashedFile, hashing } from '../../../src/snapshot/targets/digest.js';
import { tempDir } from '../../helpers/store.js';
import { OFFLOAD_AT, PieceHash, hashThreadPolicy } from '../../../src/snapshot/targets/hash-worker.js';

/**
 * Hashes made on the hashing thread are those of the bytes handed on: whatever the pieces' sizes, whether the
 * producer reuses its buffer once a piece is handed on, below and past the size where a stream leaves this thread.
 */

// The thread is used here whatever the machine's load (left to itself, a busy machine hashes on one thread).
beforeAll(() => hashThreadPolicy('always'));
afterAll(() => hashThreadPolicy('auto'));

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** `data` in pieces of `size`, each from one buffer the producer overwrites once the piece was taken. */
async function* reused(data: Buffer, size: number): AsyncIterable<Buffer> {
  const buf = Buffer.alloc(size);
  for (let i = 0; i < data.length; i += size) {
    const n = data.copy(buf, 0, i, i + size);
    yield buf.subarray(0, n);
    buf.fill(0xee); // what the consumer did not take before this is lost
  }
}

async function drain(stream: AsyncIterable<Buffer>): Promise<Buffer> {
  const out: Buffer[] = [];
  for await (const b of stream) out.push(Buffer.from(b));
  return Buffer.concat(out);
}

describe('hashing on the hashing thread', () => {
  const data = randomBytes(OFFLOAD_AT * 3 + 12_345);

  for (const offload of ['always', 'if-running'] as const) {
    for (const n of [0, 17, OFFLOAD_AT - 1, OFFLOAD_AT, OFFLOAD_AT + 1, data.length]) {
      for (const size of [16, 65_536 + 16, 3 * 1024 * 1024 + 7]) {
        if (n > 1024 * 1024 && size === 16) continue; // a million pieces: slow, and nothing the others do not show
        it(`${n} bytes in pieces of ${size}, ${offload}: the bytes handed on and their sha256`, async () => {
          const want = data.subarray(0, n);
          const h = hashing(reused(want, size), offload);
          const got = await drain(h.stream);
          expect(got.equals(want)).toBe(true);
          expect(h.digest()).toEqual({ bytes: n, sha256: sha(want) });
        });
      }
    }
  }

  it('a stream that fails half-way fails, and one after it is hashed', async () => {
    const h = hashing((async function* () {
      yield data.subarray(0, OFFLOAD_AT * 2);
      throw new Error('disk went away');
    })(), 'always');
    await expect(drain(h.stream)).rejects.toThrow('disk went away');
    expect(() => h.digest()).toThrow(/before the stream was drained/);
    const again = hashing(reused(data, 1024 * 1024), 'always');
    await drain(again.stream);
    expect(again.digest().sha256).toBe(sha(data));
  });

  it('a reader that stops early leaves nothing waiting', async () => {
    const h = hashing(reused(data, 65_536), 'always');
    let seen = 0;
    for await (const b of h.stream) {
      seen += b.length;
      if (seen > OFFLOAD_AT * 2) break;
    }
    const again = hashing(reused(data, 65_536), 'if-running');
    await drain(again.stream);
    expect(again.digest().sha256).toBe(sha(data));
  });

  it('a process whose streams are hashed exits by itself: the hashing thread holds it only while it hashes', async () => {
    const digest = fileURLToPath(new URL('../../../dist/src/snapshot/targets/digest.js', import.meta.url));
    const thread = fileURLToPath(new URL('../../../dist/src/snapshot/targets/hash-worker.js', import.meta.url));
    const { dir, cleanup } = tempDir();
    const file = join(dir, 'f');
    writeFileSync(file, Buffer.alloc(OFFLOAD_AT * 2, 2));
    // Streams hashed to the end, and a file read into shared buffers: to the end, left half-way, and one missing.
    const script = `
      const { hashing, hashedFile } = await import(${JSON.stringify(digest)});
      (await import(${JSON.stringify(thread)})).hashThreadPolicy('always');
      for (const n of [3, ${OFFLOAD_AT * 2}, 5]) {
        const h = hashing((async function* () { yield Buffer.alloc(n, 1); })(), 'always');
        for await (const _ of h.stream) void _;
        console.log(h.digest().bytes);
      }
      const whole = hashedFile(${JSON.stringify(file)}, 65536);
      for await (const _ of whole.stream) void _;
      console.log(whole.digest().bytes);
      for await (const _ of hashedFile(${JSON.stringify(file)}, 65536).stream) break;
      await (async () => { for await (const _ of hashedFile(${JSON.stringify(file + '-missing')}, 65536).stream) void _; })().catch(() => {});`;
    const out = await new Promise<{ code: number | null; stdout: string }>((resolve) => {
      const p = execFile(process.execPath, ['--input-type=module', '-e', script], { timeout: 30_000 }, (err, stdout) => resolve({ code: err ? (err as { code?: number }).code ?? -1 : 0, stdout }));
      p.stdin?.end();
    });
    cleanup();
    expect(out).toEqual({ code: 0, stdout: `3\n${OFFLOAD_AT * 2}\n5\n${OFFLOAD_AT * 2}\n` });
  });

  it('streams hashed at once do not mix', async () => {
    const other = randomBytes(OFFLOAD_AT * 2 + 3);
    const a = hashing(reused(data, 1024 * 1024 + 1), 'always');
    const b = hashing(reused(other, 65_536), 'always');
    await Promise.all([drain(a.stream), drain(b.stream)]);
    expect(a.digest().sha256).toBe(sha(data));
    expect(b.digest().sha256).toBe(sha(other));
  });
});

describe('pieces hashed on the hashing thread (multipart parts)', () => {
  it('each piece\'s sha256 and md5, and the whole one\'s, in the order the pieces were given', async () => {
    const parts = [randomBytes(5 * 1024 * 1024), randomBytes(5 * 1024 * 1024), randomBytes(123)];
    const h = new PieceHash(['sha256', 'md5'], ['sha256', 'md5']);
    const each = await Promise.all(parts.map((p) => h.piece(p)));
    const whole = await h.digest();
    for (const [i, p] of parts.entries()) {
      expect(each[i]![0]!.equals(createHash('sha256').update(p).digest())).toBe(true);
      expect(each[i]![1]!.equals(createHash('md5').update(p).digest())).toBe(true);
    }
    expect(whole[0]!.toString('hex')).toBe(sha(Buffer.concat(parts)));
    expect(whole[1]!.toString('hex')).toBe(createHash('md5').update(Buffer.concat(parts)).digest('hex'));
  });

  it('on one thread (a busy machine), the same digests', async () => {
    hashThreadPolicy('never');
    try {
      const parts = [randomBytes(5 * 1024 * 1024), randomBytes(77)];
      const h = new PieceHash(['sha256', 'md5'], ['md5']);
      const each = await Promise.all(parts.map((p) => h.piece(p)));
      expect(each[1]![0]!.equals(createHash('md5').update(parts[1]!).digest())).toBe(true);
      expect((await h.digest())[0]!.toString('hex')).toBe(sha(Buffer.concat(parts)));
      const s = hashing(reused(Buffer.concat(parts), 65_536), 'always');
      await drain(s.stream);
      expect(s.digest().sha256).toBe(sha(Buffer.concat(parts)));
    } finally {
      hashThreadPolicy('always');
    }
  });

  it('a stopped one fails the pieces still waiting, and hashes nothing more', async () => {
    const h = new PieceHash(['sha256'], ['sha256']);
    const waiting = h.piece(randomBytes(8 * 1024 * 1024));
    h.drop();
    await expect(waiting).rejects.toThrow('hashing stopped');
    await expect(h.piece(Buffer.from('x'))).rejects.toThrow('hashing stopped');
  });
});

describe('a file read into buffers shared with the hashing thread (an encrypted upload\'s plaintext)', () => {
  const CHUNK = 64 * 1024;
  const data = randomBytes(CHUNK * 21 + 999); // more pieces than buffers: each buffer is read into again

  /** Each piece as the consumer sees it when it is handed over, and once more just before the next is asked for. */
  async function take(stream: AsyncIterable<Buffer>): Promise<Buffer> {
    const out: Buffer[] = [];
    for await (const b of stream) {
      const seen = Buffer.from(b);
      await new Promise((r) => setTimeout(r, 1)); // the thread and the reads run meanwhile
      expect(b.equals(seen)).toBe(true); // not read into while still the consumer's
      out.push(seen);
    }
    return Buffer.concat(out);
  }

  /** `f` given the path of a file holding `bytes` (or of none, when `bytes` is undefined), removed after. */
  async function withFile(bytes: Buffer | undefined, f: (file: string) => Promise<void>): Promise<void> {
    const { dir, cleanup } = tempDir();
    try {
      const file = join(dir, 'f');
      if (bytes) writeFileSync(file, bytes);
      await f(file);
    } finally {
      cleanup();
    }
  }

  for (const policy of ['always', 'never'] as const) {
    for (const n of [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, CHUNK * 8, data.length]) {
      it(`${n} bytes, ${policy === 'always' ? 'on the thread' : 'on one thread'}: the bytes handed on and their sha256`, async () => {
        hashThreadPolicy(policy);
        try {
          await withFile(data.subarray(0, n), async (file) => {
            const h = hashedFile(file, CHUNK);
            expect(() => h.digest()).toThrow(/before the stream was drained/);
            expect((await take(h.stream)).equals(data.subarray(0, n))).toBe(true);
            expect(h.digest()).toEqual({ bytes: n, sha256: sha(data.subarray(0, n)) });
          });
        } finally {
          hashThreadPolicy('always');
        }
      });
    }
  }

  it('a thread that is behind: no buffer is read into again before the thread has hashed what it held', () => withFile(data, async (file) => {
    // The thread busy with 128 MiB of another stream while this one's pieces are read and handed on at once.
    const other = new PieceHash(['sha256'], []);
    const busy = other.piece(Buffer.from(new SharedArrayBuffer(128 * 1024 * 1024)));
    const h = hashedFile(file, CHUNK);
    const out: Buffer[] = [];
    for await (const b of h.stream) out.push(Buffer.from(b));
    expect(Buffer.concat(out).equals(data)).toBe(true);
    expect(h.digest().sha256).toBe(sha(data));
    await busy;
    await other.digest();
  }));

  it('a reader that stops early leaves nothing waiting, and the next file is hashed', () => withFile(data, async (file) => {
    const h = hashedFile(file, CHUNK);
    let seen = 0;
    for await (const b of h.stream) {
      seen += b.length;
      if (seen > CHUNK * 10) break;
    }
    expect(() => h.digest()).toThrow(/before the stream was drained/);
    const again = hashedFile(file, CHUNK);
    await take(again.stream);
    expect(again.digest().sha256).toBe(sha(data));
  }));

  it('a missing file fails the stream, naming it', () => withFile(undefined, async (file) => {
    await expect(take(hashedFile(file, CHUNK).stream)).rejects.toThrow(/\/f'/);
  }));
});
