// The target as features use it (list, verify, restore, erase, push): storage plus the key and the store it serves,
// so every manifest read is MAC-checked and every object read is bounded by and checked against its record.
import { storeError } from '../../core/errors.js';
import type { TargetConfig } from './config.js';
import { checkedObject } from './digest.js';
import { readRemoteManifest, type RemoteObject } from './remote-manifest.js';
import { CLAIM_KEY, MANIFEST_KEY, MANIFEST_MAX_BYTES, UnverifiedSnapshotError, type ObjectDigest, type SnapshotTarget } from './types.js';
import { claimBody, claimProblem } from './claim.js';

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
  names(): Promise<string[]> {
    return this.storage.names();
  }
  keys(snapshot: string): Promise<string[]> {
    return this.storage.keys(snapshot);
  }
  leftovers(): Promise<string[]> {
    return this.storage.leftovers();
  }
  close(): Promise<void> {
    return this.storage.close();
  }

  /** The claim an upload writes first (claim.ts). */
  claim(snapshot: string, signal?: AbortSignal): Promise<ObjectDigest> {
    const body = claimBody(this.key, this.store, snapshot);
    return this.storage.put(snapshot, CLAIM_KEY, (async function* () { yield body; })(), signal);
  }

  /**
   * Why the folder cannot be proven memory-warden's, or undefined when its claim, or else its manifest, verifies
   * (with the target's key, for this store and snapshot name). memory-warden deletes only what it can prove it made.
   */
  async unproven(snapshot: string): Promise<string | undefined> {
    const claim = await claimProblem(this.storage, this.key, this.store, snapshot);
    if (!claim) return undefined;
    const manifest = await readRemoteManifest(this, snapshot).then(() => undefined, (err: Error) => err.message);
    return manifest && `${claim}, and its manifest does not prove it (${manifest})`;
  }

  /**
   * Delete a snapshot folder proven memory-warden's (UnverifiedSnapshotError if it is not): one proven by its manifest
   * alone is claimed first, so however the delete is cut short (the manifest goes first), what is left stays proven.
   */
  async delete(snapshot: string): Promise<void> {
    if (!(await this.storage.names()).includes(snapshot)) return this.storage.delete(snapshot); // nothing there (or a link: refused there)
    const claim = await claimProblem(this.storage, this.key, this.store, snapshot);
    if (claim) {
      const manifest = await readRemoteManifest(this, snapshot).then(() => undefined, (err: Error) => err.message);
      if (manifest) throw new UnverifiedSnapshotError(`${this.name}:${snapshot}: not deleted: memory-warden cannot prove it made it (${claim}; ${manifest})`);
      await this.claim(snapshot);
    }
    await this.storage.delete(snapshot);
  }

  /**
   * Remove what killed runs left: what the storage itself left (temp files, unfinished multipart uploads), then
   * folders without a manifest that their claim proves memory-warden's (an upload or a delete cut short). A folder
   * without a manifest that nothing proves memory-warden's is left, and said so: a person decides about it.
   */
  async cleanPartial(): Promise<string[]> {
    const out = await this.storage.cleanPartial();
    const complete = new Set(await this.storage.list());
    for (const n of (await this.storage.names()).filter((x) => !complete.has(x))) {
      const why = await claimProblem(this.storage, this.key, this.store, n);
      if (why) {
        out.push(`${this.name}:${n}/ (not removed: no manifest, and ${why}: memory-warden cannot prove it made it; a person decides)`);
        continue;
      }
      await this.storage.delete(n);
      out.push(`${this.name}:${n}/`);
    }
    return out;
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
