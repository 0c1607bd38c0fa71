// The target as features use it (list, verify, restore, erase, push): storage plus the key and the store it serves,
// so every manifest read is MAC-checked and every object read is bounded by and checked against its record.
import { storeError } from '../../core/errors.js';
import type { TargetConfig } from './config.js';
import { checkedObject } from './digest.js';
import { readRemoteManifest, type RemoteObject } from './remote-manifest.js';
import { MANIFEST_KEY, MANIFEST_MAX_BYTES, type ObjectDigest, type SnapshotTarget } from './types.js';

/**
 * A target as the features use it: its storage (one implementation of types.ts) with the config's key and the
 * store it serves, so no read trusts the storage: a manifest is read bounded and its MAC checked
 * (remote-manifest.ts), every other object is read bounded by and checked against its authenticated record.
 */
export class CheckedTarget {
  constructor(
    readonly storage: SnapshotTarget,
    readonly config: TargetConfig,
    readonly store: string,
    /** The target's key (auth.ts); null: the target has none and its snapshots are unauthenticated. */
    readonly key: Buffer | null,
  ) {}

  get name(): string {
    return this.storage.name;
  }
  get type(): string {
    return this.storage.type;
  }
  get where(): string {
    return this.storage.where;
  }

  put(snapshot: string, key: string, body: AsyncIterable<Uint8Array>, signal?: AbortSignal): Promise<ObjectDigest> {
    return this.storage.put(snapshot, key, body, signal);
  }
  list(): Promise<string[]> {
    return this.storage.list();
  }
  keys(snapshot: string): Promise<string[]> {
    return this.storage.keys(snapshot);
  }
  delete(snapshot: string): Promise<void> {
    return this.storage.delete(snapshot);
  }
  cleanPartial(): Promise<string[]> {
    return this.storage.cleanPartial();
  }
  close(): Promise<void> {
    return this.storage.close();
  }

  /** The manifest's bytes, at most MANIFEST_MAX_BYTES of them: not yet trusted (readRemoteManifest checks them). */
  manifestBytes(snapshot: string, signal?: AbortSignal): Promise<AsyncIterable<Uint8Array>> {
    return this.storage.get(snapshot, MANIFEST_KEY, signal, MANIFEST_MAX_BYTES);
  }

  /** One object the (checked) manifest records, bounded by its recorded size and checked against its sha256. */
  async object(snapshot: string, o: RemoteObject, signal?: AbortSignal): Promise<AsyncIterable<Buffer>> {
    const what = `${this.name}:${snapshot}/${o.key}`;
    return checkedObject(await this.storage.get(snapshot, o.key, signal, o.bytes), o, what);
  }

  /** Any object by key: the manifest's bytes (unchecked), or an object its checked manifest records (erase's holds). */
  async get(snapshot: string, key: string, signal?: AbortSignal): Promise<AsyncIterable<Uint8Array>> {
    if (key === MANIFEST_KEY) return this.manifestBytes(snapshot, signal);
    const m = await readRemoteManifest(this, snapshot);
    const o = [...Object.values(m.remote.objects), m.remote.holds].find((x) => x.key === key);
    if (!o) throw storeError(`${this.name}:${snapshot}/${key}: not an object its manifest records`);
    return this.object(snapshot, o, signal);
  }
}
