import { constants, realpathSync, type Stats } from 'node:fs';
import { open, readlink, realpath, stat, type FileHandle } from 'node:fs/promises';
import { isAbsolute, resolve, sep } from 'node:path';
import type { Logger } from '../log/logger.js';
import type { Instant } from '../time/instants.js';
import { Refusal, type Allowlists, type VerifierContext } from './types.js';

/** Reads shared by a whole run: the first memory asking for a key reads, the others wait for that read. */
export class ReadCache {
  private readonly entries = new Map<string, Promise<unknown>>();
  reads = 0;
  shared = 0;

  once<T>(key: string, read: () => Promise<T>): Promise<T> {
    const hit = this.entries.get(key);
    if (hit) {
      this.shared += 1;
      return hit as Promise<T>;
    }
    this.reads += 1;
    const p = read();
    p.catch(() => undefined); // a failed read is shared too; whoever awaits it sees the error
    this.entries.set(key, p);
    return p;
  }
}

export const within = (root: string, path: string) => path === root || path.startsWith(root.endsWith(sep) ? root : root + sep);

/** The roots as real paths (a root that does not exist allows nothing). Computed once per run. */
export function realRoots(roots: readonly string[]): string[] {
  const out: string[] = [];
  for (const r of roots) {
    try {
      out.push(realpathSync(resolve(r)));
    } catch {
      // a missing root: nothing under it can be read
    }
  }
  return out;
}

/**
 * A path from a rule (filled from memory text), checked before anything is read: no NUL, no `..` segment,
 * lexically under a root, and its real path (symlinks resolved) under a root's real path. A relative path is
 * relative to the first root.
 */
export async function resolveUnderRoots(path: string, roots: readonly string[], asConfigured: readonly string[] = roots): Promise<string> {
  if (typeof path !== 'string' || path.length === 0) throw new Refusal('no path given');
  if (path.includes('\0')) throw new Refusal('path contains a NUL byte');
  if (path.split(/[\\/]+/).includes('..')) throw new Refusal(`path ${JSON.stringify(path)} has a ".." segment`);
  if (roots.length === 0) throw new Refusal('no file roots allowed (verify.allow.fileRoots)');
  const wanted = isAbsolute(path) ? resolve(path) : resolve(roots[0]!, path);
  // Lexically under a root as configured or as its real path (a root may itself sit behind a symlink); the real
  // path check below is the one that guards.
  if (![...roots, ...asConfigured.map((r) => resolve(r))].some((r) => within(r, wanted))) throw new Refusal(`path ${JSON.stringify(path)} is outside the allowed roots`);
  const real = await realpath(wanted); // ENOENT and friends: unverifiable, not refused
  if (!roots.some((r) => within(r, real))) throw new Refusal(`path ${JSON.stringify(path)} leads outside the allowed roots through a symlink`);
  return real;
}

/** A file above this is not a config a fact is about: the file verifier's limit, and ctx.readFile's default. */
export const MAX_FILE_BYTES = 10 * 1024 * 1024;

export interface ReadOptions {
  maxBytes?: number;
  signal?: AbortSignal;
  /** For tests: runs between the path check and the open, where a swap of the path would land. */
  beforeOpen?: (real: string) => void | Promise<void>;
  /** For tests: where the descriptors are listed (default /proc/self/fd); a missing folder takes the fallback. */
  procFd?: string;
}

/**
 * The text of a regular file under the roots, read through one descriptor. Checking a path and then reading it
 * by its name again is a race: a folder or the file itself swapped for a symlink in between is followed, out of
 * the roots. So the path is checked first (a refusal then names the reason), then opened without following a
 * symlink at its last component and without waiting on a FIFO, and then the descriptor itself is checked: the
 * kernel's name for it inside a root, a regular file within `maxBytes`. What was checked is what is read, swap or
 * no swap. A hard link inside a root to a file elsewhere is read: it is inside the root, by that name.
 */
export async function readUnderRoots(path: string, roots: readonly string[], asConfigured: readonly string[], opts: ReadOptions = {}): Promise<{ path: string; text: string }> {
  const real = await resolveUnderRoots(path, roots, asConfigured);
  await opts.beforeOpen?.(real);
  const max = opts.maxBytes ?? MAX_FILE_BYTES;
  let fh: FileHandle;
  try {
    fh = await open(real, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW);
  } catch (err) {
    // O_NOFOLLOW: the real path has no symlink at its end, unless one was put there since.
    if ((err as NodeJS.ErrnoException).code === 'ELOOP') throw new Refusal(`path ${JSON.stringify(path)} turned into a symlink as it was opened`);
    throw err;
  }
  try {
    const st = await fh.stat();
    const opened = await openedPath(fh.fd, real, st, opts.procFd ?? '/proc/self/fd');
    if (opened === null || !roots.some((r) => within(r, opened))) throw new Refusal(`path ${JSON.stringify(path)} led outside the allowed roots as it was opened`);
    if (!st.isFile()) throw new Error(`${real}: not a regular file`);
    const text = st.size > max ? null : await readAtMost(fh, max, opts.signal);
    if (text === null) throw new Error(`${real}: larger than ${max} bytes`);
    return { path: real, text };
  } finally {
    await fh.close();
  }
}

/**
 * The path of the file behind descriptor `fd`, as the kernel names it (Linux: /proc/self/fd). Without /proc
 * (macOS, the BSDs), `real` when it still names the very file opened (device and inode), else null: weaker, as a
 * second swap back between the open and that stat would pass.
 */
async function openedPath(fd: number, real: string, st: Stats, procFd: string): Promise<string | null> {
  try {
    return await readlink(`${procFd}/${fd}`);
  } catch {
    const now = await stat(real).catch(() => undefined);
    return now && now.dev === st.dev && now.ino === st.ino ? realpath(real) : null;
  }
}

/** The file's text, or null past `max` bytes: it may have grown since the fstat. */
async function readAtMost(fh: FileHandle, max: number, signal?: AbortSignal): Promise<string | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for (;;) {
    signal?.throwIfAborted();
    const { bytesRead, buffer } = await fh.read({ buffer: Buffer.alloc(64 * 1024) });
    if (bytesRead === 0) return Buffer.concat(chunks, size).toString('utf8');
    size += bytesRead;
    if (size > max) return null;
    chunks.push(buffer.subarray(0, bytesRead));
  }
}

export interface ContextOptions {
  signal: AbortSignal;
  log: Logger;
  now: Instant;
  allow: Allowlists;
  cacheDir: string;
  cache: ReadCache;
  /** verify.allow.fileRoots as written (allow.fileRoots holds their real paths). */
  configuredRoots?: readonly string[];
}

export function createVerifierContext(opts: ContextOptions): VerifierContext {
  const roots = opts.allow.fileRoots;
  return {
    signal: opts.signal,
    log: opts.log,
    now: opts.now,
    allow: opts.allow,
    cacheDir: opts.cacheDir,
    once: (key, read) => opts.cache.once(key, read),
    resolveFile: (path) => resolveUnderRoots(path, roots, opts.configuredRoots ?? roots),
    readFile: (path, o) => readUnderRoots(path, roots, opts.configuredRoots ?? roots, { maxBytes: o?.maxBytes, signal: opts.signal }),
  };
}
