/**
 * `npm run build`, after scripts/vendor.ts: the command line's modules bundled into a few CommonJS chunks in
 * dist/src/ (src/launch.ts says why and when src/cli.ts runs them). The chunks sit beside the modules they are built
 * from, so every path a module finds from its own location (config/default.yaml, the defaults cache, package.json,
 * better-sqlite3 for the store thread) is the same from a chunk. Packages stay outside (loaded from node_modules as
 * before) except commander and zod (BUNDLED). Then the chunks' code cache: the commands users run most,
 * each run on a demo store, each adding the functions it compiled to the cache. Without the bundler (a production
 * install) nothing is written and the CLI runs the modules, as it did before.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { isAbsolute, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BUNDLE_CACHE_DIR, BUNDLE_ENTRY, BUNDLE_MANIFEST, BUNDLE_SEEN, CACHE_OUT_ENV, sha256File, type BundleManifest, type FileStamp } from '../src/launch.js';
import { buildDemoStore } from './demo-store.js';

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
/**
 * A dynamic import() in a chunk's code (not on a comment line): such a chunk gets no code cache (src/launch.ts).
 * Erring towards a match only costs that chunk its cache.
 */
const DYNAMIC_IMPORT = /^(?![ \t]*(?:\*|\/\/)).*\bimport\s*\(/m;

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
  rmSync(join(OUT, BUNDLE_CACHE_DIR), { recursive: true, force: true });
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
  const manifest: BundleManifest = { files: {}, chunks: {}, cached: [], v8: process.versions.v8 };
  for (const chunk of result.output) {
    if (chunk.type !== 'chunk') continue;
    if (!DYNAMIC_IMPORT.test(chunk.code)) manifest.cached.push(chunk.fileName);
    const modules = chunk.moduleIds.filter((id) => isAbsolute(id)).map((id) => relative(ROOT, id));
    manifest.chunks[chunk.fileName] = modules;
    for (const m of modules) manifest.files[m] ??= stamp(resolve(ROOT, m));
    manifest.files[relative(ROOT, join(OUT, chunk.fileName))] = stamp(join(OUT, chunk.fileName));
  }
  const n = Object.keys(manifest.chunks).length;
  const inputs = Object.keys(manifest.files).length - n;
  // The vendored yaml, required from its own file whenever a YAML file is parsed (every `--config` start): compiled
  // with a code cache too, 17 → 7 ms. Stamped like a chunk, so that its cache is never used for other bytes.
  const yaml = join(OUT, 'vendor/yaml.cjs');
  if (!DYNAMIC_IMPORT.test(readFileSync(yaml, 'utf8'))) {
    manifest.cached.push('vendor/yaml.cjs');
    manifest.files[relative(ROOT, yaml)] = stamp(yaml);
  }
  writeManifest(manifest);
  const caches = makeCodeCache();
  for (const f of caches) manifest.files[relative(ROOT, f)] = stamp(f);
  writeManifest(manifest);
  console.log(`bundle: wrote dist/src/${BUNDLE_ENTRY} and ${n - 1} chunks from ${inputs} files, code cache for ${caches.length}`);
}

function writeManifest(manifest: BundleManifest): void {
  const tmp = join(OUT, `${BUNDLE_MANIFEST}.tmp`);
  writeFileSync(tmp, JSON.stringify(manifest));
  renameSync(tmp, join(OUT, BUNDLE_MANIFEST));
}

/** The chunks' code cache (src/launch.ts), from the bundle running the commands users run most, one after another. */
function makeCodeCache(): string[] {
  const cacheDir = join(OUT, BUNDLE_CACHE_DIR);
  const work = mkdtempSync(join(tmpdir(), 'mw-bundle-'));
  try {
    const db = join(work, 'store.db');
    const demo = join(work, 'demo.db');
    buildDemoStore(demo);
    const config = join(work, 'warden.yaml');
    writeFileSync(config, `stateDb: ${join(work, 'state.db')}\nstores:\n  demo:\n    db: ${db}\nlog:\n  level: warn\n`);
    const runs = [
      ['--help'],
      ['check', '--db', db, '--json'],
      ['check', '--config', config, '--json'],
      ['run', 'integrity', '--config', config, '--json'],
      ['digest', '--preview', '--config', config],
      ['run', 'prune', '--config', config, '--json'],
      ['erase', '--user', 'user', '--config', config, '--json'],
    ];
    const env = { ...process.env, [CACHE_OUT_ENV]: cacheDir, MEMORY_WARDEN_CONFIG: '', MEMORY_WARDEN_STATE: join(work, 'state.db'), LOG_LEVEL: 'silent' };
    for (const args of runs) {
      copyFileSync(demo, db); // erase and prune change the store: every run gets the same one
      const r = spawnSync(process.execPath, [join(OUT, 'cli.js'), ...args], { env, encoding: 'utf8', stdio: ['ignore', 'ignore', 'pipe'] });
      if (r.status !== 0 && r.status !== 1) throw new Error(`bundle: training run ${args.join(' ')} exited ${r.status}: ${r.stderr.slice(-500)}`);
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return readdirSync(cacheDir).filter((f) => f.endsWith('.v8')).map((f) => join(cacheDir, f));
}

await main();
