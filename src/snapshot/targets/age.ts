import { Decrypter, Encrypter } from 'age-encryption';
import { configError, storeError } from '../../core/errors.js';
import { ownerOnlyText } from './auth.js';
import { expandTilde } from './types.js';

/**
 * Client-side encryption with age (https://age-encryption.org/v1): files are encrypted to the configured
 * recipients before they leave the machine and decrypted after download, so the storage never holds a memory's
 * text. Only public keys (`age1…`) are in config; the identity (`AGE-SECRET-KEY-1…`) is needed only to restore.
 */

export const IDENTITY_ENV = 'MEMORY_WARDEN_AGE_IDENTITY';
export const ENCRYPTED_SUFFIX = '.age';

/** A stream of ciphertext for a stream of plaintext (age's STREAM: 64 KiB chunks, each authenticated). */
export async function* encrypting(source: AsyncIterable<Uint8Array>, recipients: readonly string[]): AsyncIterable<Uint8Array> {
  const e = new Encrypter();
  for (const r of recipients) e.addRecipient(r);
  const out = await e.encrypt(ReadableStream.from(source) as ReadableStream<Uint8Array>);
  yield* out as unknown as AsyncIterable<Uint8Array>;
}

/** Plaintext of a ciphertext stream; a wrong identity or a changed byte fails, never yields altered plaintext. */
export async function* decrypting(source: AsyncIterable<Uint8Array>, identities: readonly string[], what: string): AsyncIterable<Uint8Array> {
  const d = new Decrypter();
  for (const i of identities) d.addIdentity(i);
  try {
    const out = await d.decrypt(ReadableStream.from(source) as ReadableStream<Uint8Array>);
    yield* out as unknown as AsyncIterable<Uint8Array>;
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
