import { execFileSync } from 'node:child_process';
import { createCipheriv } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Decrypter, Encrypter, generateHybridIdentity, generateX25519Identity, identityToRecipient } from 'age-encryption';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decrypting, encrypting, payloadKey, sealing, x25519Recipient } from '../../../src/snapshot/targets/age.js';

/**
 * The age files snapshots are encrypted into: the payload runs on Node's native ChaCha20-Poly1305, the header on the
 * age-encryption package. Checked against the package's own JavaScript STREAM (the implementation it replaced) both
 * ways and byte for byte, against the `age` program, at every chunk boundary, and on every kind of damaged file.
 */

const K = 64 * 1024;
const SIZES = [0, 1, 100, K - 1, K, K + 1, 2 * K, 2 * K + 1, 3 * K - 1, 2_000_003];

function plaintext(n: number, seed = n): Buffer {
  const b = Buffer.allocUnsafe(n);
  let x = (seed * 2654435761 + 1) >>> 0;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    b[i] = x >>> 24;
  }
  return b;
}

/** The bytes in pieces of `size` (the last shorter): how a target hands them over. */
async function* pieces(b: Buffer, size: number): AsyncIterable<Buffer> {
  for (let i = 0; i < b.length; i += size) yield b.subarray(i, i + size);
}
async function collect(it: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const out: Buffer[] = [];
  for await (const c of it) out.push(Buffer.from(c));
  return Buffer.concat(out);
}

let identity: string;
let recipient: string;
beforeAll(async () => {
  identity = await generateX25519Identity();
  recipient = await identityToRecipient(identity);
});

const oldEncrypt = async (b: Buffer, to = [recipient]) => {
  const e = new Encrypter();
  for (const r of to) e.addRecipient(r);
  return Buffer.from(await e.encrypt(b));
};
/** The package's decryption, its error message as it gave it. */
const oldDecrypt = async (b: Buffer, id = identity): Promise<Buffer> => {
  const d = new Decrypter();
  d.addIdentity(id);
  const out = await d.decrypt(new ReadableStream({ start: (c) => { c.enqueue(Uint8Array.from(b)); c.close(); } }));
  return collect(out as unknown as AsyncIterable<Uint8Array>);
};
const newEncrypt = (b: Buffer, piece = 1024 * 1024, to = [recipient]) => collect(encrypting(pieces(b, piece), to));
const newDecrypt = (b: Buffer, piece = 1024 * 1024, id = identity) => collect(decrypting(pieces(b, piece), [id], 'x.age'));

/** Where the header ends (after its MAC line), then the 16-byte payload nonce. */
function split(file: Buffer): { header: Buffer; nonce: Buffer; payload: Buffer } {
  const end = file.indexOf('\n', file.indexOf('\n---') + 1) + 1;
  return { header: file.subarray(0, end), nonce: file.subarray(end, end + 16), payload: file.subarray(end + 16) };
}

