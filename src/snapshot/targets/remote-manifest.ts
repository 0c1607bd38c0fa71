import { storeError } from '../../errors.js';
import { MANIFEST_FORMAT, type Manifest } from '../manifest.js';
import { HOLDS_KEY } from './holds.js';
import { MANIFEST_KEY, SAFE_KEY, type ObjectDigest, type SnapshotTarget } from './types.js';

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
  holds: RemoteObject & { keyId: string };
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

/** The manifest of a remote snapshot, checked as the local one is, and its remote record with it. */
export async function readRemoteManifest(target: SnapshotTarget, name: string): Promise<RemoteManifest> {
  const what = `${target.name}:${name}/${MANIFEST_KEY}`;
  let m: Partial<RemoteManifest>;
  try {
    m = JSON.parse((await readAll(await target.get(name, MANIFEST_KEY))).toString('utf8')) as Partial<RemoteManifest>;
  } catch (err) {
    throw storeError(`${what}: unreadable (${(err as Error).message})`, err);
  }
  if (m.format !== MANIFEST_FORMAT || !m.sqlite || !Array.isArray(m.qdrant) || !m.files || !m.remote || m.remote.format !== 'memory-warden-remote/1') {
    throw storeError(`${what}: not a memory-warden remote snapshot manifest`);
  }
  const files = Object.keys(m.files);
  for (const rel of files) {
    const o = m.remote.objects?.[rel];
    if (!SAFE_KEY.test(rel) || rel === MANIFEST_KEY || rel === HOLDS_KEY) throw storeError(`${what}: file entry "${rel}" points outside the snapshot`);
    if (!o || !SAFE_KEY.test(o.key) || o.key === MANIFEST_KEY || o.key === HOLDS_KEY) throw storeError(`${what}: no stored object recorded for ${rel}`);
  }
  if (Object.keys(m.remote.objects).length !== files.length) throw storeError(`${what}: objects and files differ`);
  return m as RemoteManifest;
}
