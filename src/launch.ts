import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';

/**
 * The command line's bundle (scripts/bundle.ts, run by `npm run build`): the CLI's own modules, the vendored zod and
 * commander, in a few CommonJS chunks beside this module in dist/src/ (`cli-bundle.cjs`, `cli-chunk-*.cjs`).
 * Resolving and loading ~170 ES modules one by one is most of a command's start-up; the same code as a handful of
 * CommonJS files starts sooner (BENCHMARKS.md, start-up). The chunks split where the modules import lazily, so a
 * command still loads only what it runs. They load as Node loads any CommonJS file (`require`); on Node 22.1+
 * src/cli.ts turns on Node's compile cache (module.enableCompileCache), which keeps V8's compiled code for them, so
 * from the second start on they are not compiled again. Nothing here reaches into Node's internals, and the package
 * ships no compiled code: what the cache holds is written on the machine that runs it.
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
 */

export const BUNDLE_MANIFEST = 'cli-bundle.json';
export const BUNDLE_ENTRY = 'cli-bundle.cjs';
export const BUNDLE_SEEN = 'cli-bundle.seen.json';

/** A file's size, mtimeMs and sha256 when the bundle was built. */
export type FileStamp = [size: number, mtimeMs: number, sha256: string];

export interface BundleManifest {
  /** Every file the bundle was built from, and every chunk, by path from the package root. */
  files: Record<string, FileStamp>;
  /** Each chunk (by name, in dist/src/) and the modules in it, by path from the package root. */
  chunks: Record<string, string[]>;
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
  return { entry: join(dir, BUNDLE_ENTRY), hashed };
}

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

/** Runs the bundle's entry: a CommonJS file, required as Node requires any. */
export function requireBundle(bundle: Bundle): unknown {
  return createRequire(bundle.entry)(bundle.entry);
}
