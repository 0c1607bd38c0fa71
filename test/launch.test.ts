import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import Module from 'node:module';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BUNDLE_ENTRY, BUNDLE_MANIFEST, BUNDLE_SEEN, currentBundle, sha256File, type BundleManifest } from '../src/launch.js';
import { makeStore, tempDir } from './helpers/store.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TRACE_HOOK = fileURLToPath(new URL('./helpers/load-trace.mjs', import.meta.url));

describe('currentBundle: the bundle runs only while it is the build of the files as they are', () => {
  let dir: string;
  let cleanup: () => void;
  let src: string;
  const files = ['dist/src/a.js', 'dist/src/b.js', 'node_modules/pkg/index.js', `dist/src/${BUNDLE_ENTRY}`, 'dist/src/cli-chunk-x.cjs'];

  /** A package root with a manifest stamping each file as it is now. */
  const build = () => {
    rmSync(join(dir, 'pkg'), { recursive: true, force: true });
    const manifest: BundleManifest = { files: {}, chunks: { [BUNDLE_ENTRY]: ['dist/src/a.js'], 'cli-chunk-x.cjs': ['dist/src/b.js', 'node_modules/pkg/index.js'] } };
    for (const f of files) {
      const path = join(dir, 'pkg', f);
      mkdirSync(join(path, '..'), { recursive: true });
      writeFileSync(path, `// ${f}\n`);
      utimesSync(path, 1_700_000_000, 1_700_000_000.123);
    }
    for (const f of files) {
      const path = join(dir, 'pkg', f);
      const st = statSync(path);
      manifest.files[f] = [st.size, st.mtimeMs, sha256File(path)];
    }
    writeFileSync(join(dir, 'pkg/dist/src', BUNDLE_MANIFEST), JSON.stringify(manifest));
    writeFileSync(join(dir, 'pkg/node_modules/pkg/package.json'), '{}'); // a package, as Node looks for one
  };
  const at = (f: string) => join(dir, 'pkg', f);
  const current = () => currentBundle(at('dist/src'));

  beforeAll(() => {
    ({ dir, cleanup } = tempDir('mw-launch-'));
    src = at('dist/src');
  });
  afterAll(() => cleanup());

  it('everything as stamped: the entry', () => {
    build();
    expect(current()?.entry).toBe(join(src, BUNDLE_ENTRY));
  });

  it('times changed, contents the same (a copy that did not keep times): still current', () => {
    build();
    for (const f of files) utimesSync(at(f), new Date(), new Date());
    expect(current()?.entry).toBe(join(src, BUNDLE_ENTRY));
  });

  it('a package installed without its times (npm sets each to the install\'s): hashed once, then taken as checked', () => {
    build();
    const installed = new Date();
    for (const f of files) utimesSync(at(f), installed, installed);
    expect(current()?.hashed).toBe(files.length);
    expect(existsSync(join(src, BUNDLE_SEEN))).toBe(true);
    expect(current()?.hashed).toBe(0);
    // One file touched again (its content the same): only it is read again.
    utimesSync(at('dist/src/b.js'), new Date(installed.getTime() + 5000), new Date(installed.getTime() + 5000));
    expect(current()?.hashed).toBe(1);
    expect(current()?.hashed).toBe(0);
  });

  it('after a record of what was checked, any change still counts: edited, grown, removed, rebuilt, record broken', () => {
    const installedCopy = () => {
      build();
      for (const f of files) utimesSync(at(f), new Date(), new Date());
      expect(current()?.hashed).toBe(files.length);
    };
    for (const f of files) {
      installedCopy();
      writeFileSync(at(f), readFileSync(at(f), 'utf8').replace('//', '/*')); // same size, a new mtime
      expect(current(), `${f} edited`).toBeUndefined();
      installedCopy();
      writeFileSync(at(f), `${readFileSync(at(f), 'utf8')}x`);
      expect(current(), `${f} grown`).toBeUndefined();
      installedCopy();
      rmSync(at(f));
      expect(current(), `${f} removed`).toBeUndefined();
    }
    // An edit that keeps size and puts the checked mtime back is as invisible as one that puts the build's back.
    // A record made for another build (another manifest) is not used: everything is read again.
    installedCopy();
    const manifest = JSON.parse(readFileSync(join(src, BUNDLE_MANIFEST), 'utf8')) as BundleManifest;
    writeFileSync(join(src, BUNDLE_MANIFEST), JSON.stringify({ ...manifest, cached: ['cli-chunk-x.cjs'] }));
    expect(current()?.hashed).toBe(files.length);
    for (const broken of ['{"manifest": ', '[]', '{"manifest": "x", "files": null}', 'null']) {
      installedCopy();
      writeFileSync(join(src, BUNDLE_SEEN), broken);
      expect(current()?.hashed, broken).toBe(files.length);
      expect(current()?.hashed, broken).toBe(0); // and written again
    }
  });

  it('a package directory that cannot be written: the record goes to the user\'s cache directory', () => {
    const cache = join(dir, 'xdg-cache');
    const was = process.env.XDG_CACHE_HOME;
    process.env.XDG_CACHE_HOME = cache;
    try {
      build();
      mkdirSync(join(src, BUNDLE_SEEN)); // as unwritable as it gets for root: a directory in its place
      for (const f of files) utimesSync(at(f), new Date(), new Date());
      expect(current()?.hashed).toBe(files.length);
      expect(readdirSync(join(cache, 'memory-warden')).filter((f) => f.endsWith('.seen.json'))).toHaveLength(1);
      expect(current()?.hashed).toBe(0);
      writeFileSync(at('dist/src/a.js'), readFileSync(at('dist/src/a.js'), 'utf8').replace('//', '/*'));
      expect(current()).toBeUndefined();
      // Neither place writable: every start hashes, and still runs the bundle.
      rmSync(cache, { recursive: true });
      writeFileSync(cache, '');
      build();
      mkdirSync(join(src, BUNDLE_SEEN));
      for (const f of files) utimesSync(at(f), new Date(), new Date());
      expect(current()?.hashed).toBe(files.length);
      expect(current()?.hashed).toBe(files.length);
    } finally {
      if (was === undefined) delete process.env.XDG_CACHE_HOME;
      else process.env.XDG_CACHE_HOME = was;
      rmSync(cache, { recursive: true, force: true });
    }
  });

  it('a bundled package found where Node finds it from dist/src/: hoisted above the package, the nearest copy first', () => {
    build();
    mkdirSync(join(dir, 'node_modules'));
    renameSync(at('node_modules/pkg'), join(dir, 'node_modules/pkg'));
    const hoisted = join(dir, 'node_modules/pkg/index.js');
    expect(current()?.entry).toBe(join(src, BUNDLE_ENTRY));
    writeFileSync(hoisted, readFileSync(hoisted, 'utf8').replace('//', '/*'));
    expect(current()).toBeUndefined();
    // A copy under the package itself is the one Node loads, and the one checked: the hoisted one is not.
    build();
    expect(current()?.entry).toBe(join(src, BUNDLE_ENTRY));
    rmSync(at('node_modules/pkg/index.js'));
    expect(current()).toBeUndefined();
    // Nowhere to be found: not current.
    build();
    rmSync(at('node_modules/pkg'), { recursive: true });
    rmSync(join(dir, 'node_modules'), { recursive: true });
    expect(current()).toBeUndefined();
  });

  it('a scoped package (`@scope/name`) is looked for the same way', () => {
    build();
    const file = join(dir, 'node_modules/@scope/pkg/lib/index.js');
    mkdirSync(join(file, '..'), { recursive: true });
    writeFileSync(join(dir, 'node_modules/@scope/pkg/package.json'), '{}');
    writeFileSync(file, '// scoped\n');
    const manifest = JSON.parse(readFileSync(join(src, BUNDLE_MANIFEST), 'utf8')) as BundleManifest;
    const st = statSync(file);
    manifest.files['node_modules/@scope/pkg/lib/index.js'] = [st.size, st.mtimeMs, sha256File(file)];
    writeFileSync(join(src, BUNDLE_MANIFEST), JSON.stringify(manifest));
    expect(current()?.entry).toBe(join(src, BUNDLE_ENTRY));
    writeFileSync(file, '// SCOPED\n');
    expect(current()).toBeUndefined();
    rmSync(join(dir, 'node_modules'), { recursive: true });
    expect(current()).toBeUndefined();
  });

  it('an input or a chunk changed, removed, grown or replaced: not current', () => {
    const edits: [string, (p: string) => void][] = [
      ['same size, new content (tsc after an edit)', (p) => writeFileSync(p, readFileSync(p, 'utf8').replace('//', '/*').replace(/\n$/, '\n'))],
      ['longer', (p) => writeFileSync(p, `${readFileSync(p, 'utf8')}x`)],
      ['removed', (p) => rmSync(p)],
      ['a directory now', (p) => {
        rmSync(p);
        mkdirSync(p);
      }],
    ];
    for (const f of files) {
      for (const [what, edit] of edits) {
        build();
        edit(at(f));
        expect(current(), `${f}: ${what}`).toBeUndefined();
      }
    }
  });

  it('no manifest, or one that is not JSON: not current', () => {
    build();
    rmSync(join(src, BUNDLE_MANIFEST));
    expect(current()).toBeUndefined();
    writeFileSync(join(src, BUNDLE_MANIFEST), '{"files": {');
    expect(current()).toBeUndefined();
  });
});

