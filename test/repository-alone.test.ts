import { describe, expect, it } from 'vitest';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { besideTheClone, isOutside, REPO_ROOT, takeOutsideReads } from './helpers/outside-reads.js';

/**
 * A clone with nothing beside it passes its tests: nothing the tests, scripts, benchmarks or CI use is read from
 * outside the repository. Two checks: every file of those names no path that leaves the root (below), and every
 * test file runs with node:fs guarded (test/helpers/outside-reads.setup.ts), which fails it when a read went out.
 * What neither sees (a path put together at run time in a child process or a shell step) shows when .ci/run runs
 * from a clone in an empty folder.
 */
const root = REPO_ROOT;
const FOLDERS = ['test', 'scripts', 'bench', '.ci', 'examples', 'jobs'];
// Compiled to dist/<folder>/ and run from there: their ../ counts from that folder.
const COMPILED = ['scripts', 'bench', 'jobs'];
const FILES = ['package.json', 'vitest.config.ts', 'tsconfig.json', 'tsconfig.test.json', 'ecosystem.config.cjs', '.dependency-cruiser.cjs', '.npmrc'];
// Places machines keep things next to a checkout; the folder the root sits in is added below.
const BESIDE = ['/work', '/opt', '/root', '/mnt', '/media', '/Users'];
// Named without being read: systemd's ProtectHome= folders, which the sandbox of test/ops/systemd-unit.test.ts
// mounts over inside a mount namespace of its own.
const NAMED_NOT_READ: Record<string, string[]> = { 'test/ops/systemd-sandbox.sh': ['/root'] };

const within = (path: string, dir: string) => path === dir || path.startsWith(`${dir}/`);

function filesUnder(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((d) => d.isFile())
    .map((d) => join(d.parentPath, d.name))
    // The vendored data, and this file (its own examples below are paths that leave the root).
    .filter((f) => !relative(root, f).startsWith(join('test', 'vendor')) && f !== import.meta.filename && !/\.(png|db|sqlite|v8)$/.test(f));
}

/**
 * Each path in `text` that leaves the root: an absolute path beside it, or a run of ../ that climbs out. In code a
 * ../ counts from where the line anchors it: the file's own folder (an import, import.meta, __dirname) or the root
 * (a line naming root); a ../ on any other line of code is data relative to something else (a snapshot folder in
 * a hostile manifest) and is not looked at. In a shell step, package.json or a config it counts from the file.
 */
export function pathsLeavingRoot(file: string, text: string, rootDir = root): string[] {
  const beside = [...BESIDE, dirname(rootDir)].filter((p) => p !== '/' && p !== tmpdir());
  const rel = relative(rootDir, dirname(file));
  const fileDir = COMPILED.includes(rel.split('/')[0]!) ? join(rootDir, 'dist', rel) : dirname(file);
  const code = /\.(ts|mts|cts|js|mjs|cjs)$/.test(file);
  const found: string[] = [];
  for (const line of text.split('\n')) {
    const from = !code || /import\.meta|__dirname|\bfrom ['"]|\bimport\(|\brequire\(/.test(line) ? fileDir : /\broot\b/i.test(line) ? rootDir : undefined;
    for (const m of line.matchAll(/(?:\.\.\/)+[\w.@${}/-]*|(?:^|[^\w.:/$}])(\/[\w.@-]+(?:\/[\w.@${}-]*)*)/g)) {
      const token = m[1] ?? m[0];
      if (token.startsWith('../')) {
        const target = from === undefined ? rootDir : resolve(from, token);
        if (target !== rootDir && !target.startsWith(`${rootDir}/`)) found.push(token);
      } else if (beside.some((p) => within(token, p)) && !within(token, tmpdir())) { // a temp file is no place beside
        found.push(token);
      }
    }
  }
  return found;
}

