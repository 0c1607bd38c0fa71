// Target authentication: the operator's key (authKeyFile, never uploaded), the MAC sealed into each remote manifest
// and bound to its store and snapshot name, and the check every reader runs before it trusts a manifest.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { closeSync, fsyncSync, openSync, statSync, writeSync } from 'node:fs';
import { configError, usageError } from '../../core/errors.js';
import { readKey, readRegularFile } from '../../core/read-file.js';
import { expandTilde, UnverifiedSnapshotError } from './types.js';

/**
 * Owns the authentication of what a snapshot target holds: the operator's target key (a file that never leaves this
 * side), the MAC sealed into every remote manifest, bound to its store and snapshot name, and the check before trust.
 */

/** The MAC of one remote manifest, kept inside it (`remote.auth`); the manifest's checksums cover every object. */
export interface RemoteAuth {
  alg: 'hmac-sha256';
  /** Which key made it (a hash of the key, never the key): a clear message when the key was changed. */
  keyId: string;
  mac: string;
}

/** The text a key file holds: at least 32 bytes as hex, as `snapshots keygen` or `openssl rand -hex 32` writes them. */
const KEY_TEXT = /^(?:[0-9a-f]{2}){32,}$/i;

/** A file readable by its owner only (a private key, an age identity, a target key), its text; else a config error. */
export function ownerOnlyText(target: string, what: string, path: string): string {
  const file = expandTilde(path);
  let mode: number;
  try {
    mode = statSync(file).mode;
  } catch (err) {
    throw configError(`target ${target}: ${what} ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  if ((mode & 0o077) !== 0) throw configError(`target ${target}: ${what} ${file} is readable by others (mode ${(mode & 0o777).toString(8)}); chmod 600 it`);
  return readKey(() => readRegularFile(file, 64 * 1024), `target ${target}: ${what} ${file}`);
}

/** The target's key from `authKeyFile`, or null when the target has none (its snapshots are then unauthenticated). */
export function loadTargetKey(target: { name: string; authKeyFile?: string | undefined }): Buffer | null {
  if (target.authKeyFile === undefined) return null;
  const text = ownerOnlyText(target.name, 'authKeyFile', target.authKeyFile).trim();
  if (!KEY_TEXT.test(text)) throw configError(`target ${target.name}: authKeyFile ${expandTilde(target.authKeyFile)} holds no key (64 or more hex digits; memory-warden snapshots keygen writes one)`);
  return Buffer.from(text, 'hex');
}

export const targetKeyId = (key: Buffer) => createHmac('sha256', key).update('memory-warden target key id').digest('hex').slice(0, 16);

/**
 * What is MACed: the store and snapshot name (so an authentic manifest copied under another name or another store's
 * prefix does not verify) and the manifest as JSON without its auth record. JSON.stringify of what JSON.parse gave
 * is the same text as JSON.stringify of the object that was written, so the reader MACs exactly what it then uses.
 */
function mac(key: Buffer, store: string, snapshot: string, body: unknown): Buffer {
  return createHmac('sha256', key).update(`memory-warden remote manifest/1\n${store}\n${snapshot}\n`).update(JSON.stringify(body)).digest();
}

/** The auth record for a manifest about to be uploaded (`manifest.remote` without `auth`). */
export function sealManifest(key: Buffer, store: string, snapshot: string, manifest: { remote: object }): RemoteAuth {
  return { alg: 'hmac-sha256', keyId: targetKeyId(key), mac: mac(key, store, snapshot, manifest).toString('hex') };
}

/**
 * Throws UnverifiedSnapshotError unless the manifest carries a MAC that this key made for this store and snapshot.
 * Without a key there is nothing to check with: the caller has warned that the target is unauthenticated.
 */
export function checkSeal(key: Buffer | null, target: string, store: string, snapshot: string, manifest: { remote: { auth?: unknown } }, what: string): void {
  if (!key) return;
  const { auth, ...remote } = manifest.remote;
  const a = auth as Partial<RemoteAuth> | undefined;
  if (!a || typeof a !== 'object') {
    throw new UnverifiedSnapshotError(`${what}: carries no MAC, and target ${target} has authKeyFile set: refused (uploaded before the key was set, or the MAC was removed; to restore it knowing anyone who could write the target could have made it, remove authKeyFile from the target's config for that restore)`);
  }
  if (a.alg !== 'hmac-sha256' || typeof a.mac !== 'string' || !/^[0-9a-f]{64}$/.test(a.mac)) throw new UnverifiedSnapshotError(`${what}: its MAC is not an hmac-sha256 one: refused`);
  const want = mac(key, store, snapshot, { ...manifest, remote });
  if (!timingSafeEqual(Buffer.from(a.mac, 'hex'), want)) {
    const other = a.keyId !== targetKeyId(key) ? ` (made with another key, id ${String(a.keyId).slice(0, 16)}; this key's id is ${targetKeyId(key)})` : '';
    throw new UnverifiedSnapshotError(`${what}: its MAC does not verify for store ${store}, snapshot ${snapshot}${other}: refused as forged or moved`);
  }
}

/** `snapshots keygen FILE`: a new key, mode 0600, never over an existing file. Returns its id. */
export function writeTargetKey(path: string): string {
  const file = expandTilde(path);
  const key = randomBytes(32);
  let fd: number;
  try {
    fd = openSync(file, 'wx', 0o600);
  } catch (err) {
    throw usageError(`snapshots keygen: ${file}: ${(err as NodeJS.ErrnoException).code === 'EEXIST' ? 'exists already; a key is never overwritten' : (err as Error).message}`);
  }
  try {
    writeSync(fd, key.toString('hex') + '\n');
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  return targetKeyId(key);
}
