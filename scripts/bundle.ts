/**
 * `npm run build`, after scripts/vendor.ts: the command line's modules bundled into a few CommonJS chunks in
 * dist/src/ (src/launch.ts says why and when src/cli.ts runs them). The chunks sit beside the modules they are built
 * from, so every path a module finds from its own location (config/default.yaml, the defaults cache, package.json,
 * better-sqlite3 for the store thread) is the same from a chunk. Packages stay outside (loaded from node_modules as
 * before) except commander and zod (BUNDLED). No compiled code is made here: Node's compile cache (22.1+) keeps it
 * on the machine that runs the CLI. Without the bundler (a production install) nothing is written and the CLI runs
 * the modules, as it did before.
 */
import { readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { isAbsolute, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BUNDLE_ENTRY, BUNDLE_MANIFEST, BUNDLE_SEEN, sha256File, type BundleManifest, type FileStamp } from '../src/launch.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const OUT = join(ROOT, 'dist/src');
/** Packages bundled with the CLI's modules: pure JavaScript that every command loads. */
const BUNDLED = ['commander', 'zod'];
/**
 * src/vendor/zod.ts, whose tsc output scripts/vendor.ts replaced with all of zod in one file (for the library entry
 * and the modules): in the CLI bundle, the same module is built from zod's own modules, so the bundler keeps only
 * the parts the commands use (185 KB of its 650: ~10 ms less for each `--config` start, BENCHMARKS.md "sixth session").
 */
const VENDOR_ZOD = join(OUT, 'vendor/zod.js');
const VENDOR_ZOD_SOURCE = join(ROOT, 'src/vendor/zod.ts');
const CHUNK_PREFIX = 'cli-chunk-';
/** What builds before this one wrote beside the chunks (V8 code caches): removed, so that it is never packed. */
const OLD_CODE_CACHE = 'cli-bundle.cache';

const packageOf = (id: string): string | undefined => {
  const m = /(?:^|\/node_modules\/)((?:@[^/]+\/)?[^/]+)/.exec(id);
  return m?.[1];
};

function external(id: string): boolean {
  if (id.startsWith('node:')) return true;
  if (id.includes('/node_modules/')) return !BUNDLED.includes(packageOf(id.slice(id.lastIndexOf('/node_modules/')))!);
  if (id.startsWith('.') || isAbsolute(id)) return false;
  return !BUNDLED.includes(packageOf(id)!); // a bare name: a package, or a builtin without `node:`
}

const stamp = (path: string): FileStamp => {
  const st = statSync(path);
  return [st.size, st.mtimeMs, sha256File(path)];
};

async function main(): Promise<void> {
  let build: typeof import('rolldown').build;
  try {
    ({ build } = await import('rolldown'));
  } catch {
    rmSync(join(OUT, BUNDLE_MANIFEST), { force: true });
    console.log('bundle: no bundler here (dev dependency rolldown): the CLI runs its modules');
    return;
  }
  // The manifest goes first and comes back last: a bundle half rewritten is never taken for a current one.
  rmSync(join(OUT, BUNDLE_MANIFEST), { force: true });
  rmSync(join(OUT, BUNDLE_SEEN), { force: true }); // made for the old manifest (src/launch.ts): of no use to the new
  for (const f of readdirSync(OUT)) if (f === BUNDLE_ENTRY || (f.startsWith(CHUNK_PREFIX) && f.endsWith('.cjs'))) rmSync(join(OUT, f));
  rmSync(join(OUT, OLD_CODE_CACHE), { recursive: true, force: true });
  const result = await build({
    input: { [BUNDLE_ENTRY.replace(/\.cjs$/, '')]: join(OUT, 'program.js') },
    platform: 'node',
    logLevel: 'warn',
    // Lazy imports the module graph also reaches statically cannot move to a chunk of their own; that is the graph's
    // business (test/cli-startup.test.ts checks what each command loads), not a build warning.
    onLog: (level, log, handler) => (log.code === 'INEFFECTIVE_DYNAMIC_IMPORT' ? undefined : handler(level, log)),
    external,
    plugins: [{ name: 'zod-from-package', load: (id) => (id === VENDOR_ZOD ? { code: readFileSync(VENDOR_ZOD_SOURCE, 'utf8'), moduleType: 'ts' } : null) }],
    output: { dir: OUT, format: 'cjs', entryFileNames: '[name].cjs', chunkFileNames: `${CHUNK_PREFIX}[hash].cjs` },
  });
  const manifest: BundleManifest = { files: {}, chunks: {} };
  for (const chunk of result.output) {
    if (chunk.type !== 'chunk') continue;
    const modules = chunk.moduleIds.filter((id) => isAbsolute(id)).map((id) => relative(ROOT, id));
    manifest.chunks[chunk.fileName] = modules;
    for (const m of modules) manifest.files[m] ??= stamp(resolve(ROOT, m));
    manifest.files[relative(ROOT, join(OUT, chunk.fileName))] = stamp(join(OUT, chunk.fileName));
  }
  const n = Object.keys(manifest.chunks).length;
  const inputs = Object.keys(manifest.files).length - n;
  writeManifest(manifest);
  console.log(`bundle: wrote dist/src/${BUNDLE_ENTRY} and ${n - 1} chunks from ${inputs} files`);
}

function writeManifest(manifest: BundleManifest): void {
  const tmp = join(OUT, `${BUNDLE_MANIFEST}.tmp`);
  writeFileSync(tmp, JSON.stringify(manifest));
  renameSync(tmp, join(OUT, BUNDLE_MANIFEST));
}

await main();
