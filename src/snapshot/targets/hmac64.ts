import { hash } from 'node:crypto';

/**
 * The first 64 bits of HMAC-SHA256(key, prefix + text), for a million texts under one key (a snapshot's holds): the
 * SHA-256 compression written out here so that the key's two padded blocks are compressed once (HMAC's inner and
 * outer midstates, RFC 2104 §4) and each text costs the blocks of its own bytes plus one for the outer hash: two
 * compressions for an id of up to 52 bytes, against four through node:crypto, whose every call also pays for a
 * new hash context. Equal to createHmac('sha256', key).update(prefix + text, 'utf8').digest() read as a 64-bit
 * big-endian number (test/snapshot/targets/hmac64.test.ts holds them together over lengths, keys and encodings).
 */
const K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
  0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
  0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
  0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
  0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
  0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
const IV = new Int32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);

/** One SHA-256 compression of the 64 bytes at `at` into `h` (FIPS 180-4 §6.2.2); `w`: 64 words of scratch. */
function compress(h: Int32Array, bytes: Uint8Array, at: number, w: Int32Array): void {
  for (let i = 0; i < 16; i++) {
    const j = at + i * 4;
    w[i] = (bytes[j]! << 24) | (bytes[j + 1]! << 16) | (bytes[j + 2]! << 8) | bytes[j + 3]!;
  }
  for (let i = 16; i < 64; i++) {
    const a = w[i - 15]!;
    const b = w[i - 2]!;
    const s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
    const s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
    w[i] = (w[i - 16]! + s0 + w[i - 7]! + s1) | 0;
  }
  let a = h[0]!, b = h[1]!, c = h[2]!, d = h[3]!, e = h[4]!, f = h[5]!, g = h[6]!, k = h[7]!;
  for (let i = 0; i < 64; i++) {
    const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const t1 = (k + S1 + ((e & f) ^ (~e & g)) + K[i]! + w[i]!) | 0;
    const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const t2 = (S0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
    k = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = b;
    b = a;
    a = (t1 + t2) | 0;
  }
  h[0] = (h[0]! + a) | 0;
  h[1] = (h[1]! + b) | 0;
  h[2] = (h[2]! + c) | 0;
  h[3] = (h[3]! + d) | 0;
  h[4] = (h[4]! + e) | 0;
  h[5] = (h[5]! + f) | 0;
  h[6] = (h[6]! + g) | 0;
  h[7] = (h[7]! + k) | 0;
}

/** The state after one block of the key XOR `pad` (HMAC's ipad 0x36, opad 0x5c). */
function midstate(key: Buffer, pad: number, w: Int32Array): Int32Array {
  const block = new Uint8Array(64);
  for (let i = 0; i < 64; i++) block[i] = (key[i] ?? 0) ^ pad;
  const h = IV.slice();
  compress(h, block, 0, w);
  return h;
}

/**
 * `(text) => the first 64 bits of HMAC-SHA256(key, prefix + text)` as a bigint, `prefix` ASCII. The texts are
 * encoded as UTF-8 (lone surrogates as U+FFFD, as Buffer and createHmac encode them).
 */
export function hmac64(key: Buffer, prefix: string): (text: string) => bigint {
  const h = hmacState(key, prefix);
  return (text) => {
    const s = h(text);
    return (BigInt(s[0]! >>> 0) << 32n) | BigInt(s[1]! >>> 0);
  };
}

/**
 * hmac64's 64 bits written big-endian into `out` at `at` (what createHmac's digest holds in its first eight bytes),
 * with no object made per text: an erase hashes every id it plans to take this way.
 */
export function hmac64Into(key: Buffer, prefix: string): (text: string, out: Uint8Array, at: number) => void {
  const h = hmacState(key, prefix);
  return (text, out, at) => {
    const s = h(text);
    for (let i = 0; i < 2; i++) {
      out[at + i * 4] = s[i]! >>> 24;
      out[at + i * 4 + 1] = (s[i]! >>> 16) & 0xff;
      out[at + i * 4 + 2] = (s[i]! >>> 8) & 0xff;
      out[at + i * 4 + 3] = s[i]! & 0xff;
    }
  };
}

/** HMAC's state after the outer hash (its first words are the digest's first bytes), of a text or of bytes. */
export interface HmacWords {
  /** `prefix + text`, the text encoded as UTF-8. */
  text(text: string): Int32Array;
  /** `prefix + buf[from..to)`, the bytes as they are. */
  bytes(buf: Uint8Array, from: number, to: number): Int32Array;
}

/** HmacWords under `key` with `prefix` (ASCII); the array returned is reused by the next call. */
export function hmacWords(key: Buffer, prefix: string): HmacWords {
  const w = new Int32Array(64);
  const k = key.length > 64 ? hash('sha256', key, 'buffer') : key;
  const inner = midstate(k, 0x36, w);
  const outer = midstate(k, 0x5c, w);
  const h = new Int32Array(8);
  // The outer message: the inner digest, then its padding for a total of 64 + 32 bytes (768 bits).
  const out = new Uint8Array(64);
  out[32] = 0x80;
  out[62] = 0x03;
  let msg = Buffer.alloc(256);
  msg.write(prefix, 0, 'latin1');
  const start = prefix.length;
  /** Room for `n` bytes after the prefix, its 0x80 and the 8 bytes of its length. */
  const room = (n: number): void => {
    if (start + n + 72 <= msg.length) return;
    const bigger = Buffer.alloc(start + n + 72);
    msg.copy(bigger, 0, 0, start);
    msg = bigger;
  };
  /** The message is `msg[0..n)`: padded, hashed, and hashed again under the outer key. */
  const finish = (n: number): Int32Array => {
    const blocks = (n + 9 + 63) >>> 6;
    msg[n] = 0x80;
    for (let i = n + 1; i < blocks * 64 - 5; i++) msg[i] = 0;
    // The inner message follows the key's block: its length in bits counts those 64 bytes too.
    const bits = (64 + n) * 8;
    const end = blocks * 64;
    msg[end - 5] = Math.floor(bits / 2 ** 32) & 0xff;
    msg[end - 4] = (bits >>> 24) & 0xff;
    msg[end - 3] = (bits >>> 16) & 0xff;
    msg[end - 2] = (bits >>> 8) & 0xff;
    msg[end - 1] = bits & 0xff;
    h.set(inner);
    for (let b = 0; b < blocks; b++) compress(h, msg, b * 64, w);
    for (let i = 0; i < 8; i++) {
      out[i * 4] = h[i]! >>> 24;
      out[i * 4 + 1] = (h[i]! >>> 16) & 0xff;
      out[i * 4 + 2] = (h[i]! >>> 8) & 0xff;
      out[i * 4 + 3] = h[i]! & 0xff;
    }
    h.set(outer);
    compress(h, out, 0, w);
    return h;
  };
  return {
    text(text) {
      // At most 3 bytes of UTF-8 a UTF-16 unit.
      room(text.length * 3);
      let n = start;
      let ascii = true;
      for (let i = 0; i < text.length; i++) {
        const c = text.charCodeAt(i);
        if (c >= 0x80) {
          ascii = false;
          break;
        }
        msg[n++] = c;
      }
      if (!ascii) n = start + msg.write(text, start, 'utf8');
      return finish(n);
    },
    bytes(buf, from, to) {
      room(to - from);
      let n = start;
      for (let i = from; i < to; i++) msg[n++] = buf[i]!;
      return finish(n);
    },
  };
}

/** `(text) => the state after HMAC's outer hash` (its first words are the digest's first bytes); the array is reused. */
function hmacState(key: Buffer, prefix: string): (text: string) => Int32Array {
  const words = hmacWords(key, prefix);
  return (text) => words.text(text);
}
