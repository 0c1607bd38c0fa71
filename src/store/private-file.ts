import { closeSync, constants, fchmodSync, fstatSync, lstatSync, mkdirSync, openSync, type BigIntStats, type Stats } from 'node:fs';
import type Database from 'better-sqlite3';
import { storeError } from '../core/errors.js';
import { openHandle, type Db } from './sqlite.js';

/** What a path is, in the words of an error that says it is not a file. */
export function kindOf(st: Stats | BigIntStats): string {
  if (st.isFile()) return 'a regular file';
  if (st.isDirectory()) return 'a directory';
  if (st.isSymbolicLink()) return 'a symbolic link';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isSocket()) return 'a socket';
  return 'not a file';
}

/**
 * What is at `path` itself (`a FIFO`, `a symbolic link`) when it is there and not a regular file; undefined for a
 * regular file, or nothing (yet), or what cannot be looked at (the open then says why). memory-warden's own SQLite
 * files (the state db) are regular files or not there yet: an empty device (/dev/null, /dev/zero) reads as a new
 * database, so it passed every content check and was then made 0600 as ours; a FIFO would hold the open; a socket
 * or a folder SQLite refuses with a message that names no cause; a link is never followed (openPrivateDb).
 */
export function notRegularFile(path: string): string | undefined {
  let st: Stats;
  try {
    st = lstatSync(path);
  } catch {
    return undefined;
  }
  return st.isFile() ? undefined : kindOf(st);
}

export interface PrivateDbOptions {
  /** How errors name the file: `lock sidecar`, `open state db`. */
  name: string;
  /** What a person should do about a file that is not one of ours; ends the error. */
  fix: string;
  /** Asked of the open handle before anything of the file changes: throws when what it holds is not ours. */
  check(db: Db): void;
  options?: Database.Options;
}

/**
 * memory-warden's own SQLite files (the state db, lock sidecars) are private, 0600 whatever the umask, and are only
 * ever a regular file with one name, made here or holding what this build makes in it (`check`). Never a symbolic
 * link, which was followed: a lock sidecar linked to another database gave it a `holder` table, switched its journal
 * mode and made it 0600; linked to a text file it made that 0600; to an empty file it wrote a database over it; to
 * the store itself it made the agent's store 0600. Nor a folder, a device, a FIFO or a socket, nor a second name
 * (a hard link) of another file. Anything else is one error naming the file, before anything of it changes.
 *
 * The file is checked, and made 0600, through a descriptor opened without following a link (fchmod: nothing can be
 * put at the path between the check and the change). POSIX record locks belong to the process, and closing any
 * descriptor of a file drops every lock the process holds on it, SQLite's included ("How To Corrupt An SQLite
 * Database File", 2.2): so that descriptor stays open while any connection opened here on that file is, opened
 * before the first and closed after the last, as SQLite's own unix VFS keeps its descriptors.
 */
export function openPrivateDb(path: string, opts: PrivateDbOptions): Db {
  const file = holdFile(path, opts);
  let db: Db | undefined;
  try {
    db = openHandle(path, opts.options);
    // SQLite opens by name: the path must still be the file held (nothing else put there meanwhile).
    const now = lstat(path, opts);
    if (!now || identity(now) !== file.key) throw refusal(path, opts, 'it was replaced while it was being opened');
    opts.check(db);
    if ((fstatSync(file.fd).mode & 0o777) !== 0o600) makePrivate(file.fd); // an old file, or a umask of 0o400
  } catch (err) {
    db?.close();
    release(file.key);
    throw err;
  }
  const close = db.close.bind(db);
  let closed = false;
  db.close = () => {
    if (closed) return db!;
    closed = true;
    try {
      return close();
    } finally {
      release(file.key);
    }
  };
  return db;
}

/** The descriptors held on private files this process has connections on, by file (device and inode). */
const held = new Map<string, { fd: number; connections: number }>();

const identity = (st: BigIntStats) => `${st.dev}:${st.ino}`;

