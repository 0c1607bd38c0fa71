import { describe, expect, it } from 'vitest';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { REPO_ROOT } from './helpers/outside-reads.js';

/**
 * `npm test` brings every program the suite starts: scripts/test-services.sh (npm's `pretest`) names each with the
 * package that brings it, and installs what is missing. This reads every child process the tests, their helpers and
 * the code under test start (spawn, execFile and their Sync and promisified forms; a browser's executablePath) and
 * fails on a program the script does not bring, so a test that starts a new one fails here on any machine, not only
 * on a fresh one. A program whose name the reading cannot tell (built at run time) fails too: name it in a constant.
 */
const root = REPO_ROOT;
const SCRIPT = join(root, 'scripts/test-services.sh');
// What the tests run is read here: the tests, the example's test, and the code they run (the CLI starts git).
const FOLDERS = ['test', 'examples', 'src', 'jobs'];

// Debian's Essential packages are on every Debian system, so the script needs not bring them: bash, coreutils,
// grep, util-linux and bsdutils' script(1).
const ESSENTIAL: Record<string, string> = {
  bash: 'bash', unshare: 'util-linux', tar: 'tar', mkfifo: 'coreutils', mknod: 'coreutils', cp: 'coreutils', chown: 'coreutils', sync: 'coreutils', grep: 'grep', script: 'bsdutils',
};

const SPAWNERS = new Set(['spawn', 'spawnSync', 'execFile', 'execFileSync', 'exec', 'execSync']);
const SHELL = new Set(['exec', 'execSync']); // a command line: its first word is the program

/** The programs scripts/test-services.sh brings: `need PACKAGE PROGRAM...` and `need_pip REQUIREMENT PROGRAM...`. */
export function broughtBy(script: string): Map<string, string> {
  const brought = new Map<string, string>();
  for (const line of script.split('\n')) {
    const m = /^need(?:_pip)? +(\S+) +(.+)$/.exec(line.trim());
    if (!m) continue;
    for (const p of m[2]!.replace(/#.*$/, '').trim().split(/ +/)) brought.set(p.replace(/^'(.*)'$/, '$1'), m[1]!);
  }
  return brought;
}

export interface Spawned {
  at: string; // file:line
  program: string | undefined; // undefined: not told by the source (process.execPath is 'node')
}

/** Every child process a source file starts, and the program it names. */
export function spawnedIn(file: string, text: string): Spawned[] {
  const src = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const constants = new Map<string, string>();
  const spawners = new Set<string>();
  const shell = new Set<string>();
  const visitDecls = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier) && /^(node:)?child_process$/.test(node.moduleSpecifier.text)) {
      const named = node.importClause?.namedBindings;
      if (named && ts.isNamedImports(named)) {
        for (const el of named.elements) {
          const imported = (el.propertyName ?? el.name).text;
          if (SPAWNERS.has(imported)) spawners.add(el.name.text);
          if (SHELL.has(imported)) shell.add(el.name.text);
        }
      }
    }
    if (ts.isVariableDeclaration(node) && ts.isIdentifier(node.name) && node.initializer) {
      const init = node.initializer;
      if (ts.isStringLiteralLike(init)) constants.set(node.name.text, init.text);
      // const run = promisify(execFile)
      if (ts.isCallExpression(init) && ts.isIdentifier(init.expression) && init.expression.text === 'promisify') {
        const arg = init.arguments[0];
        if (arg && ts.isIdentifier(arg) && spawners.has(arg.text)) {
          spawners.add(node.name.text);
          if (shell.has(arg.text)) shell.add(node.name.text);
        }
      }
    }
    ts.forEachChild(node, visitDecls);
  };
  visitDecls(src);
  const found: Spawned[] = [];
  const at = (node: ts.Node) => `${relative(root, file)}:${src.getLineAndCharacterOfPosition(node.getStart()).line + 1}`;
  const programs = (e: ts.Expression, isShell: boolean): (string | undefined)[] => {
    if (ts.isParenthesizedExpression(e)) return programs(e.expression, isShell);
    if (ts.isConditionalExpression(e)) return [...programs(e.whenTrue, isShell), ...programs(e.whenFalse, isShell)];
    if (ts.isPropertyAccessExpression(e) && e.getText() === 'process.execPath') return ['node'];
    const text = ts.isStringLiteralLike(e) ? e.text : ts.isIdentifier(e) ? constants.get(e.text) : undefined;
    if (text === undefined) return [undefined];
    return [isShell ? text.trim().split(/\s+/)[0] : text];
  };
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node) && ts.isIdentifier(node.expression) && spawners.has(node.expression.text) && node.arguments[0]) {
      for (const program of programs(node.arguments[0], shell.has(node.expression.text))) found.push({ at: at(node), program });
    }
    // playwright's chromium.launch({ executablePath: '/usr/bin/chromium' })
    if (ts.isPropertyAssignment(node) && ts.isIdentifier(node.name) && node.name.text === 'executablePath') {
      for (const program of programs(node.initializer, false)) found.push({ at: at(node), program });
    }
    ts.forEachChild(node, visit);
  };
  visit(src);
  return found;
}

