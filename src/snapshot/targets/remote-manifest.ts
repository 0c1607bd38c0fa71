import { storeError } from '../../core/errors.js';
import { MANIFEST_FORMAT, type Manifest } from '../manifest.js';
import { HOLDS_KEY } from './holds.js';
import { ENCRYPTED_SUFFIX } from './age.js';
import { checkSeal, type RemoteAuth } from './auth.js';
import type { TargetConfig } from './config.js';
import { MANIFEST_KEY, MANIFEST_MAX_BYTES, SAFE_KEY, UnverifiedSnapshotError, type ObjectDigest } from './types.js';

/** One file of the snapshot as stored on a target: under which key, the stored bytes' digest, and for whom encrypted. */
export interface RemoteObject extends ObjectDigest {
  key: string;
  encrypted?: { recipients: string[] };
}

/** Added to the snapshot's manifest when it goes to a target: where each file went and what the snapshot holds. */
export interface RemoteRecord {
  format: 'memory-warden-remote/1';
  target: string;
  uploadedAt: string;
  /** Keyed by the file's name in the snapshot folder (the keys of `manifest.files`). */
  objects: Record<string, RemoteObject>;
  /** The ids/users held, as keyed hashes (holds.ts); keyId tells which erase key made them. */
  holds: RemoteObject & { keyId: string; format?: number };
  /** The MAC of the whole manifest with the target's key (absent on a target without authKeyFile). */
  auth?: RemoteAuth;
}

export type RemoteManifest = Manifest & { remote: RemoteRecord };

export async function readAll(source: AsyncIterable<Uint8Array>, limit = 64 * 1024 * 1024): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of source) {
    n += c.length;
    if (n > limit) throw storeError(`object larger than ${limit} bytes where a small one was expected`);
    chunks.push(Buffer.from(c));
  }
  return Buffer.concat(chunks);
}

/** What reading a manifest needs of a target (CheckedTarget, checked.ts): its bytes, the key, the store it serves. */
export interface ManifestSource {
  readonly name: string;
  readonly store: string;
  readonly key: Buffer | null;
  readonly config: Pick<TargetConfig, 'encrypt'>;
  manifestBytes(snapshot: string): Promise<AsyncIterable<Uint8Array>>;
}

/**
 * The manifest of a remote snapshot, checked as the local one is, and its remote record with it. Nothing in it is
 * trusted before its MAC is checked against the target's key, for this store and this snapshot name (auth.ts); then
 * it must describe this store, and on a target that encrypts, every file must be stored encrypted. Refusals are
 * UnverifiedSnapshotError; an unreadable or malformed manifest is a store error.
 */
export async function readRemoteManifest(target: ManifestSource, name: string): Promise<RemoteManifest> {
  const what = `${target.name}:${name}/${MANIFEST_KEY}`;
  let m: Partial<RemoteManifest>;
  try {
    m = JSON.parse((await readAll(await target.manifestBytes(name), MANIFEST_MAX_BYTES)).toString('utf8')) as Partial<RemoteManifest>;
  } catch (err) {
    if (err instanceof UnverifiedSnapshotError) throw err;
    throw storeError(`${what}: unreadable (${(err as Error).message})`, err);
  }
  if (!m || typeof m !== 'object' || m.format !== MANIFEST_FORMAT || !m.sqlite === !m.tables || !Array.isArray(m.qdrant) || !m.files || !m.remote || m.remote.format !== 'memory-warden-remote/1' || !m.remote.objects) {
    throw storeError(`${what}: not a memory-warden remote snapshot manifest`);
  }
  checkSeal(target.key, target.name, target.store, name, m as RemoteManifest, what);
  const files = Object.keys(m.files);
  for (const rel of files) {
    const o = m.remote.objects[rel];
    if (!SAFE_KEY.test(rel) || rel === MANIFEST_KEY || rel === HOLDS_KEY) throw storeError(`${what}: file entry "${rel}" points outside the snapshot`);
    if (!o || !SAFE_KEY.test(o.key) || o.key === MANIFEST_KEY || o.key === HOLDS_KEY) throw storeError(`${what}: no stored object recorded for ${rel}`);
    if (target.config.encrypt && !(o.encrypted && o.key.endsWith(ENCRYPTED_SUFFIX))) {
      throw new UnverifiedSnapshotError(`${what}: ${rel} is recorded as stored unencrypted, but target ${target.name} encrypts every file: refused`);
    }
  }
  if (Object.keys(m.remote.objects).length !== files.length) throw storeError(`${what}: objects and files differ`);
  if (!m.remote.holds || m.remote.holds.key !== HOLDS_KEY) throw storeError(`${what}: its holds are recorded under "${String(m.remote.holds?.key)}", not ${HOLDS_KEY}`);
  if (m.store !== target.store) throw new UnverifiedSnapshotError(`${what}: a snapshot of store "${String(m.store)}" under store ${target.store}'s prefix: refused`);
  return m as RemoteManifest;
}
