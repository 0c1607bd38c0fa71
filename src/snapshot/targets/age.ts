import { createCipheriv, createDecipheriv, createHmac, createPublicKey, diffieHellman, generateKeyPairSync, hkdfSync, randomBytes } from 'node:crypto';
import { configError, storeError } from '../../core/errors.js';
import { ownerOnlyText } from './auth.js';
import { expandTilde } from './types.js';

/**
 * Client-side encryption with age (https://age-encryption.org/v1): files are encrypted to the configured
 * recipients before they leave the machine and decrypted after download, so the storage never holds a memory's
 * text. Only public keys (`age1…`) are in config; the identity (`AGE-SECRET-KEY-1…`) is needed only to restore.
 *
 * The header (the file key wrapped to each recipient, its MAC) is the age-encryption package's, loaded only when a
 * file is encrypted or decrypted. The payload, every byte of the file, is age's STREAM run on Node's native
 * ChaCha20-Poly1305: 64 KiB chunks, each sealed under a key from HKDF-SHA-256 over the file key and a 16-byte
 * nonce, with a 12-byte nonce of an 11-byte big-endian chunk counter and a last-chunk flag. The bytes are the same
 * as the package's own (test/snapshot/targets/age.test.ts checks both ways); the package's JavaScript cipher took
 * ten times as long.
 */

export const IDENTITY_ENV = 'MEMORY_WARDEN_AGE_IDENTITY';
export const ENCRYPTED_SUFFIX = '.age';

const CHUNK = 64 * 1024;
const TAG = 16;
const SEALED = CHUNK + TAG;
/** A header larger than this is not an age header memory-warden wrote (each recipient's stanza is under 2 KiB). */
const HEADER_MAX = 1024 * 1024;

/** The payload key: HKDF-SHA-256 of the file key, salted with the payload nonce, labelled "payload". */
export function payloadKey(fileKey: Uint8Array, nonce: Uint8Array): Buffer {
  return Buffer.from(hkdfSync('sha256', fileKey, nonce, 'payload', 32));
}

/** STREAM's nonces: chunk counter (11 bytes, big-endian) and the last-chunk flag. */
class StreamNonce {
  readonly bytes = Buffer.alloc(12);
  next(): void {
    for (let i = 10; i >= 0; i--) {
      this.bytes[i] = (this.bytes[i]! + 1) & 0xff;
      if (this.bytes[i] !== 0) break;
    }
  }
  last(): void {
    this.bytes[11] = 1;
  }
}

function seal(key: Buffer, nonce: Buffer, plain: Buffer): Buffer[] {
  const c = createCipheriv('chacha20-poly1305', key, nonce, { authTagLength: TAG });
  const body = c.update(plain);
  c.final();
  return [body, c.getAuthTag()];
}

/** One chunk's plaintext, or the error age-encryption gave for the same chunk (one line, as before). */
function open(key: Buffer, nonce: Buffer, sealed: Buffer): Buffer {
  if (sealed.length < TAG) throw new Error('"ciphertext" expected length >= tagLength=16');
  const d = createDecipheriv('chacha20-poly1305', key, nonce, { authTagLength: TAG });
  d.setAuthTag(sealed.subarray(sealed.length - TAG));
  const plain = d.update(sealed.subarray(0, sealed.length - TAG));
  try {
    d.final();
  } catch {
    throw new Error('invalid tag');
  }
  return plain;
}

const asBuffer = (b: Uint8Array): Buffer => (Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength));

interface AgeRecipient {
  wrapFileKey(fileKey: Uint8Array): unknown;
}

const BECH32 = 'qpzry9x8gf2tvdw0s3jn54khce6mua7l';

