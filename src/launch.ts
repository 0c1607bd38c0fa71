import { existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import Module, { createRequire } from 'node:module';
import { basename, dirname, join, relative, resolve } from 'node:path';
import vm from 'node:vm';

/**
 * The command line's bundle (scripts/bundle.ts, run by `npm run build`): the CLI's own modules, the vendored zod and
 * commander, in a few CommonJS chunks beside this module in dist/src/ (`cli-bundle.cjs`, `cli-chunk-*.cjs`); the
 * vendored yaml stays its own file, required when a YAML file is parsed.
 * On Node 20 (no compile cache) resolving and compiling ~170 ES modules one by one is most of a command's start-up;
 * the same code as a handful of CommonJS files starts ~90 ms sooner on the 2-core machine (BENCHMARKS.md, "fifth
 * session"). The chunks split where the modules import lazily, so a command still loads only what it runs.
 *
 * src/cli.ts runs the bundle only while it is the build of the files as they are now: the manifest names every file
 * it was built from and every chunk, with size, mtime and sha256; a file whose size differs, or whose mtime differs
 * and whose content does too (a copy that did not keep times still matches), and the CLI runs the modules themselves
 * instead (`tsc` alone after an edit, a chunk removed, a package upgraded). MEMORY_WARDEN_BUNDLE=0 does the same.
 *
 * The chunks compile with V8's code cache (`cli-bundle.cache/<chunk>.v8`), which the build makes by running a few
 * commands (scripts/bundle.ts) and stamps in the manifest like the chunks: compiling the chunks was ~70 ms of a
 * command's start-up, more than the rest of the loading. V8 itself refuses a cache made by another V8, other flags
 * or another source length, and the chunk then compiles as it would have; a cache file is only ever the build's own
 * (the package's directory, as trusted as its code), never one written at run time. A chunk with a dynamic
 * `import()` (a plugin, an ES-module package) has none and loads as Node loads it: on Node 20 a function compiled
 * from a code cache made in another process has lost its import callback ("A dynamic import callback was not
 * specified").
 */

export const BUNDLE_MANIFEST = 'cli-bundle.json';
export const BUNDLE_ENTRY = 'cli-bundle.cjs';
export const BUNDLE_CACHE_DIR = 'cli-bundle.cache';
/** Set by the build only (scripts/bundle.ts): where to write each chunk's code cache as this process exits. */
export const CACHE_OUT_ENV = 'MEMORY_WARDEN_CODE_CACHE_OUT';

/** A file's size, mtimeMs and sha256 when the bundle was built. */
export type FileStamp = [size: number, mtimeMs: number, sha256: string];

export interface BundleManifest {
  /** Every file the bundle was built from, and every chunk, by path from the package root. */
  files: Record<string, FileStamp>;
  /** Each chunk (by name, in dist/src/) and the modules in it, by path from the package root. */
  chunks: Record<string, string[]>;
  /** The chunks that compile with a code cache: those without a dynamic import(). */
  cached: string[];
}

export const sha256File = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');

export interface Bundle {
  entry: string;
  /** Each chunk that compiles with a code cache, by path, and its cache's path when the build made one. */
  cached: Map<string, string | undefined>;
}

/** The bundle in `dir` (dist/src/) when it was built from the files as they are now; else undefined. */
export function currentBundle(dir: string): Bundle | undefined {
  let manifest: BundleManifest;
  try {
    manifest = JSON.parse(readFileSync(join(dir, BUNDLE_MANIFEST), 'utf8')) as BundleManifest;
  } catch {
    return undefined; // no bundle (not built with the bundler), or unreadable: the modules themselves
  }
  // Paths joined by hand: path.resolve on each of ~300 files was 6 ms of every start.
  const root = resolve(dir, '../..');
  for (const rel in manifest.files) {
    const [size, mtimeMs, sha] = manifest.files[rel]!;
    const path = `${root}/${rel}`;
    const st = statSync(path, { throwIfNoEntry: false });
    if (!st || !st.isFile() || st.size !== size) return undefined;
    if (st.mtimeMs !== mtimeMs && sha256File(path) !== sha) return undefined;
  }
  const cacheRel = relative(root, join(dir, BUNDLE_CACHE_DIR));
  const cached = new Map<string, string | undefined>();
  for (const name of manifest.cached ?? []) {
    const stamped = manifest.files[`${cacheRel}/${name}.v8`] !== undefined;
    cached.set(`${dir}/${name}`, stamped ? `${root}/${cacheRel}/${name}.v8` : undefined);
  }
  return { entry: join(dir, BUNDLE_ENTRY), cached };
}

/**
 * Runs the bundle's entry, its chunks compiled with their code cache: Node's loader does everything else (resolving,
 * the module record); only the compile of a chunk is done here, as Node does it (the CommonJS wrapper), given the
 * cache. Other files, and chunks with no cache, load as Node loads them.
 */
export function requireBundle(bundle: Bundle): unknown {
  const extensions = (Module as unknown as { _extensions: Record<string, (m: Module, file: string) => void> })._extensions;
  const plain = extensions['.js']!;
  const out = process.env[CACHE_OUT_ENV];
  const compiled: [string, vm.Script][] = [];
  extensions['.js'] = function (module, filename) {
    if (!bundle.cached.has(filename)) return plain.call(this, module, filename);
    // The build's training runs read and write their own cache; a run without a cache for the chunk compiles as Node does.
    const trained = out && join(out, `${basename(filename)}.v8`);
    const cache = trained ? (existsSync(trained) ? trained : undefined) : bundle.cached.get(filename);
    if (!cache && !out) return plain.call(this, module, filename);
    const script = new vm.Script(Module.wrap(readFileSync(filename, 'utf8')), { filename, cachedData: cache ? readFileSync(cache) : undefined });
    if (out) compiled.push([filename, script]);
    const wrapper = script.runInThisContext() as (...args: unknown[]) => void;
    wrapper.call(module.exports, module.exports, createRequire(filename), module, filename, dirname(filename));
  };
  if (out) {
    // After the run, so that the cache holds the functions the command compiled, not only the chunk's top level.
    process.once('exit', () => {
      mkdirSync(out, { recursive: true });
      for (const [filename, script] of compiled) {
        const file = join(out, `${basename(filename)}.v8`);
        writeFileSync(`${file}.tmp`, script.createCachedData());
        renameSync(`${file}.tmp`, file);
      }
    });
  }
  return createRequire(bundle.entry)(bundle.entry);
}
