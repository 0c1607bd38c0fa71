import { closeSync, constants, copyFileSync, existsSync, fchmodSync, fchownSync, fstatSync, openSync, readdirSync, readlinkSync, realpathSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type { Logger } from '../log/logger.js';
import type { Progress } from '../progress/progress.js';
import { storeError, usageError } from '../core/errors.js';
import type { StoreConfig } from '../store/config.js';
import { storeFiles } from '../store/files.js';
import { layoutFor } from '../layouts/registry.js';
import { collectionFile, snapshotCollections, vectorFileCopy } from './create.js';
import { openDatabase, setJournalMode, truncateWal } from '../store/sqlite.js';
import { FILE_MODE, fsyncPath, sha256File } from './layout.js';
import { integrityOf } from './sqlite-copy.js';
import { readManifest, type Manifest, type SqlitePart } from './manifest.js';
import { partsProblem } from './folders.js';
import type { RestoreJournal } from './journal.js';

/**
 * The file steps a restore is made of, shared by a restore (src/snapshot/restore.ts) and its resumption after a
 * crash (src/snapshot/resume.ts): verify a snapshot folder, find who has the store open, stage the SQLite copy
 * beside the store with the store file's mode and owner, and swap it in.
 */

export type FileOwner = NonNullable<RestoreJournal['file']>;

/** Staging copies beside a store file: a kind of copy of the registry (copies.ts), named there. */
export { stagingPrefix as STAGING, stagingPath } from './copies.js';

/** The store file's mode and owner, given back to the file that replaces it (null: there is no store file). */
export function fileOwner(dbPath: string): FileOwner | null {
  try {
    const st = statSync(dbPath);
    return { mode: st.mode & 0o7777, uid: st.uid, gid: st.gid };
  } catch {
    return null;
  }
}

/**
 * The agent may run as another user: the restored file keeps the mode and owner the store file had. Given through
 * a descriptor of the staged copy, opened without following a link: a link put at its path is refused, never
 * followed to give its target the store's mode and owner.
 */
export function keepOwner(path: string, file: FileOwner | null, log: Logger): void {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    throw storeError(`open staged copy ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, err);
  }
  try {
    if (!fstatSync(fd).isFile()) throw storeError(`staged copy ${path}: not a regular file`);
    fchmodSync(fd, file?.mode ?? FILE_MODE);
    if (!file) return;
    try {
      fchownSync(fd, file.uid, file.gid);
    } catch (err) {
      log.warn({ path, uid: file.uid, gid: file.gid, err: (err as Error).message }, 'could not give the restored store file its owner back (restore as root or as the owner)');
    }
  } finally {
    closeSync(fd);
  }
}

/** Check every file the manifest lists, streamed: size and sha256. Throws naming the first file that differs. */
export async function verifySnapshot(dir: string, progress?: Progress): Promise<Manifest> {
  const manifest = readManifest(dir);
  const parts = partsProblem(manifest);
  if (parts) throw storeError(`${dir}: ${parts}`);
  progress?.start('verify', Object.values(manifest.files).reduce((n, f) => n + f.bytes, 0), 'bytes');
  for (const [rel, want] of Object.entries(manifest.files)) {
    const path = join(dir, rel);
    if (!existsSync(path)) throw storeError(`${dir}: ${rel} is missing`);
    const got = await sha256File(path);
    if (got.sha256 !== want.sha256 || got.bytes !== want.bytes) {
      throw storeError(`${dir}: ${rel} does not match its checksum (sha256 ${got.sha256}, ${got.bytes} bytes; manifest ${want.sha256}, ${want.bytes} bytes)`);
    }
    progress?.tick(want.bytes);
  }
  progress?.done();
  return manifest;
}

/** True when an exclusive lock cannot be had right now. A file SQLite cannot open has no SQLite users. */
function lockedByOthers(dbPath: string): boolean {
  let probe: ReturnType<typeof openDatabase>;
  try {
    probe = openDatabase(dbPath, { busyTimeoutMs: 0 });
  } catch {
    return false;
  }
  try {
    probe.pragma('locking_mode = EXCLUSIVE');
    probe.exec('BEGIN EXCLUSIVE');
    probe.exec('COMMIT');
    return false;
  } catch {
    return true;
  } finally {
    probe.close();
  }
}

/**
 * Who else has the store open: an exclusive-lock probe (catches every SQLite connection to a WAL store, idle ones
 * included) and, on Linux, the processes with the file open. Empty when nobody does.
 */
export function storeUsers(dbPath: string): string[] {
  if (!existsSync(dbPath)) return [];
  const users: string[] = [];
  if (lockedByOthers(dbPath)) users.push('a SQLite connection holds it open');
  const target = realpathSync(dbPath);
  let pids: string[] = [];
  try {
    pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p) && Number(p) !== process.pid);
  } catch {
    return users; // no /proc: the lock probe is all there is
  }
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        if (readlinkSync(`/proc/${pid}/fd/${fd}`) === target) {
          users.push(`process ${pid}`);
          break;
        }
      } catch {
        // the descriptor closed meanwhile
      }
    }
  }
  return users;
}

/** Copy the snapshot's SQLite file beside the store, give it the source's journal mode, check it. */
export function stageSqlite(source: string, staged: string, manifest: Manifest, busyTimeoutMs: number, file: FileOwner | null, log: Logger, engine?: 'libsql'): void {
  rmSync(staged, { force: true });
  copyFileSync(source, staged, constants.COPYFILE_EXCL); // a new file: whatever is put at the path meanwhile is not written through
  keepOwner(staged, file, log);
  const db = openDatabase(staged, { busyTimeoutMs });
  try {
    const integrity = engine ? integrityOf(staged, engine) : (db.pragma('integrity_check') as { integrity_check: string }[]).map((r) => r.integrity_check).join('; ');
    if (integrity !== 'ok') throw storeError(`${source}: integrity_check of the staged copy says "${integrity.slice(0, 200)}"`);
    if (manifest.sqlite?.journalMode === 'wal') setJournalMode(db, 'wal');
  } finally {
    db.close();
  }
  fsyncPath(staged);
}

/**
 * Atomically swap the staged file in. The old store is checkpointed and closed first so no -wal file of the old
 * database is left next to the new one (SQLite would replay it into the restored file).
 */
export function replaceStoreFile(staged: string, dbPath: string, busyTimeoutMs: number): void {
  let db: ReturnType<typeof openDatabase> | undefined;
  try {
    db = existsSync(dbPath) ? openDatabase(dbPath, { busyTimeoutMs }) : undefined;
  } catch {
    db = undefined; // not a readable SQLite store any more: nothing to checkpoint
  }
  if (db) {
    try {
      truncateWal(db);
    } finally {
      db.close();
    }
  }
  for (const side of ['-wal', '-shm', '-journal']) rmSync(dbPath + side, { force: true });
  renameSync(staged, dbPath);
  fsyncPath(dirname(dbPath));
}

/**
 * The snapshot's collections are exactly the store's, each in the file a snapshot of it is written to: a file swapped
 * between two collections would restore one's points into the other. A usage error, before anything changes, names
 * what does not fit. Every restore checks it, whatever holds the store's rows.
 */
export function collectionDestinations(storeName: string, store: StoreConfig, manifest: Manifest, from: string): void {
  const swapped = manifest.qdrant.find((p, i) => p.file !== collectionFile(i, p.collection));
  if (swapped) throw usageError(`${from} records ${JSON.stringify(swapped.file)} as collection ${swapped.collection}'s snapshot: refused`);
  const collections = snapshotCollections(store);
  const named = manifest.qdrant.map((p) => p.collection);
  const foreign = named.filter((c, i) => !collections.includes(c) || named.indexOf(c) !== i);
  if (foreign.length > 0) throw usageError(`${from} names Qdrant collection(s) ${foreign.join(', ')} that store "${storeName}" does not have (or twice): refused; its collections are ${collections.join(', ') || 'none'}`);
  const absent = collections.filter((c) => !named.includes(c));
  if (absent.length > 0) throw usageError(`${from} holds no snapshot of collection(s) ${absent.join(', ')}: it cannot restore both stores`);
}

/** A vector file of the snapshot and the store file it restores: the path from the config, never the manifest's. */
export interface VectorFileDestination {
  part: SqlitePart;
  dest: string;
}

/**
 * Where each part of a snapshot goes, from the store's config only: a manifest says what a file is, never where to
 * write it. Throws a usage error, before anything changes, when the snapshot is of another store or layout, names a
 * collection the store does not have (or one twice), lacks one it has, or records a vector file that is not one of
 * the store's configured ones (another store's database, say) or lacks one that exists: it cannot restore both.
 */
export function destinations(storeName: string, store: StoreConfig, manifest: Manifest, from: string): VectorFileDestination[] {
  if (manifest.store !== storeName) throw usageError(`${from} is a snapshot of store "${manifest.store}", not "${storeName}"`);
  if (manifest.layout !== undefined && manifest.layout !== store.layout) throw usageError(`${from} is a snapshot of a ${String(manifest.layout)} store; store "${storeName}" is ${store.layout}`);
  // Each part's file must be the one a snapshot of that part is written to: a file swapped between two parts
  // would restore one collection's (or file's) data into another.
  if (manifest.sqlite?.file !== 'store.db') throw usageError(`${from} records its store copy as ${JSON.stringify(manifest.sqlite?.file ?? manifest.tables?.dir)}, not store.db: refused`);
  collectionDestinations(storeName, store, manifest, from);
  // The layout's own vector files too (what create.ts copies): a Mastra store's mastra.vectorDb is one.
  const configured = [...new Set([...storeFiles(store).slice(1), ...layoutFor(store).vectorFiles(store)].map((f) => resolve(f)))];
  const out: VectorFileDestination[] = [];
  for (const [i, part] of (manifest.vectorFiles ?? []).entries()) {
    const dest = configured.find((f) => f === resolve(String(part.source)) && part.file === vectorFileCopy(i, f));
    if (!dest || out.some((o) => o.dest === dest)) throw usageError(`${from} records a vector file for ${JSON.stringify(part.source)}, which is not one of store "${storeName}"'s vector files (${configured.join(', ') || 'none'}): refused`);
    out.push({ part, dest });
  }
  // The layout's vector tables (mem0's pgvector) and the snapshot's: both or neither.
  const side = layoutFor(store).vectorTables?.(storeName, store);
  if (side && !manifest.vectorTables) throw usageError(`${from} holds no copy of ${side.describe}: it cannot restore both stores`);
  if (!side && manifest.vectorTables) throw usageError(`${from} holds vector tables (${manifest.vectorTables.source}), and store "${storeName}" keeps no vectors in a database: refused`);
  const missing = configured.filter((f) => existsSync(f) && !out.some((o) => o.dest === f));
  if (missing.length > 0) throw usageError(`${from} holds no copy of ${missing.join(', ')}: it cannot restore both stores`);
  return out;
}