/** The 32-byte key of an X25519 recipient (`age1…`, bech32), or undefined for any other kind (left to the package). */
export function x25519Recipient(s: string): Buffer | undefined {
  const at = s.lastIndexOf('1');
  if (s.slice(0, at) !== 'age' || s !== s.toLowerCase()) return undefined;
  const data = [...s.slice(at + 1)].map((c) => BECH32.indexOf(c));
  if (data.length < 6 || data.some((v) => v < 0)) return undefined;
  let chk = 1;
  for (const v of [...[...'age'].map((c) => c.charCodeAt(0) >> 5), 0, ...[...'age'].map((c) => c.charCodeAt(0) & 31), ...data]) {
    const top = chk >>> 25;
    chk = ((chk & 0x1ffffff) << 5) ^ v;
    for (const [i, g] of [0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3].entries()) if ((top >>> i) & 1) chk ^= g;
  }
  if (chk !== 1) return undefined;
  const bytes: number[] = [];
  let acc = 0;
  let bits = 0;
  for (const v of data.slice(0, -6)) {
    acc = (acc << 5) | v;
    bits += 5;
    if (bits >= 8) {
      bits -= 8;
      bytes.push((acc >>> bits) & 0xff);
    }
  }
  if (bits >= 5 || (acc & ((1 << bits) - 1)) !== 0 || bytes.length !== 32) return undefined;
  return Buffer.from(bytes);
}

const b64 = (b: Buffer) => b.toString('base64').replace(/=+$/, '');
const x25519Public = (raw: Buffer) => createPublicKey({ key: { kty: 'OKP', crv: 'X25519', x: raw.toString('base64url') }, format: 'jwk' });

/** One X25519 recipient's stanza: the file key wrapped under an ephemeral key agreement, as age's spec says. */
function x25519Stanza(fileKey: Buffer, recipient: Buffer): string {
  const { privateKey, publicKey } = generateKeyPairSync('x25519');
  const share = Buffer.from(publicKey.export({ format: 'jwk' }).x!, 'base64url');
  const secret = diffieHellman({ privateKey, publicKey: x25519Public(recipient) });
  if (secret.every((b) => b === 0)) throw new Error('age recipient is a low-order point');
  const key = Buffer.from(hkdfSync('sha256', secret, Buffer.concat([share, recipient]), 'age-encryption.org/v1/X25519', 32));
  const body = Buffer.concat(seal(key, Buffer.alloc(12), fileKey));
  return `-> X25519 ${b64(share)}\n${b64(body)}\n`; // a 32-byte body: one line, shorter than 64 columns
}

/**
 * The header and payload nonce of a new age file to `recipients`, and its payload key. X25519 recipients (`age1…`,
 * what age-keygen makes) are wrapped here with Node's X25519, HKDF and ChaCha20-Poly1305, as age's spec says
 * (test/snapshot/targets/age.test.ts: the package and the `age` program read the files): the age-encryption
 * package, a quarter of a second of CPU to load, is then not loaded by a push. Any other kind is the package's.
 */
async function newFile(recipients: readonly string[]): Promise<{ head: Buffer; key: Buffer }> {
  const raw = recipients.map(x25519Recipient);
  if (raw.some((r) => !r)) return packageFile(recipients);
  const fileKey = randomBytes(16);
  const noMac = `age-encryption.org/v1\n${raw.map((r) => x25519Stanza(fileKey, r!)).join('')}---`;
  const mac = createHmac('sha256', Buffer.from(hkdfSync('sha256', fileKey, Buffer.alloc(0), 'header', 32))).update(noMac).digest();
  const nonce = randomBytes(16);
  return { head: Buffer.concat([Buffer.from(`${noMac} ${b64(mac)}\n`), nonce]), key: payloadKey(fileKey, nonce) };
}

/**
 * The same made by the package (any recipient it takes): it encrypts an empty file (header, nonce, one empty last
 * chunk); the file key it drew is seen on its way to the recipients' wrapping, and the empty chunk's tag, checked
 * here, proves the payload key is the one it used.
 */