describe('a clone with nothing beside it', () => {
  it('no test, script, benchmark, example, CI step or config names a path outside the repository', () => {
    const files = [...FOLDERS.flatMap((d) => filesUnder(join(root, d))), ...FILES.map((f) => join(root, f)).filter((f) => existsSync(f))];
    expect(files.length).toBeGreaterThan(100); // it really read the tree
    const leaving = files.flatMap((f) => pathsLeavingRoot(f, readFileSync(f, 'utf8')).filter((p) => !NAMED_NOT_READ[relative(root, f)]?.includes(p)).map((p) => `${relative(root, f)}: ${p}`));
    expect(leaving).toEqual([]);
  });

  it('the scan finds what a test or CI step reading beside the clone would say', () => {
    // A clone at a fixed place, not this one: what the scan reports must not depend on where the checkout lives.
    const at = '/srv/clones/memory-warden';
    const test = join(at, 'test/helpers/openapi.ts');
    expect(pathsLeavingRoot(test, `readFileSync(new URL('../../../beside/qdrant/openapi.json', import.meta.url))`, at)).toEqual(['../../../beside/qdrant/openapi.json']);
    expect(pathsLeavingRoot(join(at, '.ci/run'), 'export PATH=/opt/node24/package/bin:$PATH', at)).toEqual(['/opt/node24/package/bin']);
    expect(pathsLeavingRoot(join(at, 'package.json'), '"bench": "node ../elsewhere/dist/bench/run.js"', at)).toEqual(['../elsewhere/dist/bench/run.js']);
    expect(pathsLeavingRoot(join(at, 'bench/run.ts'), `join(import.meta.dirname, '../../..', 'beside')`, at)).toEqual(['../../..']); // from dist/bench
    expect(pathsLeavingRoot(join(at, 'bench/run.ts'), `join(import.meta.dirname, '../..')`, at)).toEqual([]);
    expect(pathsLeavingRoot(join(at, 'scripts/x.ts'), `readFileSync('/work/beside/BRIEF.md')`, at)).toEqual(['/work/beside/BRIEF.md']);
    expect(pathsLeavingRoot(join(at, 'test/x.test.ts'), `join('/srv/clones/other/file')`, at)).toEqual(['/srv/clones/other/file']); // beside the clone
    expect(pathsLeavingRoot(join(at, 'test/x.test.ts'), `const ROOT = join(import.meta.dirname, '..');\nreadFileSync(join(ROOT, '../beside/x.json'))`, at)).toEqual(['../beside/x.json']);
    // Inside, in a temporary folder, or data that names no real place: not reported.
    expect(pathsLeavingRoot(join(at, 'test/erase/x.test.ts'), `writeFileSync(join(outside, 'manifest.json'), JSON.stringify({ sqlite: { file: '../../../state.db' } }))`, at)).toEqual([]);
    expect(pathsLeavingRoot(test, `import { x } from '../../src/config.js'; const db = '/var/lib/agent/memory.db'; join(tmp, '/tmp/x')`, at)).toEqual([]);
    // A clone in the temporary folder: its siblings are other processes' temp files, not things beside a clone.
    const inTmp = join(tmpdir(), 'ci-clone');
    expect(pathsLeavingRoot(join(inTmp, 'test/x.test.ts'), `join('${tmpdir()}/other/file')`, inTmp)).toEqual([]);
    expect(pathsLeavingRoot(join(inTmp, 'test/x.test.ts'), `readFileSync('/work/beside/BRIEF.md')`, inTmp)).toEqual(['/work/beside/BRIEF.md']);
  });

  it('the guard records a read outside, beside the clone or elsewhere, and only that', () => {
    expect(takeOutsideReads()).toEqual([]); // nothing before
    const expected: string[] = [];
    const beside = besideTheClone(); // none for a clone right in / or the temporary folder: siblings are temp files
    if (beside !== undefined) {
      const missing = join(beside, `nothing-beside-the-clone-${process.pid}`);
      expect(() => readFileSync(missing)).toThrow(/ENOENT/);
      expect(existsSync(join(beside, `also-beside-${process.pid}`))).toBe(false);
      expected.push(missing, join(beside, `also-beside-${process.pid}`));
    }
    expect(readdirSync('/var/lib').length).toBeGreaterThan(0); // a machine's own state, there on any Linux: listed
    expected.push('/var/lib');
    expect(statSync('/var/lib').isDirectory()).toBe(true); // only tested: not a read (resolving a data path's links)
    existsSync('/var/lib/nothing-here-at-all');
    readFileSync(join(root, 'package.json'));
    existsSync(join(tmpdir(), 'x'));
    statSync('/');
    expect(takeOutsideReads()).toEqual(expected.sort());
    expect(isOutside(join(root, 'test/vendor/qdrant/openapi.json'))).toBe(false);
    expect(isOutside('/srv/nowhere/agent/memory.db')).toBe(false); // a config's data path that exists nowhere
    expect(isOutside(process.execPath)).toBe(false);
    expect(isOutside(dirname(root))).toBe(false); // walked up through
  });
});
