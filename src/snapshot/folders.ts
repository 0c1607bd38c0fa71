/**
 * Which folders under `<snapshot.root>/<store>/` are snapshots of that store, proven by their manifest: the one
 * answer erase, retention, replication and `snapshots list` use before reading, uploading or deleting a folder.
 */
import { lstatSync, readdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { Config } from '../config/config.js';
import { sha256File, SNAPSHOT_NAME, storeSnapshotDir } from './layout.js';
import { MANIFEST, readManifest, storePart, type Manifest } from './manifest.js';

export interface SnapshotFolder {
  name: string;
  dir: string;
  /** The manifest, when it is readable and names this store. */
  manifest?: Manifest;
  /** Why the folder is not a verified snapshot of this store; absent when it is one. */
  problem?: string;
}

/**
 * Folders named like a snapshot under the store's snapshot folder, each with its verdict (sizes checked, not yet
 * sha256: `proveSnapshot` does that), oldest first by the manifest's sequence number, which a clock step cannot
 * reorder (folders from before the manifest had one come first, by name). Anything else there is not listed.
 */
export function snapshotFolders(config: Config, store: string): SnapshotFolder[] {
  const root = storeSnapshotDir(config, store);
  let names: string[];
  try {
    names = readdirSync(root);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const folders = names.filter((n) => SNAPSHOT_NAME.test(n)).map((name) => judge(join(root, name), store));
  return folders.sort(olderFirst);
}

/** Why `folder` is not a snapshot of `store`, by its shape and the sha256 of each of its files, or undefined: the proof asked before a delete. */
export async function proveSnapshot(folder: { dir: string }, store: string): Promise<string | undefined> {
  const judged = judge(folder.dir, store);
  if (judged.problem) return judged.problem;
  const m = judged.manifest!;
  for (const [rel, want] of Object.entries({ ...m.files, ...(m.holds ? { [m.holds.file]: m.holds } : {}) })) {
    try {
      const got = await sha256File(join(folder.dir, rel));
      if (got.sha256 !== want.sha256 || got.bytes !== want.bytes) return `${rel} does not match its checksum in the manifest`;
    } catch (err) {
      return `${rel}: ${(err as Error).message}`;
    }
  }
  return undefined;
}

/** Oldest first: by sequence number (none: before all that have one), then by name. */
export function olderFirst(a: { name: string; manifest?: Manifest }, b: { name: string; manifest?: Manifest }): number {
  const sa = a.manifest?.seq ?? -1;
  const sb = b.manifest?.seq ?? -1;
  return sa !== sb ? sa - sb : a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

/**
 * The cheap verdict: a real folder (not a link) named like a snapshot, holding a manifest of this store whose name
 * and reason fit the folder, and exactly the files the manifest lists, each of its size. A folder with anything
 * more (a live store's folder given a manifest) or less (one half deleted) is not a snapshot.
 */
function judge(dir: string, store: string): SnapshotFolder {
  const name = basename(dir);
  const no = (problem: string, manifest?: Manifest): SnapshotFolder => ({ name, dir, problem, ...(manifest ? { manifest } : {}) });
  if (!SNAPSHOT_NAME.test(name)) return no('not named like a snapshot');
  const st = lstatSync(dir, { throwIfNoEntry: false });
  if (!st?.isDirectory()) return no(st ? 'not a folder (a link or a file)' : 'gone');
  let manifest: Manifest;
  try {
    manifest = readManifest(dir);
  } catch (err) {
    return no((err as Error).message);
  }
  if (manifest.store !== store) return no(`its manifest is of store ${JSON.stringify(manifest.store)}, not "${store}"`);
  if (manifest.name !== undefined && manifest.name !== name) return no(`its manifest names snapshot ${JSON.stringify(manifest.name)}`);
  if ((manifest.reason === 'pre-restore') !== name.endsWith('-pre-restore')) return no(`its manifest says reason ${JSON.stringify(manifest.reason)}`);
  if (manifest.seq !== undefined && !(Number.isSafeInteger(manifest.seq) && manifest.seq >= 0)) return no('its manifest has no valid sequence number', manifest);
  const parts = partsProblem(manifest);
  if (parts) return no(parts, manifest);
  let found: Map<string, number> | string;
  try {
    found = filesIn(dir);
  } catch (err) {
    found = `cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`; // a verdict, not a failed listing
  }
  if (typeof found === 'string') return no(found, manifest);
  const files: Record<string, { bytes: number }> = { ...manifest.files, ...(manifest.holds ? { [manifest.holds.file]: manifest.holds } : {}) };
  const listed = new Set(Object.keys(files));
  const extra = [...found.keys()].filter((f) => !listed.has(f));
  if (extra.length > 0) return no(`holds ${JSON.stringify(extra[0])}, which its manifest does not list`, manifest);
  for (const [rel, want] of Object.entries(files)) {
    const size = found.get(rel);
    if (size === undefined) return no(`${rel} is missing`, manifest);
    if (size !== want.bytes) return no(`${rel} is ${size} bytes, its manifest says ${want.bytes}`, manifest);
  }
  return { name, dir, manifest };
}

/** Why a manifest does not account for its own parts (a part with no checksum, a Qdrant checksum that differs), or undefined. */
export function partsProblem(manifest: Manifest): string | undefined {
  const store = storePart(manifest).files;
  if (store.length === 0) return 'manifest lists no file of the store\'s copy';
  const parts = [...store, ...manifest.qdrant.map((p) => p.file), ...(manifest.vectorFiles ?? []).map((p) => p.file)];
  for (const f of parts) if (!manifest.files[f]) return `manifest lists no checksum for ${f}`;
  if (manifest.vectorTables && !manifest.files[`${manifest.vectorTables.dir}/manifest.json`]) return `manifest lists no checksum for ${manifest.vectorTables.dir}/manifest.json`;
  for (const p of manifest.qdrant) if (manifest.files[p.file]!.sha256 !== p.qdrantChecksum) return `${p.file} sha256 differs from Qdrant's checksum in the manifest`;
  return undefined;
}

/** Every regular file under `dir` but the manifest, by relative path, with its size; a link or device is a problem. */
function filesIn(dir: string, rel = '', out = new Map<string, number>()): Map<string, number> | string {
  for (const e of readdirSync(join(dir, rel), { withFileTypes: true })) {
    const path = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) {
      const inner = filesIn(dir, path, out);
      if (typeof inner === 'string') return inner;
    } else if (e.isFile()) {
      if (path !== MANIFEST) out.set(path, lstatSync(join(dir, path)).size);
    } else {
      return `holds ${JSON.stringify(path)}, which is not a regular file`;
    }
  }
  return out;
}
