import { mkdirSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { streamToNewFile } from '../../core/write-file.js';
import { expandHome, type Config } from '../../config/config.js';
import type { Logger } from '../../log/logger.js';
import { coerceError, storeError, transientError, usageError, WardenError } from '../../core/errors.js';
import { eraseKey, eraseKeyId as keyId } from '../../erase/key.js';
import { erasedSnapshots } from '../../erase/needles.js';
import { DIR_MODE, FILE_MODE, lockSnapshots, storeSnapshotDir } from '../layout.js';
import { olderFirst, snapshotFolders } from '../folders.js';
import { HOLDS_FORMAT, readManifest } from '../manifest.js';
import { localLeftovers, removeLocalCopy } from '../copies.js';
import { ENCRYPTED_SUFFIX, decrypting, encrypting, loadIdentities } from './age.js';
import type { TargetConfig } from './config.js';
import { atMost, digestOf, fileBody, hashedFile, hashing } from './digest.js';
import { loadTargetKey, sealManifest } from './auth.js';
import { CheckedTarget } from './checked.js';
import { HOLDS_KEY, snapshotHolds } from './holds.js';
import { notePushed } from './pushed.js';
import { openTarget } from './registry.js';
import { readRemoteManifest, type RemoteManifest, type RemoteObject, type RemoteRecord } from './remote-manifest.js';
import { MANIFEST_KEY, UnverifiedSnapshotError } from './types.js';

/**
 * Snapshots off the machine: each complete local snapshot folder is copied to each configured target with the
 * same guarantees as the folder itself. Files first (each sha256-checked by the target as it is stored, optionally
 * age-encrypted), then `holds.json.gz`, then `manifest.json` (the local manifest plus a record of where each
 * file went): a target lists a snapshot only once its manifest is there.
 */

export interface TargetRun {
  target: string;
  where: string;
  uploaded: string[];
  pruned: string[];
  /** Leftovers of interrupted uploads removed first. */
  cleaned: string[];
}

/**
 * Download folders killed restores left (copies.ts: `fetch`), plaintext copies of a snapshot: removed, unless a
 * pending restore resumes from one or its restore still runs.
 */
function removeStaleFetches(config: Config, store: string, log: Logger): void {
  for (const c of localLeftovers(config, store, ['fetch'])) {
    if (c.inUse) continue;
    removeLocalCopy(c);
    log.warn({ store, folder: c.path }, 'removed a download folder an interrupted restore --target left');
  }
}

/** The erase key's id: which key made a snapshot's holds (never the key); the id the state db records too. */
export { keyId };

export function targetsFor(config: Config, store: string, only?: string): TargetConfig[] {
  const all = config.snapshot.targets.filter((t) => !t.stores || t.stores.includes(store));
  if (only === undefined) return all;
  const t = all.find((x) => x.name === only);
  if (!t) throw usageError(`no snapshot target "${only}" for store ${store} (targets: ${all.map((x) => x.name).join(', ') || 'none'})`);
  return [t];
}

/**
 * Run `f` with a connected target, closed afterwards whatever happens. Its key is loaded first (a config error if
 * the key file is unreadable); a target without one is said to be unauthenticated, once per call, on `log`.
 */
export async function withTarget<T>(tcfg: TargetConfig, store: string, f: (t: CheckedTarget) => Promise<T>, log?: Logger): Promise<T> {
  const key = loadTargetKey(tcfg);
  if (!key) log?.warn({ store, target: tcfg.name }, 'target has no authKeyFile: whoever can write it can forge a snapshot that verifies (memory-warden snapshots keygen FILE)');
  const target = new CheckedTarget(await openTarget(tcfg, store), tcfg, store, key);
  try {
    return await f(target);
  } finally {
    await target.close();
  }
}

/** Reads of a snapshot's files for an upload: a few large chunks rather than many small ones. */
const READ_CHUNK = 1024 * 1024;

/** Upload one local snapshot folder; on failure nothing of it is left looking complete, and what was sent is removed. */
export async function uploadSnapshot(target: CheckedTarget, tcfg: TargetConfig, dir: string, key: Buffer, opts: { now: () => number; signal?: AbortSignal }): Promise<void> {
  const manifest = readManifest(dir);
  const name = basename(dir);
  const recipients = tcfg.encrypt?.recipients;
  const objects: Record<string, RemoteObject> = {};
  try {
    await target.claim(name, opts.signal); // first: whatever a kill leaves of this upload is proven memory-warden's
    for (const [rel, want] of Object.entries(manifest.files)) {
      // Plain, the target's digest of what it stored is that of the file's bytes: each byte is hashed once, on the
      // way or read back from the copy (a local target copies the file in the kernel). Encrypted, the plaintext has
      // a hash of its own, made on the hashing thread beside the cipher from the buffers the file is read into (as
      // is the target's of the ciphertext where that thread runs).
      const plain = recipients ? hashedFile(join(dir, rel), READ_CHUNK) : undefined;
      const objectKey = recipients ? rel + ENCRYPTED_SUFFIX : rel;
      const stored = await target.put(name, objectKey, plain && recipients ? encrypting(plain.stream, recipients) : fileBody(join(dir, rel), READ_CHUNK), opts.signal);
      const sent = plain ? plain.digest() : stored;
      if (sent.sha256 !== want.sha256 || sent.bytes !== want.bytes) throw storeError(`${dir}: ${rel} no longer matches its manifest (sha256 ${sent.sha256}); not uploaded`);
      objects[rel] = { key: objectKey, ...stored, ...(recipients ? { encrypted: { recipients: [...recipients] } } : {}) };
    }
    // The holds made when the snapshot was taken (checked against its manifest as they are read), else made now.
    const holdsStored = await target.put(name, HOLDS_KEY, snapshotHolds(dir, manifest, key), opts.signal);
    const remote: RemoteRecord = {
      format: 'memory-warden-remote/1', target: tcfg.name, uploadedAt: new Date(opts.now()).toISOString(), objects,
      holds: { key: HOLDS_KEY, ...holdsStored, keyId: keyId(key), format: HOLDS_FORMAT },
    };
    // The local record of the holds stays here: the remote one says where they went, and a download has no holds file.
    const { holds: _local, ...shared } = manifest;
    const sealed = target.key ? { ...remote, auth: sealManifest(target.key, target.store, name, { ...shared, remote }) } : remote;
    const text = Buffer.from(JSON.stringify({ ...shared, remote: sealed }, null, 2) + '\n');
    await target.put(name, MANIFEST_KEY, (async function* () { yield text; })(), opts.signal);
  } catch (err) {
    await target.delete(name).catch(() => undefined); // best effort; cleanPartial finishes it next run
    throw coerceError(err, `upload ${name} to target ${tcfg.name} (${target.where})`);
  }
}

/** Of these snapshot names, those whose manifest verifies with the target's key (all of them on a target without one). */
async function provenSnapshots(target: CheckedTarget, names: string[]): Promise<string[]> {
  if (!target.key) return names;
  const out: string[] = [];
  for (const n of names) if (await readRemoteManifest(target, n).then(() => true, () => false)) out.push(n);
  return out;
}

/**
 * Delete the oldest complete scheduled snapshots beyond `keep`, oldest by the sequence number in their manifests
 * (a clock step cannot reorder it; src/snapshot/folders.ts), never one in `justUploaded`. Pre-restore ones are a
 * person's to delete; so is any whose manifest cannot be read or, on a target with a key, does not verify: only
 * what memory-warden can prove it made counts and is deleted (an unauthenticated one cannot push an authentic one out).
 */
export async function applyTargetRetention(target: CheckedTarget, keep: number, justUploaded: string[] = []): Promise<string[]> {
  const scheduled = [];
  for (const name of (await target.list()).filter((n) => !n.endsWith('-pre-restore'))) {
    const manifest = await readRemoteManifest(target, name).catch(() => undefined);
    if (manifest) scheduled.push({ name, manifest });
  }
  const others = scheduled.sort(olderFirst).filter((s) => !justUploaded.includes(s.name));
  const doomed = others.slice(0, Math.max(0, others.length - Math.max(0, keep - justUploaded.length))).map((s) => s.name);
  for (const n of doomed) await target.delete(n);
  return doomed;
}

/**
 * Bring every target of a store up to date: clean what interrupted uploads left, upload the newest `keep` local
 * scheduled snapshots it lacks, then retention. Every target is tried; if one failed, the whole run fails
 * afterwards (transient if any failure was), and the next run retries what is missing.
 */
export async function replicateStore(config: Config, store: string, opts: { log: Logger; now: () => number; signal?: AbortSignal; only?: string }): Promise<TargetRun[]> {
  const targets = targetsFor(config, store, opts.only);
  if (targets.length === 0) return [];
  const root = storeSnapshotDir(config, store);
  const lock = lockSnapshots(root, 'replicate'); // local retention and restore stay out meanwhile
  const runs: TargetRun[] = [];
  const failures: WardenError[] = [];
  try {
    removeStaleFetches(config, store, opts.log);
    // A snapshot an erase removed is never uploaded again, whatever brought its folder back (src/erase/needles.ts).
    const erased = erasedSnapshots(expandHome(config.stateDb), store);
    const all = snapshotFolders(config, store).filter((s) => !s.problem);
    for (const s of all.filter((x) => erased.has(x.name))) opts.log.warn({ store, snapshot: s.name }, 'not uploaded: an erase removed this snapshot');
    const local = all.filter((s) => s.manifest!.reason === 'scheduled' && !erased.has(s.name));
    const key = eraseKey(config);
    for (const tcfg of targets) {
      try {
        runs.push(await withTarget(tcfg, store, async (target) => {
          const cleaned = await target.cleanPartial();
          if (cleaned.length > 0) opts.log.warn({ store, target: tcfg.name, cleaned }, 'removed what an interrupted upload left on the target');
          // A snapshot put there under one of our names, that does not verify, is not ours: ours is uploaded over it.
          const have = new Set(await provenSnapshots(target, await target.list()));
          const uploaded: string[] = [];
          for (const s of local.slice(-tcfg.keep).filter((x) => !have.has(x.name))) {
            opts.signal?.throwIfAborted();
            await uploadSnapshot(target, tcfg, s.dir, key, opts);
            uploaded.push(s.name);
            opts.log.info({ store, target: tcfg.name, snapshot: s.name, encrypted: Boolean(tcfg.encrypt) }, 'snapshot uploaded');
          }
          notePushed(root, tcfg.name, uploaded.map((n) => ({ name: n, seq: local.find((x) => x.name === n)?.manifest?.seq ?? null })));
          const pruned = await applyTargetRetention(target, tcfg.keep, uploaded);
          return { target: tcfg.name, where: target.where, uploaded, pruned, cleaned };
        }, opts.log));
      } catch (err) {
        const e = coerceError(err, `target ${tcfg.name}`);
        opts.log.error({ store, target: tcfg.name, err: e.message, transient: e.transient }, 'snapshot upload failed');
        failures.push(e);
      }
    }
  } finally {
    lock.release();
  }
  if (failures.length > 0) {
    const msg = `replicate ${store}: ${failures.map((f) => f.message).join('; ')}`;
    throw failures.some((f) => f.transient) ? transientError(msg, failures[0]) : storeError(msg, failures[0]);
  }
  return runs;
}

/** Re-read every object of a remote snapshot and check its size and sha256 against the manifest: no identity needed. */
export async function verifyRemote(target: CheckedTarget, name: string): Promise<RemoteManifest> {
  const m = await readRemoteManifest(target, name);
  for (const o of [...Object.values(m.remote.objects), m.remote.holds]) await digestOf(await target.object(name, o));
  return m;
}

/**
 * Download a remote snapshot into `dest` (created 0700, must not exist) as a local snapshot folder: each object's
 * stored bytes read no further than its recorded size and checked against the remote record, decrypted if
 * encrypted, the plaintext checked against the manifest. What restore then gets is indistinguishable from a
 * snapshot taken here; restore itself decides from the config where each file goes.
 */
export async function fetchSnapshot(target: CheckedTarget, tcfg: TargetConfig, name: string, dest: string, env: NodeJS.ProcessEnv = process.env): Promise<RemoteManifest> {
  const m = await readRemoteManifest(target, name);
  const encrypted = Object.values(m.remote.objects).some((o) => o.encrypted);
  const identities = encrypted ? loadIdentities(tcfg.name, tcfg.encrypt?.identityFile, env) : [];
  mkdirSync(dest, { mode: DIR_MODE });
  for (const [rel, o] of Object.entries(m.remote.objects)) {
    const what = `${target.name}:${name}/${o.key}`;
    const want = m.files[rel]!;
    const stored = await target.object(name, o);
    const plain = hashing(atMost(o.encrypted ? decrypting(stored, identities, what) : stored, want.bytes, `${what}: decrypted ${rel}`));
    mkdirSync(dirname(join(dest, rel)), { recursive: true, mode: DIR_MODE });
    await streamToNewFile(join(dest, rel), { mode: FILE_MODE }, plain.stream);
    const p = plain.digest();
    if (p.sha256 !== want.sha256 || p.bytes !== want.bytes) throw new UnverifiedSnapshotError(`${what}: decrypted ${rel} does not match its checksum (sha256 ${p.sha256}; manifest ${want.sha256})`);
  }
  const { remote: _remote, ...local } = m;
  await streamToNewFile(join(dest, MANIFEST_KEY), { mode: FILE_MODE }, (async function* () { yield JSON.stringify(local, null, 2) + '\n'; })());
  return m;
}
