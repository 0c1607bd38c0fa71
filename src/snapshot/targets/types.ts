import { homedir } from 'node:os';
import { usageError, WardenError } from '../../core/errors.js';

/**
 * The snapshot target contract: a place off the machine (or on another disk) that holds copies of snapshot folders.
 * Features call this; implementations (one folder each: local/, s3/, sftp/) never import features.
 *
 * Layout on every target: `<base>/<store>/<snapshot name>/<key>`, where key is a file of the snapshot folder
 * (`store.db`, `qdrant/0-memories.snapshot`, …). `claim.json` is written first and deleted last: what proves that
 * memory-warden made a folder while it has no manifest (an upload or a delete cut short). `manifest.json` is written
 * last and deleted first: a snapshot whose manifest is absent is not a snapshot, and `list` does not show it.
 */

/** What a stored object holds: its size and the sha256 of its bytes (hex). */
export interface ObjectDigest {
  bytes: number;
  sha256: string;
}

/**
 * A body that is a whole local file's bytes, streamed when iterated. An implementation may store `file` by other
 * means (local: a copy made in the kernel) as long as what it returns is the size and sha256 of what it then holds,
 * read back from it.
 */
export interface FileBody extends AsyncIterable<Uint8Array> {
  readonly file: string;
}

export const isFileBody = (body: AsyncIterable<Uint8Array>): body is FileBody => typeof (body as Partial<FileBody>).file === 'string';

export const MANIFEST_KEY = 'manifest.json';
/** Written first by an upload, deleted last by a delete: memory-warden's claim on the folder (claim.ts). */
export const CLAIM_KEY = 'claim.json';
/** A manifest larger than this is not one of ours: it is read no further. */
export const MANIFEST_MAX_BYTES = 16 * 1024 * 1024;

export interface SnapshotTarget {
  /** The target's name in config. */
  readonly name: string;
  readonly type: string;
  /** Where it is, for messages and logs: never a credential. */
  readonly where: string;
  /**
   * Store one object of a snapshot. Resolves only once the target holds exactly the bytes that were read from
   * `body`, checked by sha256 (and by the storage's own checksum where it has one); else rejects, leaving no
   * object under `key` that a reader could take for this one. Writing `manifest.json` is what publishes a snapshot.
   * A `FileBody` may be stored from its file rather than read as a stream (the digest is then of what was stored).
   */
  put(snapshot: string, key: string, body: AsyncIterable<Uint8Array>, signal?: AbortSignal): Promise<ObjectDigest>;
  /** Complete snapshots (manifest present), oldest first by name. */
  list(): Promise<string[]>;
  /**
   * Every snapshot name under which the target holds anything (an object, a temp file), complete or not, sorted:
   * what erase and the cleanup of killed runs look at. A link named like a snapshot folder is not one.
   */
  names(): Promise<string[]>;
  /** The keys one snapshot holds (manifest included if present). */
  keys(snapshot: string): Promise<string[]>;
  /**
   * One object's bytes, streamed. Rejects with a store error if it is not there or is not a regular file (a link, a
   * FIFO, a device: refused before a byte is read). Reads at most `maxBytes + 1` bytes from the storage whatever it
   * holds or claims (an HTTP Range, a bounded read loop), and the stream fails with a store error once more than
   * `maxBytes` arrived: the caller passes the size its record gives the object, so nothing larger is ever written.
   */
  get(snapshot: string, key: string, signal: AbortSignal | undefined, maxBytes: number): Promise<AsyncIterable<Uint8Array>>;
  /**
   * Delete a snapshot: its manifest first (so it stops looking complete), then every other object (temp files too),
   * `claim.json` last (so a delete cut short keeps what proves the folder memory-warden's). The caller has proven it
   * memory-warden's (checked.ts).
   */
  delete(snapshot: string): Promise<void>;
  /**
   * Remove what interrupted puts left behind that is no object of a snapshot: temp files, unfinished multipart
   * uploads this machine started, spool files. Returns a description of each thing removed, or said not removable.
   * Snapshots without a manifest are the caller's to judge (checked.ts removes those proven memory-warden's through
   * `delete`). Only run while no upload to this store is under way (the caller holds the store's snapshot lock).
   */
  cleanPartial(): Promise<string[]>;
  /** What `cleanPartial` would remove now, described as it describes it, without removing anything. */
  leftovers(): Promise<string[]>;
  close(): Promise<void>;
}

/** How a target is made from its validated config, for one store. */
export type TargetFactory<C> = (config: C, store: string) => Promise<SnapshotTarget>;

/** Snapshot names the targets accept as folder names / key prefixes (the local naming, nothing else). */
export const TARGET_SNAPSHOT_NAME = /^\d{4}-\d{2}-\d{2}T\d{6}Z(-pre-restore)?$/;
/** Keys inside a snapshot: relative, no `..`, no empty segments, no backslashes. */
export const SAFE_KEY = /^(?!.*(^|\/)\.\.?(\/|$))[A-Za-z0-9_.-]+(\/[A-Za-z0-9_.-]+)*$/;

export function checkNames(target: string, snapshot: string, key?: string): void {
  if (!TARGET_SNAPSHOT_NAME.test(snapshot)) throw usageError(`target ${target}: "${snapshot}" is not a snapshot name`);
  if (key !== undefined && !SAFE_KEY.test(key)) throw usageError(`target ${target}: "${key}" is not a safe key inside a snapshot`);
}

/** `~/x` in a configured path is the home folder's x, as everywhere else in memory-warden's config. */
export function expandTilde(path: string): string {
  return path === '~' || path.startsWith('~/') ? (process.env.HOME ?? homedir()) + path.slice(1) : path;
}

/**
 * What a target holds is not what memory-warden wrote there, or cannot be shown to be: a manifest without a MAC (on a
 * target with a key), with a wrong one or another store's or snapshot's, an object that differs from its
 * authenticated record (size, sha256, an encrypting target's object stored in plaintext), or that is not a regular
 * file. A store error (exit 2, no retry helps); callers that must not trust such a snapshot (erase: "cannot rule
 * out") test for it with instanceof.
 */
export class UnverifiedSnapshotError extends WardenError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('store', message, options);
    this.name = 'UnverifiedSnapshotError';
  }
}
