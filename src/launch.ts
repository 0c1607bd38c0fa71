import { readFileSync, statSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join, resolve } from 'node:path';

/**
 * The command line's bundle (scripts/bundle.ts, run by `npm run build`): the CLI's own modules, the vendored zod and
 * yaml, and commander, in a few CommonJS chunks beside this module in dist/src/ (`cli-bundle.cjs`, `cli-chunk-*.cjs`).
 * On Node 20 (no compile cache) resolving and compiling ~170 ES modules one by one is most of a command's start-up;
 * the same code as a handful of CommonJS files starts ~90 ms sooner on the 2-core machine (BENCHMARKS.md, "fifth
 * session"). The chunks split where the modules import lazily, so a command still loads only what it runs.
 *
 * src/cli.ts runs the bundle only while it is the build of the files as they are now: the manifest names every file
 * it was built from and every chunk, with size, mtime and sha256; a file whose size differs, or whose mtime differs
 * and whose content does too (a copy that did not keep times still matches), and the CLI runs the modules themselves
 * instead (`tsc` alone after an edit, a chunk removed, a package upgraded). MEMORY_WARDEN_BUNDLE=0 does the same.
 */

export const BUNDLE_MANIFEST = 'cli-bundle.json';
export const BUNDLE_ENTRY = 'cli-bundle.cjs';

/** A file's size, mtimeMs and sha256 when the bundle was built. */
export type FileStamp = [size: number, mtimeMs: number, sha256: string];

export interface BundleManifest {
  /** Every file the bundle was built from, and every chunk, by path from the package root. */
  files: Record<string, FileStamp>;
  /** Each chunk (by name, in dist/src/) and the modules in it, by path from the package root. */
  chunks: Record<string, string[]>;
}

export const sha256File = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');

/** The bundle's entry when `dir` (dist/src/) holds a bundle built from the files as they are now; else undefined. */
export function currentBundle(dir: string): string | undefined {
  let manifest: BundleManifest;
  try {
    manifest = JSON.parse(readFileSync(join(dir, BUNDLE_MANIFEST), 'utf8')) as BundleManifest;
  } catch {
    return undefined; // no bundle (not built with the bundler), or unreadable: the modules themselves
  }
  const root = resolve(dir, '../..');
  for (const [rel, [size, mtimeMs, sha]] of Object.entries(manifest.files)) {
    const path = resolve(root, rel);
    const st = statSync(path, { throwIfNoEntry: false });
    if (!st || !st.isFile() || st.size !== size) return undefined;
    if (st.mtimeMs !== mtimeMs && sha256File(path) !== sha) return undefined;
  }
  return join(dir, BUNDLE_ENTRY);
}