/** A descriptor on the private file at `path`, shared with this process's other connections on it; made if missing. */
function holdFile(path: string, opts: PrivateDbOptions): { key: string; fd: number } {
  for (let tries = 0; ; tries++) {
    const st = lstat(path, opts);
    const shared = st && held.get(identity(st));
    if (shared) {
      shared.connections++;
      return { key: identity(st), fd: shared.fd };
    }
    let fd: number;
    try {
      // O_NOFOLLOW: a link is refused by the open itself, even one put there after the look above.
      fd = st
        ? openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK)
        : openSync(path, constants.O_RDWR | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EEXIST' && tries === 0) continue; // another process made it just now: look at it again
      if (code === 'ELOOP') throw refusal(path, opts, 'it is a symbolic link, not a regular file');
      throw storeError(`${st ? 'open' : 'create'} ${path}: ${code ?? (err as Error).message}`, err);
    }
    const opened = fstatSync(fd, { bigint: true });
    const problem = st && identity(opened) !== identity(st) ? 'it was replaced while it was being opened' : notOwnFile(opened);
    if (problem) {
      closeSync(fd);
      throw refusal(path, opts, problem);
    }
    if (!st) makePrivate(fd); // new: 0600 whatever the umask, before SQLite makes its journal with the same mode
    held.set(identity(opened), { fd, connections: 1 });
    return { key: identity(opened), fd };
  }
}

function release(key: string): void {
  const entry = held.get(key)!;
  if (--entry.connections > 0) return;
  held.delete(key);
  closeSync(entry.fd);
}

/** The path's own status (a link is not followed), undefined when nothing is there; refused when it is not ours. */
function lstat(path: string, opts: PrivateDbOptions): BigIntStats | undefined {
  let st: BigIntStats;
  try {
    st = lstatSync(path, { bigint: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw storeError(`${opts.name} ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, err);
  }
  const problem = notOwnFile(st);
  if (problem) throw refusal(path, opts, problem);
  return st;
}

function notOwnFile(st: BigIntStats): string | undefined {
  if (!st.isFile()) return `it is ${kindOf(st)}, not a regular file`;
  if (st.nlink > 1n) return `it is a file with ${st.nlink} names (a hard link), not one of its own`;
  return undefined;
}

const refusal = (path: string, opts: PrivateDbOptions, problem: string) => storeError(`${opts.name} ${path}: ${problem}; ${opts.fix}`);

function makePrivate(fd: number): void {
  try {
    fchmodSync(fd, 0o600);
  } catch {
    // Not ours to change (another user's file): SQLite will say whether it can use it.
  }
}

/**
 * mkdir -p, with the last folder made 0700 whatever the umask, through a descriptor that does not follow a link: a
 * link there is refused, not followed (a chmod by path would make its target, /etc say, 0700). `existing`: whether a
 * folder that was there already is made 0700 too (a snapshot folder is; the state db's, perhaps /tmp, is not).
 * Folders made on the way get 0700 minus the umask.
 */
export function ensurePrivateDir(path: string, existing = true): void {
  let made: boolean;
  try {
    made = mkdirSync(path, { recursive: true, mode: 0o700 }) !== undefined;
  } catch (err) {
    throw folderError(path, 'create folder', err);
  }
  if (made || existing) makeDirPrivate(path);
}

/** The folder at `path` made 0700 through a descriptor; a link or anything but a folder is refused, naming it. */
export function makeDirPrivate(path: string): void {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  } catch (err) {
    throw folderError(path, 'open', err);
  }
  try {
    if ((fstatSync(fd).mode & 0o777) !== 0o700) fchmodSync(fd, 0o700);
  } catch (err) {
    throw storeError(`chmod ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, err);
  } finally {
    closeSync(fd);
  }
}

/**
 * A folder that could not be made or opened: what the path is instead, when something else is there (Linux answers
 * ENOTDIR for a link opened with O_DIRECTORY | O_NOFOLLOW, other systems ELOOP; mkdir -p EEXIST for a file or a
 * link to one), else the system's code.
 */
function folderError(path: string, doing: string, err: unknown): Error {
  const code = (err as NodeJS.ErrnoException).code;
  let st: Stats | undefined;
  try {
    if (code === 'ELOOP' || code === 'ENOTDIR' || code === 'EEXIST') st = lstatSync(path);
  } catch {
    // nothing there after all: the code says what happened
  }
  if (st && !st.isDirectory()) {
    return storeError(`${path}: it is ${kindOf(st)}, not a folder of its own; memory-warden makes this folder private (0700) and never follows a link there: move it away`, err);
  }
  return storeError(`${doing} ${path}: ${code ?? (err as Error).message}`, err);
}