describe('age encryption of snapshot files', () => {
  it.each(SIZES)('%i bytes: encrypted here, the package decrypts them; encrypted by the package, decrypted here', async (n) => {
    const plain = plaintext(n);
    for (const piece of [1, 13, 4093, K, K + 16, 1024 * 1024]) {
      if ((piece === 1 && n > 100) || (piece === 13 && n > 3 * K)) continue; // small pieces only where it stays quick
      const mine = await newEncrypt(plain, piece);
      expect(mine.subarray(0, 21).toString()).toBe('age-encryption.org/v1');
      expect((await oldDecrypt(mine)).equals(plain)).toBe(true);
      expect((await newDecrypt(await oldEncrypt(plain), piece)).equals(plain)).toBe(true);
      expect((await newDecrypt(mine, piece)).equals(plain)).toBe(true);
    }
  });

  it.each(SIZES)('%i bytes: the payload is byte for byte the package\'s under the same file key and nonce', async (n) => {
    const plain = plaintext(n, 7);
    const theirs = await oldEncrypt(plain);
    const { header, nonce, payload } = split(theirs);
    const d = new Decrypter();
    d.addIdentity(identity);
    const key = payloadKey(await d.decryptHeader(header), nonce);
    const ours = await collect(sealing(pieces(plain, 5000), key));
    expect(ours.length).toBe(payload.length);
    expect(ours.equals(payload)).toBe(true);
  });

  it('several recipients: each identity decrypts; a stranger\'s fails as before', async () => {
    const other = await generateX25519Identity();
    const file = await newEncrypt(plaintext(K + 5), K, [recipient, await identityToRecipient(other)]);
    expect((await oldDecrypt(file, other)).equals(plaintext(K + 5))).toBe(true);
    expect((await newDecrypt(file, K, other)).equals(plaintext(K + 5))).toBe(true);
    const stranger = await generateX25519Identity();
    await expect(newDecrypt(file, K, stranger)).rejects.toThrow(/^decrypt x\.age: no identity matched any of the file's recipients$/);
  });

  it('X25519 recipients are wrapped here (the header as age writes it); a hybrid one is the package\'s', async () => {
    expect(x25519Recipient(recipient)?.length).toBe(32);
    const flipped = recipient.slice(0, -1) + (recipient.endsWith('q') ? 'p' : 'q');
    for (const bad of [flipped, recipient.toUpperCase(), `agf${recipient.slice(3)}`, recipient.slice(0, -2), 'age1']) expect(x25519Recipient(bad)).toBeUndefined();
    const file = await newEncrypt(plaintext(100));
    expect(file.toString('latin1').split('\n').slice(0, 4).map((l) => l.replace(/[A-Za-z0-9+/]{43}/g, 'B64'))).toEqual(['age-encryption.org/v1', '-> X25519 B64', 'B64', '--- B64']);
    const hybrid = await generateHybridIdentity();
    const hybridRecipient = await identityToRecipient(hybrid);
    expect(x25519Recipient(hybridRecipient)).toBeUndefined();
    const both = await newEncrypt(plaintext(K + 1), K, [recipient, hybridRecipient]);
    expect((await oldDecrypt(both, hybrid)).equals(plaintext(K + 1))).toBe(true);
    expect((await newDecrypt(both, K, identity)).equals(plaintext(K + 1))).toBe(true);
  });

  it('streams: ciphertext comes out while the plaintext is still being read, in pieces of about 1 MiB', async () => {
    let read = 0;
    async function* source(): AsyncIterable<Buffer> {
      for (let i = 0; i < 64; i++) {
        read++;
        yield plaintext(K * 4, i);
      }
    }
    let first = -1;
    let largest = 0;
    for await (const c of encrypting(source(), [recipient])) {
      if (first < 0) first = read;
      largest = Math.max(largest, c.length);
    }
    expect(first).toBeLessThanOrEqual(5);
    expect(largest).toBeLessThan(2 * 1024 * 1024);
    let outFirst = -1;
    read = 0;
    const file = await newEncrypt(plaintext(16 * 1024 * 1024, 3));
    async function* counted(): AsyncIterable<Buffer> {
      for await (const c of pieces(file, 256 * 1024)) {
        read++;
        yield c;
      }
    }
    for await (const _ of decrypting(counted(), [identity], 'x')) if (outFirst < 0) outFirst = read;
    expect(outFirst).toBeLessThanOrEqual(2);
  });

  describe('a damaged file fails, with the one-line error the package gave', () => {
    const N = 2 * K + 100;
    let file: Buffer;
    let at: number; // the first payload chunk's offset
    let key: Buffer;
    beforeAll(async () => {
      file = await newEncrypt(plaintext(N));
      const { header, nonce } = split(file);
      at = header.length + 16;
      const d = new Decrypter();
      d.addIdentity(identity);
      key = payloadKey(await d.decryptHeader(header), nonce);
    });
    const S = K + 16;
    /** One chunk sealed by hand: counter `i`, last-chunk flag `last`. */
    const chunk = (i: number, last: boolean, plain: Buffer) => {
      const nonce = Buffer.alloc(12);
      nonce.writeUIntBE(i, 5, 6);
      nonce[11] = last ? 1 : 0;
      const c = createCipheriv('chacha20-poly1305', key, nonce, { authTagLength: 16 });
      return Buffer.concat([c.update(plain), c.final(), c.getAuthTag()]);
    };
    const flip = (b: Buffer, i: number) => {
      const c = Buffer.from(b);
      c[i]! ^= 1;
      return c;
    };
    const cases: Array<[string, () => Buffer, RegExp]> = [
      ['a byte of the first chunk changed', () => flip(file, at + 5), /^invalid tag$/],
      ['a byte of the last chunk changed', () => flip(file, at + 2 * S + 3), /^invalid tag$/],
      ['a tag changed', () => flip(file, at + S - 1), /^invalid tag$/],
      ['a character of the header MAC changed', () => { const c = Buffer.from(file); c[at - 20] = c[at - 20] === 65 ? 66 : 65; return c; }, /^invalid header HMAC$/],
      ['cut at a chunk boundary (its last chunk not marked last)', () => file.subarray(0, at + 2 * S), /^invalid tag$/],
      ['cut inside a chunk', () => file.subarray(0, file.length - 5), /^invalid tag$/],
      ['cut to 10 bytes of its last chunk', () => file.subarray(0, at + 2 * S + 10), /^"ciphertext" expected length >= tagLength=16$/],
      ['two chunks swapped', () => Buffer.concat([file.subarray(0, at), file.subarray(at + S, at + 2 * S), file.subarray(at, at + S), file.subarray(at + 2 * S)]), /^invalid tag$/],
      ['bytes appended', () => Buffer.concat([file, Buffer.from([1, 2, 3])]), /^invalid tag$/],
      ['a whole chunk appended', () => Buffer.concat([file, chunk(3, true, plaintext(5))]), /^invalid tag$/],
      ['no payload', () => file.subarray(0, at), /^"ciphertext" expected length >= tagLength=16$/],
      ['the nonce cut short', () => file.subarray(0, at - 3), /^stream ended before reading 16 bytes$/],
      ['the header cut', () => file.subarray(0, at - 40), /^invalid stanza$/],
      ['a middle chunk marked last', () => Buffer.concat([file.subarray(0, at), chunk(0, true, plaintext(N).subarray(0, K)), file.subarray(at + S)]), /^invalid tag$/],
      ['an empty last chunk after a full one', () => Buffer.concat([file.subarray(0, at), chunk(0, false, plaintext(N).subarray(0, K)), chunk(1, true, Buffer.alloc(0))]), /^final chunk is empty$/],
      ['not an age file', () => Buffer.from('hello\n'), /./],
    ];
    it.each(cases)('%s', async (_what, damaged, message) => {
      const bad = damaged();
      const theirs = await oldDecrypt(bad).then(() => 'decrypted', (e: Error) => e.message);
      for (const piece of [13, 1000, S, 1024 * 1024]) {
        const ours = await newDecrypt(bad, piece).then(() => 'decrypted', (e: Error) => e.message);
        expect(ours).toBe(`decrypt x.age: ${theirs}`);
      }
      expect(theirs).toMatch(message);
      expect(theirs).not.toContain('\n');
    });
  });

  describe('the age program (age 1.x) reads what this writes, and this reads what it writes', () => {
    let dir: string;
    let keyFile: string;
    let ageIdentity: string;
    let ageRecipient: string;
    beforeAll(() => {
      dir = mkdtempSync(join(tmpdir(), 'mw-age-'));
      keyFile = join(dir, 'key.txt');
      execFileSync('age-keygen', ['-o', keyFile], { stdio: 'ignore' });
      ageRecipient = execFileSync('age-keygen', ['-y', keyFile]).toString().trim();
      ageIdentity = execFileSync('grep', ['^AGE-SECRET-KEY-1', keyFile]).toString().trim();
    });
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    it.each([0, 1, K, K + 1, 3 * K, 1_000_001])('%i bytes', async (n) => {
      const plain = plaintext(n, 11);
      const mine = await newEncrypt(plain, 8192, [ageRecipient]);
      expect(execFileSync('age', ['-d', '-i', keyFile], { input: mine, maxBuffer: 64 * 1024 * 1024 }).equals(plain)).toBe(true);
      const src = join(dir, 'plain');
      writeFileSync(src, plain);
      const theirs = execFileSync('age', ['-r', ageRecipient, src], { maxBuffer: 64 * 1024 * 1024 });
      expect((await newDecrypt(theirs, 9000, ageIdentity)).equals(plain)).toBe(true);
      const damaged = Buffer.from(theirs);
      damaged[damaged.length - 1]! ^= 1;
      await expect(newDecrypt(damaged, 9000, ageIdentity)).rejects.toThrow(/^decrypt x\.age: invalid tag$/);
    });
  });
});