/** Whether `program` (a name, or an absolute path) is one of `brought` (names, absolute paths, globs of paths). */
function isBrought(program: string, brought: Map<string, string>): boolean {
  if (brought.has(program)) return true;
  const glob = (g: string) => new RegExp(`^${g.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*')}$`);
  return [...brought.keys()].some((b) => b.includes('*') && glob(b).test(program));
}

function sourcesUnder(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((d) => d.isFile() && /\.(ts|mts|cts|mjs|cjs|js)$/.test(d.name) && !d.name.endsWith('.d.ts'))
    .map((d) => join(d.parentPath, d.name))
    .filter((f) => !relative(root, f).startsWith(join('test', 'vendor')) && !relative(root, f).startsWith(join('src', 'vendor')));
}

describe('npm test brings the programs the tests start', () => {
  it('every program a test, its helpers or the code under test starts is brought by scripts/test-services.sh or is Essential in Debian', () => {
    const brought = broughtBy(readFileSync(SCRIPT, 'utf8'));
    const sources = FOLDERS.flatMap((d) => sourcesUnder(join(root, d))).map((f) => [f, readFileSync(f, 'utf8')] as const);
    const spawned = sources.filter(([, text]) => /child_process|executablePath/.test(text)).flatMap(([f, text]) => spawnedIn(f, text));
    expect(spawned.length).toBeGreaterThan(50); // it really read the calls
    const programs = new Set(spawned.map((s) => s.program));
    for (const known of ['redis-sentinel', '/usr/sbin/sshd', 'promtool', '/usr/bin/chromium', 'git', 'moto_server']) expect(programs).toContain(known);

    const untold = spawned.filter((s) => s.program === undefined).map((s) => s.at);
    expect(untold, 'a child process whose program this cannot tell: name it in a constant').toEqual([]);
    // node and npm: the Node.js that runs the suite
    const missing = spawned.filter((s) => s.program !== 'node' && s.program !== 'npm' && !(s.program! in ESSENTIAL) && !isBrought(s.program!, brought));
    expect(missing.map((s) => `${s.at}: ${s.program}`), 'add it to scripts/test-services.sh with the package that brings it').toEqual([]);
  });

  it('the reading finds what a new test would start, and the script check finds what it lacks', () => {
    const file = join(root, 'test/x.test.ts');
    const text = [
      `import { spawn as start, execFileSync } from 'node:child_process';`,
      `import { promisify } from 'node:util';`,
      `import { execFile } from 'node:child_process';`,
      `const run = promisify(execFile);`,
      `const TOOL = '/usr/bin/newtool';`,
      `start('redis-server', []); execFileSync(TOOL, []); run(process.execPath, ['x']);`,
      `start(sentinel ? 'redis-sentinel' : 'redis-server', [conf]);`,
      `start(pick(), []); db.exec('BEGIN'); chromium.launch({ executablePath: '/usr/bin/chromium' });`,
    ].join('\n');
    expect(spawnedIn(file, text).map((s) => s.program)).toEqual(['redis-server', '/usr/bin/newtool', 'node', 'redis-sentinel', 'redis-server', undefined, '/usr/bin/chromium']);
    const brought = broughtBy(`need redis-server   redis-server\nneed postgresql     '/usr/lib/postgresql/*/bin/postgres' pg_isready\nneed_pip 'moto[server]==5.2.1' moto_server\n`);
    expect([...brought]).toEqual([['redis-server', 'redis-server'], ['/usr/lib/postgresql/*/bin/postgres', 'postgresql'], ['pg_isready', 'postgresql'], ['moto_server', "'moto[server]==5.2.1'"]]);
    expect(isBrought('/usr/lib/postgresql/15/bin/postgres', brought)).toBe(true);
    expect(isBrought('/usr/bin/newtool', brought)).toBe(false);
    expect(isBrought('redis-sentinel', brought)).toBe(false);
  });

  it('.ci/run runs exactly the README test command, and npm runs the script before the tests', () => {
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    expect(pkg.scripts.pretest).toBe('bash scripts/test-services.sh');
    const ci = readFileSync(join(root, '.ci/run'), 'utf8');
    expect(ci).toMatch(/^\s*npm test\b/m);
    expect(readFileSync(join(root, 'README.md'), 'utf8')).toMatch(/^npm test\b/m);
  });
});
