import { realpathSync } from 'node:fs';
import { realpath } from 'node:fs/promises';
import { isAbsolute, resolve, sep } from 'node:path';
import type { Logger } from '../logger.js';
import type { Instant } from '../time.js';
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
  };
}
