import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeStore, tempDir } from './helpers/store.js';

/**
 * What `npm pack` puts in the package, as a user who installs it meets it: every file the README and the docs link
 * to is in it; nothing in it names the folder it was built in; and a verifier plugin kept outside the package (as
 * /etc/memory-warden/plugins/x.mjs is) imports `memory-warden` and runs. The package is packed from this build
 * and unpacked into an application's node_modules, the application's other packages beside it (as npm lays them).
 */
const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** Each relative link target in a Markdown text (no scheme, no bare #anchor), without its #anchor. */
export function linksIn(markdown: string): string[] {
  const targets = [...markdown.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((m) => m[1]!);
  return targets.filter((t) => !/^[a-z][a-z0-9+.-]*:/i.test(t) && !t.startsWith('#')).map((t) => t.replace(/#.*$/, ''));
}

describe('the package as npm packs it', () => {
  let dir: string;
  let cleanup: () => void;
  let files: string[];
  let pkg: string;
  beforeAll(() => {
    ({ dir, cleanup } = tempDir('mw-package-'));
    if (!existsSync(join(ROOT, 'dist/src/cli.js'))) throw new Error('build first: npm run build');
    const packed = spawnSync('npm', ['pack', '--json', '--pack-destination', dir], { cwd: ROOT, encoding: 'utf8', env: { ...process.env, npm_config_loglevel: 'error' } });
    expect(packed.status, packed.stderr).toBe(0);
    const [info] = JSON.parse(packed.stdout) as { filename: string; files: { path: string }[] }[];
    files = info!.files.map((f) => f.path);
    // Installed as an application's dependency: app/node_modules/memory-warden is what the tarball holds.
    const modules = join(dir, 'app/node_modules');
    pkg = join(modules, 'memory-warden');
    mkdirSync(pkg, { recursive: true });
    const untar = spawnSync('tar', ['-xzf', join(dir, info!.filename), '-C', pkg, '--strip-components=1'], { encoding: 'utf8' });
    expect(untar.status, untar.stderr).toBe(0);
    for (const name of readdirSync(join(ROOT, 'node_modules'))) if (!name.startsWith('.')) symlinkSync(join(ROOT, 'node_modules', name), join(modules, name));
  });
  afterAll(() => cleanup?.());

  it('holds every file the README and the docs link to', () => {
    const docs = files.filter((f) => f.endsWith('.md'));
    expect(docs).toEqual(expect.arrayContaining(['README.md', 'docs/README.md', 'docs/worker.md', 'BENCHMARKS.md']));
    const missing: string[] = [];
    for (const doc of docs) {
      for (const target of linksIn(readFileSync(join(pkg, doc), 'utf8'))) {
        const path = normalize(join(dirname(doc), target)).replace(/\/$/, '');
        if (!files.includes(path) && !files.some((f) => f.startsWith(`${path}/`))) missing.push(`${doc} → ${target}`);
      }
    }
    expect(missing).toEqual([]);
    for (const named of ['ecosystem.config.cjs', 'examples/verifier-package-manager/index.mjs', 'config/alerts.yml']) expect(files).toContain(named);
  });

  it('the link reading finds what a page links to', () => {
    expect(linksIn('[a](docs/x.md) [b](../y.md#part) [c](https://example.org/z.md) [d](#here) [e](config/grafana/)')).toEqual(['docs/x.md', '../y.md', 'config/grafana/']);
  });

  it('names no path of the machine it was built on', () => {
    const inside: string[] = [];
    for (const f of files) {
      const bytes = readFileSync(join(pkg, f));
      if (bytes.includes(ROOT.replace(/\/$/, ''))) inside.push(f);
    }
    expect(inside).toEqual([]);
    expect(files.filter((f) => f.endsWith('.v8'))).toEqual([]); // no compiled code: Node's compile cache makes its own
  });

  it('a verifier plugin outside the package, in a folder of its own, imports memory-warden and runs', () => {
    const etc = join(dir, 'etc/memory-warden');
    mkdirSync(join(etc, 'plugins'), { recursive: true });
    writeFileSync(join(etc, 'plugins/x.mjs'), `import { defineVerifier, refuse } from 'memory-warden';
export default defineVerifier({ name: 'outside', async verify(task) { throw refuse('asked ' + task.params.what); } });
`);
    expect(relative(pkg, join(etc, 'plugins/x.mjs')).startsWith('..')).toBe(true);
    for (const bundle of ['1', '0']) {
      // A store and state db of its own for each run: the memory is due for review in both.
      makeStore(join(dir, `memory-${bundle}.db`), [{ id: 'm1', fact: 'x', source: 'ask:1', confirmed_at: '2026-01-01 00:00:00' }]);
      const config = join(etc, `config-${bundle}.yaml`);
      writeFileSync(config, `stateDb: ${join(dir, `state-${bundle}.db`)}\nstores:\n  agent:\n    db: ${join(dir, `memory-${bundle}.db`)}\nverify:\n  plugins: [./plugins/x.mjs]\n  cacheDir: ${join(dir, 'cache')}\n  rules:\n    - match: { source: "^ask:" }\n      use: outside\n      with: { what: "nicely" }\n`);
      const r = spawnSync(process.execPath, [join(pkg, 'dist/src/cli.js'), 'run', 'drift', '--config', config, '--json'], {
        cwd: dir, encoding: 'utf8', env: { ...process.env, LOG_LEVEL: 'silent', MEMORY_WARDEN_CONFIG: '', MEMORY_WARDEN_BUNDLE: bundle },
      });
      expect(r.status, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout)).toMatchObject({ verdicts: [{ id: 'm1', verdict: 'refused', verifier: 'outside', reason: 'asked nicely' }] });
    }
  });
});