async function packageFile(recipients: readonly string[]): Promise<{ head: Buffer; key: Buffer }> {
  const { Encrypter } = await import('age-encryption');
  const e = new Encrypter();
  for (const r of recipients) e.addRecipient(r);
  const wrappers = (e as unknown as { recipients?: AgeRecipient[] }).recipients;
  if (!Array.isArray(wrappers) || wrappers.length !== recipients.length) throw new Error('age-encryption: its Encrypter no longer keeps its recipients where this version expects them');
  let fileKey: Uint8Array | undefined;
  for (const w of wrappers) {
    const wrap = w.wrapFileKey.bind(w);
    w.wrapFileKey = (k: Uint8Array) => {
      fileKey = Uint8Array.from(k);
      return wrap(k);
    };
  }
  // An empty stream, read here: the package reads a byte array through fetch's Response, which loads undici.
  const parts: Buffer[] = [];
  for await (const p of (await e.encrypt(ReadableStream.from<Uint8Array>([]))) as unknown as AsyncIterable<Uint8Array>) parts.push(Buffer.from(p));
  const empty = Buffer.concat(parts);
  const head = empty.subarray(0, empty.length - TAG);
  const key = payloadKey(fileKey!, head.subarray(head.length - 16));
  const n = new StreamNonce();
  n.last();
  if (!fileKey || !seal(key, n.bytes, Buffer.alloc(0))[1]!.equals(empty.subarray(empty.length - TAG))) throw new Error('age-encryption: the payload key does not seal as the package does');
  return { head: Buffer.from(head), key };
}

/** A stream of ciphertext for a stream of plaintext (age's STREAM: 64 KiB chunks, each authenticated). */
export async function* encrypting(source: AsyncIterable<Uint8Array>, recipients: readonly string[]): AsyncIterable<Uint8Array> {
  const { head, key } = await newFile(recipients);
  yield* sealing(source, key, head);
}

/**
 * A stream cut into pieces of `size` bytes, each passed to `each` with whether it is the stream's last (that one may
 * be shorter, or empty): a full piece is known not to be the last only once a byte after it is seen. What `each`
 * returns is handed on after each chunk of the source.
 */
async function* pieces<T>(source: AsyncIterable<Uint8Array>, size: number, each: (piece: Buffer, last: boolean) => T): AsyncIterable<T[]> {
  const pending = Buffer.allocUnsafe(size);
  let used = 0;
  for await (const chunk of source) {
    const out: T[] = [];
    let b = asBuffer(chunk);
    while (b.length > 0) {
      if (used === size) {
        out.push(each(pending, false));
        used = 0;
      }
      if (used === 0 && b.length > size) { // whole pieces straight from the source's buffer
        out.push(each(b.subarray(0, size), false));
        b = b.subarray(size);
        continue;
      }
      const n = Math.min(size - used, b.length);
      b.copy(pending, used, 0, n);
      used += n;
      b = b.subarray(n);
    }
    yield out;
  }
  yield [each(pending.subarray(0, used), true)];
}

/**
 * The payload of an age file under the payload key `key`, after `head` (the header and the payload nonce): each
 * chunk's ciphertext and tag as Node's cipher makes them (joining them would copy every byte once more; a writer
 * joins them, writev).
 */
export async function* sealing(source: AsyncIterable<Uint8Array>, key: Buffer, head: Buffer = Buffer.alloc(0)): AsyncIterable<Buffer> {
  const nonce = new StreamNonce();
  const sealed = (plain: Buffer, last: boolean) => {
    if (last) nonce.last();
    const b = seal(key, nonce.bytes, plain);
    nonce.next();
    return b;
  };
  if (head.length > 0) yield head;
  for await (const batch of pieces(source, CHUNK, sealed)) for (const b of batch) yield* b;
}

/**
 * The header's bytes (up to and with its MAC line), read from the start of `it`, and what came after them. The
 * package checks it (stanzas, recipients, MAC); a stream that ends first is handed over as it is, for the package's
 * own error.
 */
