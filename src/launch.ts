import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import Module, { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { basename, dirname, join, relative, resolve } from 'node:path';
import vm from 'node:vm';

/**
 * The command line's bundle (scripts/bundle.ts, run by `npm run build`): the CLI's own modules, the vendored zod and
 * commander, in a few CommonJS chunks beside this module in dist/src/ (`cli-bundle.cjs`, `cli-chunk-*.cjs`); the
 * vendored yaml stays its own file, required when a YAML file is parsed, stamped and code-cached like a chunk.
 * On Node 20 (no compile cache) resolving and compiling ~170 ES modules one by one is most of a command's start-up;
 * the same code as a handful of CommonJS files starts ~90 ms sooner on the 2-core machine (BENCHMARKS.md, "fifth
 * session"). The chunks split where the modules import lazily, so a command still loads only what it runs.
 *
 * src/cli.ts runs the bundle only while it is the build of the files as they are now: the manifest names every file
 * it was built from and every chunk, with size, mtime and sha256; a file whose size differs, or whose mtime differs
 * and whose content does too (a copy that did not keep times still matches), and the CLI runs the modules themselves
 * instead (`tsc` alone after an edit, a chunk removed, a package upgraded). MEMORY_WARDEN_BUNDLE=0 does the same.
 * A bundled package's files are looked for where Node finds the package from dist/src/ (in an installed copy, the
 * application's node_modules).
 * A package npm installed has every file's mtime set to the install's time, so that check reads and hashes all of them
 * (~30 ms a start); the first start that does records what it saw (`cli-bundle.seen.json`: each such file's size and
 * mtime, for this manifest), and later starts take a file whose size and mtime are still those as checked. Any write
 * to a file changes its mtime, and the next start hashes it again. The record goes beside the manifest, or where the
 * package's directory cannot be written (a global install run by another user), in the user's cache directory; if
 * neither can be written every start hashes, as before.
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
export const BUNDLE_SEEN = 'cli-bundle.seen.json';
/** Set by the build only (scripts/bundle.ts): where to write each chunk's code cache as this process exits. */
export const CACHE_OUT_ENV = 'MEMORY_WARDEN_CODE_CACHE_OUT';

/** A file's size, mtimeMs and sha256 when the bundle was built. */
export type FileStamp = [size: number, mtimeMs: number, sha256: string];

export interface BundleManifest {
  /** Every file the bundle was built from, and every chunk, by path from the package root. */
  files: Record<string, FileStamp>;
  /** Each chunk (by name, in dist/src/) and the modules in it, by path from the package root. */
  chunks: Record<string, string[]>;
  /** The files that compile with a code cache, by path from dist/src/: the chunks without a dynamic import(), and
   * the vendored yaml (required from its own file). Each one's cache is `cli-bundle.cache/<its name>.v8`. */
  cached: string[];
  /** The V8 (process.versions.v8) that made the code cache; absent in a manifest from before it was recorded. */
  v8?: string;
}

export const sha256File = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');

/** What a start saw of files whose mtime is not the build's and whose content is (src/launch.ts). */
interface Seen {
  /** sha256 of the manifest's text: a record made for another build is not used. */
  manifest: string;
  files: Record<string, [size: number, mtimeMs: number]>;
}

export interface Bundle {
  entry: string;
  /** How many files this check read and hashed (their mtime was neither the build's nor as last checked). */
  hashed: number;
  /** Each chunk that compiles with a code cache, by path, and its cache's path when the build made one. */
  cached: Map<string, string | undefined>;
}

/** The bundle in `dir` (dist/src/) when it was built from the files as they are now; else undefined. */
export function currentBundle(dir: string): Bundle | undefined {
  let text: string;
  let manifest: BundleManifest;
  try {
    text = readFileSync(join(dir, BUNDLE_MANIFEST), 'utf8');
    manifest = JSON.parse(text) as BundleManifest;
  } catch {
    return undefined; // no bundle (not built with the bundler), or unreadable: the modules themselves
  }
  const manifestSha = createHash('sha256').update(text).digest('hex');
  const seen = readSeen(dir, manifestSha);
  const checked: Seen = { manifest: manifestSha, files: {} };
  let hashed = 0;
  // Paths joined by hand: path.resolve on each of ~300 files was 6 ms of every start.
  const root = resolve(dir, '../..');
  const packages = new Map<string, string | undefined>();
  for (const rel in manifest.files) {
    const [size, mtimeMs, sha] = manifest.files[rel]!;
    const path = rel.startsWith('node_modules/') ? packageFile(dir, rel, packages) : `${root}/${rel}`;
    const st = path === undefined ? undefined : statSync(path, { throwIfNoEntry: false });
    if (!st || !st.isFile() || st.size !== size) return undefined;
    if (st.mtimeMs === mtimeMs) continue;
    const before = seen?.files[rel];
    if (!before || before[0] !== st.size || before[1] !== st.mtimeMs) {
      hashed++;
      if (sha256File(path!) !== sha) return undefined;
    }
    checked.files[rel] = [st.size, st.mtimeMs]; // the stat from before the read: a write during it shows next time
  }
  if (hashed > 0) writeSeen(dir, checked);
  const cacheRel = relative(root, join(dir, BUNDLE_CACHE_DIR));
  const cached = new Map<string, string | undefined>();
  // This V8 refuses a cache another one made, and the chunk compiles from nothing at every start; where Node keeps
  // its own compile cache (22.1+, enabled by src/cli.ts) the chunks then load as Node loads them, and that cache
  // serves them from the second start on (a package built on one Node line and run on another).
  const foreign = manifest.v8 !== undefined && manifest.v8 !== process.versions.v8 && nodeCompileCache();
  for (const name of manifest.cached ?? []) {
    const cache = `${cacheRel}/${basename(name)}.v8`;
    cached.set(`${dir}/${name}`, !foreign && manifest.files[cache] !== undefined ? `${root}/${cache}` : undefined);
  }
  return { entry: join(dir, BUNDLE_ENTRY), hashed, cached };
}

/** Node's module compile cache is on in this process (module.getCompileCacheDir, Node 22.1+). */
const nodeCompileCache = () => (Module as { getCompileCacheDir?: () => string | undefined }).getCompileCacheDir?.() !== undefined;

/**
 * A bundled package's file (`node_modules/<name>/<file>` in the manifest, as the build found it beside the package)
 * where Node finds that package from dist/src/ now: in an installed copy it is hoisted into the application's
 * node_modules, not under this package. Each package's directory is looked up once.
 */
function packageFile(dir: string, rel: string, packages: Map<string, string | undefined>): string | undefined {
  const parts = rel.split('/');
  const n = parts[1]?.startsWith('@') ? 3 : 2;
  const name = parts.slice(1, n).join('/');
  if (!packages.has(name)) packages.set(name, findPackage(dir, name));
  const base = packages.get(name);
  return base === undefined ? undefined : `${base}/${parts.slice(n).join('/')}`;
}

/** Node's lookup of a package by name from `from`: `node_modules/<name>` in it and each directory above. */
function findPackage(from: string, name: string): string | undefined {
  for (let d = from; ; d = dirname(d)) {
    if (basename(d) !== 'node_modules' && existsSync(`${d}/node_modules/${name}/package.json`)) return `${d}/node_modules/${name}`;
    if (dirname(d) === d) return undefined;
  }
}

/** Where a package directory that cannot be written keeps its record: the user's cache, one file per directory. */
const seenElsewhere = (dir: string) => {
  const base = process.env.XDG_CACHE_HOME || join(homedir(), '.cache');
  return join(base, 'memory-warden', `cli-bundle-${createHash('sha256').update(dir).digest('hex').slice(0, 16)}.seen.json`);
};

function readSeen(dir: string, manifestSha: string): Seen | undefined {
  for (const path of [join(dir, BUNDLE_SEEN), seenElsewhere(dir)]) {
    try {
      const seen = JSON.parse(readFileSync(path, 'utf8')) as Seen;
      if (seen.manifest === manifestSha && typeof seen.files === 'object' && seen.files) return seen;
    } catch {
      // none there, or not one this start can use
    }
  }
  return undefined;
}

/** Best effort, whole or not at all (a temporary file renamed): a start that cannot record only hashes next time too. */
function writeSeen(dir: string, seen: Seen): void {
  for (const path of [join(dir, BUNDLE_SEEN), seenElsewhere(dir)]) {
    const tmp = `${path}.${process.pid}.tmp`;
    try {
      mkdirSync(dirname(path), { recursive: true });
      writeFileSync(tmp, JSON.stringify(seen));
      renameSync(tmp, path);
      return;
    } catch {
      try {
        rmSync(tmp, { force: true });
      } catch {
        // nothing was written there
      }
    }
  }
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
