import { createReadStream, lstatSync, readdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { Config } from '../config/config.js';
import type { Logger } from '../log/logger.js';
import { collectionSnapshotsFor } from '../vectors/registry.js';
import { lockSnapshots, storeSnapshotDir } from '../snapshot/layout.js';
import { proveSnapshot, snapshotFolders } from '../snapshot/folders.js';
import { retire } from '../snapshot/retention.js';
import { deleteServerSnapshot, serverSnapshots } from '../snapshot/server-snapshots.js';
import { bytesFinder } from '../text/needles.js';
import { recordErasedSnapshots } from './needles.js';
import { sqliteHolds, type HoldsSearch } from './snapshot-holds.js';
import { readManifest, type Manifest } from '../snapshot/manifest.js';
import type { Strings } from '../text/string-list.js';

export interface SnapshotCopies {
  /** Snapshot folders holding the text, and `qdrant:<collection>/<snapshot>` for server-side snapshots. */
  found: string[];
  deleted: string[];
  /** Those of `found` that may not hold it: they could not be searched (a copy that cannot be read). */
  unverified: string[];
  /**
   * The files (name → sha256, bytes) of each snapshot folder found to hold it, by snapshot name, read before any
   * was deleted: a target's copy with the same files holds the same bytes (erase-targets.ts).
   */
  holding: Map<string, Manifest['files']>;
}

/**
 * Every copy of the store that may still hold erased text: snapshot folders that contain it (searched), and every
 * server-side Qdrant snapshot of the store's collections (taken before the erase, they hold its points; they cannot
 * be searched without downloading them). `remove` deletes them all. Copies killed runs left are leftovers.ts's.
 */
export async function snapshotCopies(
  config: Config, storeName: string, texts: Strings, subject: string | undefined,
  opts: { remove: boolean; log: Logger; holds?: HoldsSearch; stateDb?: string; now?: () => number },
): Promise<SnapshotCopies> {
  const storeConfig = config.stores[storeName]!;
  const root = storeSnapshotDir(config, storeName);
  const unverified: string[] = [];
  const listed = snapshotFolders(config, storeName);
  const found = await snapshotsContaining(listed.map((f) => f.dir), texts, subject, opts.holds && { search: opts.holds, log: opts.log, unverified });
  // A folder named like a snapshot that memory-warden cannot prove it made (copies.ts: unproven-folder) is not asked
  // by the ids and user its holds would name: what it holds cannot be ruled out while it holds any file.
  for (const f of listed.filter((x) => x.problem && !found.includes(x.dir) && holdsAFile(x.dir))) {
    found.push(f.dir);
    unverified.push(f.dir);
    opts.log.warn({ store: storeName, dir: f.dir, problem: f.problem }, 'a folder named like a snapshot is not one memory-warden can prove it made: what it holds cannot be ruled out; a person decides about it');
  }
  const deleted: string[] = [];
  const q = collectionSnapshotsFor(storeConfig);
  // Server-side snapshots cannot be searched: listed whenever there is something erased to hold, now or earlier.
  const erasedAny = texts.length > 0 || subject !== undefined || (opts.holds !== undefined && opts.holds.ids.length + opts.holds.earlier.length > 0);
  const server = q && erasedAny ? await serverSnapshots(root, q, (await import('../snapshot/create.js')).snapshotCollections(storeConfig)) : [];
  const label = (s: { collection: string; name: string }) => `qdrant:${s.collection}/${s.name}`;
  found.push(...server.map(label));
  const holding = new Map<string, Manifest['files']>();
  for (const dir of found.filter((f) => !f.startsWith('qdrant:') && !unverified.includes(f))) {
    try {
      holding.set(basename(dir), readManifest(dir).files);
    } catch {
      // not a complete snapshot: no target holds a copy of it
    }
  }
  if (!opts.remove || found.length === 0) return { found, deleted, unverified, holding };
  const lock = lockSnapshots(root, 'erase'); // retention and restore stay out meanwhile
  try {
    const folders = found.filter((f) => !f.startsWith('qdrant:'));
    // Recorded first: a copy of the folder that comes back (a crash before the rm, a copy of the root) is never uploaded.
    if (opts.stateDb) recordErasedSnapshots(opts.stateDb, storeName, folders.map((d) => basename(d)), opts.now?.() ?? Date.now());
    for (const dir of folders) {
      // Deleted only when proven a snapshot of this store; otherwise it stays found, not deleted (exit 1).
      const problem = await proveSnapshot({ dir }, storeName);
      if (problem) {
        opts.log.warn({ store: storeName, dir, problem }, 'a folder named like a snapshot holds erased text but is not a verified snapshot of this store: not deleted');
        continue;
      }
      retire(root, basename(dir));
      deleted.push(dir);
    }
    for (const s of server) {
      await deleteServerSnapshot(root, q!, s);
      deleted.push(label(s));
    }
  } finally {
    lock.release();
  }
  return { found, deleted, unverified, holding };
}

/**
 * Erase's look into snapshots: which snapshot folders of a store still hold erased text. A plain byte search, so
 * it finds the text in SQLite copies (free pages included) and in payload JSON; a snapshot that compresses its
 * payloads is beyond it (README, Erase). A folder the texts are not in is then asked for the erased ids and user
 * as its holds would name them (`holds`, erase-snapshot-holds.ts), as a target's copy of it is.
 *
 * Of `folders` (the store's folders named like a snapshot, src/snapshot/folders.ts), those with a file that holds
 * one of the texts (UTF-8, or JSON-escaped as a payload writes it). The first 64 bytes of a text are looked for, so
 * a long text split across SQLite overflow pages is still found. Symlinks are not followed.
 */
export async function snapshotsContaining(
  folders: string[], texts: Strings, subject?: string, holds?: { search: HoldsSearch; log: Logger; unverified: string[] },
): Promise<string[]> {
  const out: string[] = [];
  for (const dir of folders) {
    if (!lstatSync(dir, { throwIfNoEntry: false })?.isDirectory()) continue;
    if (await folderHoldsText(dir, texts, subject)) out.push(dir);
    else if (holds) {
      const answer = await sqliteHolds(dir, holds.search, holds.log);
      if (answer) out.push(dir);
      if (answer === 'unsure') holds.unverified.push(dir);
    }
  }
  return out;
}

async function folderHoldsText(dir: string, texts: Strings, subject: string | undefined): Promise<boolean> {
  for (const file of filesUnder(dir)) {
    // Indexed at the first file that needs it: with no snapshot, 10,000 texts are never indexed.
    const search = searchFor(texts, subject);
    if (!search) return false;
    if (await fileContains(file, search)) return true;
  }
  return false;
}

/** Whether one file holds one of the texts (or the subject, any ASCII case), by the same byte search. */
export async function fileHolds(file: string, texts: Strings, subject?: string): Promise<boolean> {
  const search = searchFor(texts, subject);
  return search !== null && fileContains(file, search);
}

/** The search for these texts, made once per list of texts and subject: 10,000 texts take a while to index. */
const searches = new WeakMap<Strings, Map<string | undefined, Search | null>>();

/** One pass over a file finds every text (src/text/needles.ts); null when there is nothing to look for. */
function searchFor(texts: Strings, subject?: string): Search | null {
  const known = searches.get(texts)?.get(subject);
  if (known !== undefined) return known;
  const needles = needleBytes(texts);
  const folded = subject === undefined ? [] : needleBytes([subject]).map(foldBytes);
  const search = needles.length === 0 && folded.length === 0 ? null
    : { exact: bytesFinder(needles), folded: folded.length > 0 ? bytesFinder(folded) : null, overlap: [...needles, ...folded].reduce((m, n) => Math.max(m, n.length), 0) - 1 };
  const bySubject = searches.get(texts) ?? new Map<string | undefined, Search | null>();
  bySubject.set(subject, search);
  searches.set(texts, bySubject);
  return search;
}

function needleBytes(texts: Iterable<string>): Buffer[] {
  const out = new Map<string, Buffer>();
  for (const t of new Set(texts)) {
    for (const form of [t, JSON.stringify(t).slice(1, -1)]) {
      const b = Buffer.from(form, 'utf8').subarray(0, 64);
      if (b.length >= 4) out.set(b.toString('hex'), b);
    }
  }
  return [...out.values()];
}

/** ASCII lower case of raw bytes (UTF-8 multi-byte sequences never contain bytes below 0x80). */
function foldBytes(b: Buffer): Buffer {
  const out = Buffer.from(b);
  for (let i = 0; i < out.length; i++) if (out[i]! >= 0x41 && out[i]! <= 0x5a) out[i] = out[i]! + 0x20;
  return out;
}

function* filesUnder(dir: string): Generator<string> {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) yield* filesUnder(p);
    else if (e.isFile()) yield p;
  }
}

/** The needles, searched all at once (src/text/needles.ts), and how many bytes a match can span across two chunks. */
interface Search {
  exact: (hay: Buffer) => boolean;
  folded: ((hay: Buffer) => boolean) | null;
  overlap: number;
}

/** Streamed in 1 MiB chunks, each searched with the tail of the previous one so no match is split. */
async function fileContains(file: string, { exact, folded, overlap }: Search): Promise<boolean> {
  let tail = Buffer.alloc(0);
  for await (const chunk of createReadStream(file, { highWaterMark: 1 << 20 })) {
    const buf = Buffer.concat([tail, chunk as Buffer]);
    if (exact(buf)) return true;
    if (folded && folded(foldBytes(buf))) return true;
    tail = buf.subarray(Math.max(0, buf.length - overlap));
  }
  return false;
}

/** A real folder (not a link) with at least one regular file somewhere in it. */
function holdsAFile(dir: string): boolean {
  if (!lstatSync(dir, { throwIfNoEntry: false })?.isDirectory()) return false;
  return !filesUnder(dir).next().done;
}