async function readHeader(it: AsyncIterator<Uint8Array>): Promise<{ header: Buffer; rest: Buffer; ended: boolean }> {
  let buf = Buffer.alloc(0);
  let mac = -1;
  let scanned = 0; // where the MAC line's start was not found (the last 3 bytes may begin it)
  for (;;) {
    if (mac < 0) mac = buf.indexOf('\n---', Math.max(0, scanned - 3));
    scanned = buf.length;
    const end = mac >= 0 ? buf.indexOf('\n', mac + 1) : -1;
    if (end >= 0) return { header: buf.subarray(0, end + 1), rest: buf.subarray(end + 1), ended: false };
    if (buf.length > HEADER_MAX) throw new Error(`header larger than ${HEADER_MAX} bytes`);
    const next = await it.next();
    if (next.done) return { header: buf, rest: Buffer.alloc(0), ended: true };
    buf = Buffer.concat([buf, asBuffer(next.value)]);
  }
}

async function* decryptPayload(source: AsyncIterable<Uint8Array>, identities: readonly string[]): AsyncIterable<Buffer> {
  const it = source[Symbol.asyncIterator]();
  const { Decrypter } = await import('age-encryption');
  const d = new Decrypter();
  for (const i of identities) d.addIdentity(i);
  const { header, rest, ended } = await readHeader(it);
  const fileKey = await d.decryptHeader(header);
  if (ended) throw new Error('stream ended before reading 16 bytes');
  // The payload nonce, then the chunks.
  let head = rest;
  while (head.length < 16) {
    const next = await it.next();
    if (next.done) throw new Error('stream ended before reading 16 bytes');
    head = Buffer.concat([head, asBuffer(next.value)]);
  }
  const key = payloadKey(fileKey, head.subarray(0, 16));
  const nonce = new StreamNonce();
  let first = true;
  const opened = (sealed: Buffer, last: boolean) => {
    if (last) nonce.last();
    const plain = open(key, nonce.bytes, sealed);
    if (last && !first && plain.length === 0) throw new Error('final chunk is empty');
    nonce.next();
    first = false;
    return plain;
  };
  async function* payload(): AsyncIterable<Uint8Array> {
    yield head.subarray(16);
    for (let next = await it.next(); !next.done; next = await it.next()) yield next.value;
  }
  for await (const batch of pieces(payload(), SEALED, opened)) yield* batch;
}

/** Plaintext of a ciphertext stream; a wrong identity or a changed byte fails, never yields altered plaintext. */
export async function* decrypting(source: AsyncIterable<Uint8Array>, identities: readonly string[], what: string): AsyncIterable<Uint8Array> {
  try {
    yield* decryptPayload(source, identities);
  } catch (err) {
    throw storeError(`decrypt ${what}: ${(err as Error).message}`, err);
  }
}

/**
 * The identities that decrypt, from `MEMORY_WARDEN_AGE_IDENTITY` (one or more `AGE-SECRET-KEY-1…`) or an identity
 * file readable by its owner only (as `age-keygen` writes it: comments and one key per line).
 */
export function loadIdentities(target: string, identityFile: string | undefined, env: NodeJS.ProcessEnv = process.env): string[] {
  let text = env[IDENTITY_ENV];
  let from = IDENTITY_ENV;
  if (!text && identityFile) {
    text = ownerOnlyText(target, 'identity file', identityFile);
    from = expandTilde(identityFile);
  }
  if (!text) throw configError(`target ${target}: its snapshots are encrypted; set ${IDENTITY_ENV} or encrypt.identityFile to restore`);
  const keys = text.split(/\r?\n/).map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
  if (keys.length === 0 || keys.some((k) => !/^AGE-SECRET-KEY-1[0-9A-Z]+$/.test(k))) throw configError(`target ${target}: ${from} holds no age identity (AGE-SECRET-KEY-1…)`);
  return keys;
}