describe('the built CLI and its bundle (scripts/bundle.ts)', () => {
  let dir: string;
  let cleanup: () => void;
  beforeAll(() => {
    ({ dir, cleanup } = tempDir('mw-launch-cli-'));
    if (!existsSync(join(ROOT, 'dist/src', BUNDLE_MANIFEST))) throw new Error('build first: npm run build');
  });
  afterAll(() => cleanup());

  /** A copy of the package (dist/src, config, package.json; node_modules linked), copied without keeping times. */
  const copy = (name: string) => {
    const pkg = join(dir, name);
    cpSync(join(ROOT, 'dist/src'), join(pkg, 'dist/src'), { recursive: true });
    cpSync(join(ROOT, 'dist/jobs'), join(pkg, 'dist/jobs'), { recursive: true });
    cpSync(join(ROOT, 'config'), join(pkg, 'config'), { recursive: true });
    cpSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
    symlinkSync(join(ROOT, 'node_modules'), join(pkg, 'node_modules'));
    return pkg;
  };
  const run = (pkg: string, args: string[], env: Record<string, string> = {}) => {
    const trace = join(dir, `trace-${Math.random().toString(36).slice(2)}`);
    const r = spawnSync(process.execPath, ['--import', TRACE_HOOK, join(pkg, 'dist/src/cli.js'), ...args], {
      encoding: 'utf8',
      env: { ...process.env, LOG_LEVEL: 'silent', MEMORY_WARDEN_CONFIG: '', MEMORY_WARDEN_STATE: join(dir, 'state.db'), ...env, LOAD_TRACE_OUT: trace },
    });
    const loaded = existsSync(trace) ? readFileSync(trace, 'utf8') : '';
    return { ...r, bundled: loaded.includes(join(pkg, 'dist/src', BUNDLE_ENTRY)), program: loaded.includes(join(pkg, 'dist/src/program.js')) };
  };

  it('a copy runs its bundle, and prints what the modules print', () => {
    const pkg = copy('same');
    const bundled = run(pkg, ['--help']);
    const modules = run(pkg, ['--help'], { MEMORY_WARDEN_BUNDLE: '0' });
    expect(bundled.status, bundled.stderr).toBe(0);
    expect([bundled.bundled, bundled.program]).toEqual([true, false]);
    expect([modules.bundled, modules.program]).toEqual([false, true]);
    expect(bundled.stdout).toBe(modules.stdout);
    expect(bundled.stdout).toMatch(/^ {2}erase\b/m);
    // The copy's files are newer than the build: the first start read them and recorded it; the next runs the bundle
    // from that record, and an edit after it is still seen.
    expect(existsSync(join(pkg, 'dist/src', BUNDLE_SEEN))).toBe(true);
    const again = run(pkg, ['--help']);
    expect([again.bundled, again.stdout]).toEqual([true, modules.stdout]);
    writeFileSync(join(pkg, 'dist/src/program.js'), readFileSync(join(pkg, 'dist/src/program.js'), 'utf8').replace("keeps AI agents", "KEEPS AI agents"));
    const edited = run(pkg, ['--help']);
    expect([edited.bundled, edited.program]).toEqual([false, true]);
    expect(edited.stdout).toContain('KEEPS AI agents');
  });

  it('installed as an application\'s dependency (its packages hoisted beside it): runs its bundle', () => {
    // app/node_modules/memory-warden is the package; every other package is the application's, one level up.
    const modules = join(dir, 'app/node_modules');
    mkdirSync(modules, { recursive: true });
    for (const name of readdirSync(join(ROOT, 'node_modules'))) if (name !== 'memory-warden') symlinkSync(join(ROOT, 'node_modules', name), join(modules, name));
    const pkg = join(modules, 'memory-warden');
    for (const part of ['dist/src', 'dist/jobs', 'config', 'package.json']) cpSync(join(ROOT, part), join(pkg, part), { recursive: true });
    const bundled = run(pkg, ['--help']);
    expect(bundled.status, bundled.stderr).toBe(0);
    expect([bundled.bundled, bundled.program]).toEqual([true, false]);
    expect(bundled.stdout).toBe(run(pkg, ['--help'], { MEMORY_WARDEN_BUNDLE: '0' }).stdout);
  });

  it('the build ships no compiled code: no V8 code cache beside the chunks, none named in the manifest', () => {
    const files = readdirSync(join(ROOT, 'dist/src'), { recursive: true }).map(String);
    expect(files.filter((f) => /\.v8$|cli-bundle\.cache/.test(f))).toEqual([]);
    const manifest = JSON.parse(readFileSync(join(ROOT, 'dist/src', BUNDLE_MANIFEST), 'utf8')) as Record<string, unknown>;
    expect(Object.keys(manifest).sort()).toEqual(['chunks', 'files']);
  });

  it('on Node 22.1+ the chunks a command loads go through Node\'s compile cache: the second start reads them from it', () => {
    const pkg = copy('compile-cache');
    const cache = join(dir, 'node-compile-cache');
    const db = join(dir, 'cc.db');
    makeStore(db, [{ id: 'a', fact: 'x' }]);
    const start = () => run(pkg, ['check', '--db', db, '--json'], { NODE_COMPILE_CACHE: cache, NODE_DEBUG_NATIVE: 'COMPILE_CACHE' });
    const first = start();
    expect([0, 1], first.stderr).toContain(first.status);
    const second = start();
    expect(second.bundled).toBe(true);
    // Node's own debug lines: "[compile cache] reading cache from … for CommonJS …/cli-chunk-….cjs … success"
    const readChunks = second.stderr.split('\n').filter((l) => /reading cache from .* for CommonJS .*\/dist\/src\/cli-(bundle|chunk-)[^/]*\.cjs.*success/.test(l));
    if ('enableCompileCache' in Module) expect(readChunks.length).toBeGreaterThan(0);
    else expect(readChunks).toEqual([]); // Node 20: no compile cache; the chunks compile at every start
    expect(second.status, second.stderr).toBe(first.status);
  });

  it('after an edit of a module (tsc without the bundler), the CLI runs the edited modules, not the old bundle', () => {
    const pkg = copy('edited');
    const program = join(pkg, 'dist/src/program.js');
    const text = readFileSync(program, 'utf8');
    expect(text).toContain('memory stores honest');
    writeFileSync(program, text.replace('memory stores honest', 'EDITED DESCRIPTION'));
    const r = run(pkg, ['--help']);
    expect(r.status, r.stderr).toBe(0);
    expect([r.bundled, r.program]).toEqual([false, true]);
    expect(r.stdout).toContain('EDITED DESCRIPTION');
  });

  it('with a chunk gone, the CLI runs the modules instead of failing halfway through a command', () => {
    const pkg = copy('chunkless');
    const manifest = JSON.parse(readFileSync(join(pkg, 'dist/src', BUNDLE_MANIFEST), 'utf8')) as BundleManifest;
    const lazy = Object.keys(manifest.chunks).find((c) => c !== BUNDLE_ENTRY && manifest.chunks[c]!.includes('dist/src/erase/erase.js'))!;
    expect(lazy).toBeDefined();
    rmSync(join(pkg, 'dist/src', lazy));
    const r = run(pkg, ['erase', '--help']);
    expect(r.status, r.stderr).toBe(0);
    expect([r.bundled, r.program]).toEqual([false, true]);
  });
});
