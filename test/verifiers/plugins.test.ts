import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { spawnSync } from 'node:child_process';
import { loadConfig } from '../../src/config/config.js';
import { loadPlugins } from '../../src/verifiers/plugins.js';
import { createRegistry } from '../../src/verifiers/registry.js';
import { drift } from '../../jobs/drift.js';
import { pendingItems, verdictsFor } from '../../src/drift/record.js';
import { daysAgo, insertRows, jobContext, sandbox, withState, type Sandbox } from '../drift/helpers.js';

const PACKAGE_ROOT = resolve(import.meta.dirname, '../..');
const CLI = join(PACKAGE_ROOT, 'dist/src/cli.js');

/** A plugin exactly as a user writes one: a module of their own importing the package by name. */
const LOCKFILE_PLUGIN = `
import { readdir } from 'node:fs/promises';
import { defineVerifier } from 'memory-warden';

const LOCKS = { 'pnpm-lock.yaml': 'pnpm', 'package-lock.json': 'npm', 'yarn.lock': 'yarn' };

export default defineVerifier({
  name: 'lockfile',
  async verify(task, ctx) {
    const dir = await ctx.resolveFile(task.params.dir);
    const names = await ctx.once('lockfile:' + dir, () => readdir(dir));
    const found = names.filter((n) => n in LOCKS).map((n) => LOCKS[n]);
    if (found.length !== 1) return { verdict: 'unverifiable', reason: 'lockfiles found: ' + (found.join(', ') || 'none') };
    return { value: found[0], evidence: { dir } };
  },
});
`;

describe('verifier plugins', () => {
  let box: Sandbox;
  beforeAll(() => {
    if (!existsSync(join(PACKAGE_ROOT, 'dist/src/index.js'))) throw new Error('build first (npx tsc -p .): plugins import the built package');
  });
  const freshBox = () => {
    box = sandbox();
    mkdirSync(join(box.dir, 'node_modules'));
    symlinkSync(PACKAGE_ROOT, join(box.dir, 'node_modules', 'memory-warden'));
    mkdirSync(join(box.dir, 'plugins'));
  };
  beforeEach(freshBox);
  afterEach(() => box.cleanup());

  /** The sandbox's config file: its store, state db and verifier cache, then `verify` (indented) as given. */
  const writeConfig = (verify: string) => {
    const file = join(box.dir, 'warden.yaml');
    writeFileSync(file, `stateDb: ./state.db\nstores:\n  agent:\n    db: ./memory.db\nverify:\n  cacheDir: ./cache\n${verify}`);
    return file;
  };
  const plugin = (name: string, text: string) => {
    const file = join(box.dir, 'plugins', name);
    writeFileSync(file, text);
    return file;
  };

  it('loads a plugin listed in a config file, next to the built-ins, and runs it beside a thrower and a hanger', async () => {
    plugin('lockfile.mjs', LOCKFILE_PLUGIN);
    plugin(
      'thrower.mjs',
      `import { defineVerifier } from 'memory-warden';
       export default defineVerifier({ name: 'thrower', async verify() { throw new Error('boom: upstream said no'); } });`,
    );
    plugin(
      'hanger.mjs',
      `import { defineVerifier } from 'memory-warden';
       export default defineVerifier({ name: 'hanger', verify: () => new Promise(() => {}) });`,
    );
    for (const p of ['web', 'api']) mkdirSync(join(box.dir, 'repos', p), { recursive: true });
    writeFileSync(join(box.dir, 'repos/web/pnpm-lock.yaml'), '');
    writeFileSync(join(box.dir, 'repos/api/package-lock.json'), '{}');
    const configFile = writeConfig(
      `  plugins: [./plugins/lockfile.mjs, ./plugins/thrower.mjs, ./plugins/hanger.mjs]
  allow:
    fileRoots: [./repos]
  rules:
    - name: package manager
      match: { source: "^repo:(?<dir>[a-z]+)$", subject: "^package manager$", fact: "^prefers (?<pm>[a-z]+)$" }
      use: lockfile
      with: { dir: "\${dir}", expect: "^\${pm}$" }
      replacement: "prefers \${value}"
      autoSupersede: true
    - match: { source: "^flaky:" }
      use: thrower
    - match: { source: "^slow:" }
      use: hanger
      timeoutMs: 200
`,
    );
    insertRows(box.dbPath, [
      { id: 'm_web', subject: 'package manager', fact: 'prefers pnpm', source: 'repo:web', confirmed_at: daysAgo(100) },
      { id: 'm_api', subject: 'package manager', fact: 'prefers pnpm', source: 'repo:api', confirmed_at: daysAgo(101) },
      { id: 'm_flaky', fact: 'x', source: 'flaky:1', confirmed_at: daysAgo(102) },
      { id: 'm_slow', fact: 'y', source: 'slow:1', confirmed_at: daysAgo(103) },
    ]);
    const config = loadConfig({ file: configFile, env: {} });
    expect(config.verify.plugins[0]).toBe(join(box.dir, 'plugins/lockfile.mjs'));
    expect(config.verify.rules[0]!.with).toEqual({ dir: '${dir}', expect: '^${pm}$' });
    const r = await drift({ store: 'agent' }, jobContext(config));
    const byId = Object.fromEntries(r.verdicts.map((v) => [v.id, v]));
    expect(byId.m_web).toMatchObject({ verdict: 'confirmed', verifier: 'lockfile' });
    expect(byId.m_api).toMatchObject({ verdict: 'contradicted', verifier: 'lockfile' });
    expect(byId.m_api!.supersededBy).toBeDefined();
    expect(byId.m_flaky).toMatchObject({ verdict: 'unverifiable', verifier: 'thrower', needsPerson: false, reason: 'thrower: boom: upstream said no' });
    expect(byId.m_slow).toMatchObject({ verdict: 'unverifiable', verifier: 'hanger', reason: 'hanger: timed out after 200 ms' });
    withState(box.statePath, (state) => {
      expect(JSON.parse(verdictsFor(state, 'agent', 'm_slow')[0]!.evidence!).reason).toMatch(/timed out/);
      expect(pendingItems(state, 'agent')).toHaveLength(0);
    });
  });

  it('an unverifiable verdict says why in one line, whatever reason the plugin gave', async () => {
    plugin('vague.mjs', `import { defineVerifier } from 'memory-warden';
      export default defineVerifier({ name: 'vague', async verify(task) {
        return { verdict: 'unverifiable', reason: task.memory.source === 'vague:lines' ? '\\n  upstream down\\nretry later\\n' : '' };
      } });`);
    const configFile = writeConfig(`  plugins: [./plugins/vague.mjs]
  rules:
    - match: { source: "^vague:" }
      use: vague
`);
    insertRows(box.dbPath, [
      { id: 'm_lines', fact: 'x', source: 'vague:lines', confirmed_at: daysAgo(100) },
      { id: 'm_blank', fact: 'y', source: 'vague:blank', confirmed_at: daysAgo(101) },
    ]);
    const r = await drift({ store: 'agent' }, jobContext(loadConfig({ file: configFile, env: {} })));
    const byId = Object.fromEntries(r.verdicts.map((v) => [v.id, v]));
    expect(byId.m_lines).toMatchObject({ verdict: 'unverifiable', reason: 'upstream down' });
    expect(byId.m_blank).toMatchObject({ verdict: 'unverifiable', reason: 'vague gave no reason' });
  });

  it('the example plugin, configured as its header says, contradicts a memory its folder contradicts', async () => {
    const example = join(PACKAGE_ROOT, 'examples/verifier-package-manager/index.mjs');
    // The header's config, as a user copies it: only the plugin path and the root are this sandbox's.
    const header = /^ \* {3}verify:\n([\s\S]*?)\n \*\//m.exec(readFileSync(example, 'utf8'))![1]!.replace(/^ \* {3}/gm, '');
    const verify = header.replace('./examples/verifier-package-manager/index.mjs', example).replace('/srv/projects', join(box.dir, 'projects'));
    expect(verify).toContain(example);
    for (const p of ['web', 'api']) mkdirSync(join(box.dir, 'projects', p), { recursive: true });
    writeFileSync(join(box.dir, 'projects/web/pnpm-lock.yaml'), '');
    writeFileSync(join(box.dir, 'projects/api/yarn.lock'), '');
    const configFile = writeConfig(verify);
    insertRows(box.dbPath, [
      { id: 'm_yarn', subject: 'package manager', fact: 'prefers yarn', source: 'project:web', confirmed_at: daysAgo(100) },
      { id: 'm_pnpm', subject: 'package manager', fact: 'prefers pnpm', source: 'project:web', confirmed_at: daysAgo(101) },
      { id: 'm_api', subject: 'package manager', fact: 'prefers yarn', source: 'project:api', confirmed_at: daysAgo(102) },
      { id: 'm_vague', subject: 'package manager', fact: 'likes fast installs', source: 'project:api', confirmed_at: daysAgo(103) },
    ]);
    const r = await drift({ store: 'agent' }, jobContext(loadConfig({ file: configFile, env: {} })));
    const byId = Object.fromEntries(r.verdicts.map((v) => [v.id, v]));
    expect(byId.m_yarn).toMatchObject({ verdict: 'contradicted', verifier: 'package-manager' });
    expect(byId.m_pnpm).toMatchObject({ verdict: 'confirmed' });
    expect(byId.m_api).toMatchObject({ verdict: 'confirmed' });
    expect(byId.m_vague).toMatchObject({ verdict: 'unverifiable' });
    withState(box.statePath, (state) => {
      // without autoSupersede the contradiction waits for a person, with "prefers pnpm" proposed
      expect(pendingItems(state, 'agent').map((p) => p.memory_id)).toEqual(['m_yarn']);
      expect(JSON.parse(verdictsFor(state, 'agent', 'm_yarn')[0]!.evidence!)).toMatchObject({ current: { value: 'pnpm' }, replacement: { fact: 'prefers pnpm' } });
    });
  });

  // The plugin's refuse() is the package entry's copy of Refusal (dist/src/index.js); the drift job here is the
  // sources' copy, and the CLI runs its bundle's: three classes, one verdict.
  const REFUSER_PLUGIN = `
import { defineVerifier, refuse, Refusal } from 'memory-warden';
export default defineVerifier({
  name: 'refuser',
  async verify(task) {
    if (task.params.how === 'refuse') throw refuse('host ' + task.params.host + ' is not on the list');
    if (task.params.how === 'new') throw new Refusal('built by hand');
    if (task.params.how === 'lookalike') { const e = new Error('only a name'); e.name = 'Refusal'; e.reason = 'forged'; throw e; }
    return { value: 'x' };
  },
});
`;
  const refuserConfig = () => {
    plugin('refuser.mjs', REFUSER_PLUGIN);
    const configFile = writeConfig(
      `  plugins: [./plugins/refuser.mjs]
  rules:
    - match: { source: "^ask:(?<how>[a-z]+)$" }
      use: refuser
      with: { how: "\${how}", host: "db.internal" }
`,
    );
    insertRows(box.dbPath, [
      { id: 'm_refuse', fact: 'a', source: 'ask:refuse', confirmed_at: daysAgo(100) },
      { id: 'm_new', fact: 'b', source: 'ask:new', confirmed_at: daysAgo(101) },
      { id: 'm_lookalike', fact: 'c', source: 'ask:lookalike', confirmed_at: daysAgo(102) },
    ]);
    return configFile;
  };
  const expectRefusals = (byId: Record<string, { verdict: string; reason?: string }>) => {
    expect(byId.m_refuse).toMatchObject({ verdict: 'refused', reason: 'host db.internal is not on the list' });
    expect(byId.m_new).toMatchObject({ verdict: 'refused', reason: 'built by hand' });
    // An error that only calls itself Refusal is a plugin failing, not a refusal.
    expect(byId.m_lookalike).toMatchObject({ verdict: 'unverifiable', reason: 'refuser: only a name' });
  };

  it('a plugin\'s refusal is recorded as refused, though its Refusal class is another copy than the job\'s', async () => {
    const config = loadConfig({ file: refuserConfig(), env: {} });
    const r = await drift({ store: 'agent' }, jobContext(config));
    expectRefusals(Object.fromEntries(r.verdicts.map((v) => [v.id, v])));
  });

  it('the same through the built CLI, whichever way it runs (bundle or modules)', () => {
    for (const bundle of ['1', '0']) {
      if (bundle === '0') {
        box.cleanup();
        freshBox();
      }
      const configFile = refuserConfig();
      const r = spawnSync(process.execPath, [CLI, 'run', 'drift', '--config', configFile, '--json'], {
        encoding: 'utf8',
        env: { ...process.env, LOG_LEVEL: 'silent', MEMORY_WARDEN_BUNDLE: bundle },
      });
      expect(r.status, r.stderr).toBe(0);
      const byId = Object.fromEntries(['m_refuse', 'm_new', 'm_lookalike'].map((id) => {
        const v = withState(box.statePath, (state) => verdictsFor(state, 'agent', id))[0]!;
        return [id, { verdict: v.verdict, reason: v.evidence ? (JSON.parse(v.evidence) as { reason?: string }).reason : undefined }];
      }));
      expectRefusals(byId);
    }
  });

  it('names the file of a broken or invalid plugin', async () => {
    const cases: [string, string, RegExp][] = [
      ['syntax.mjs', 'export default defineVerifier({', /syntax\.mjs: cannot load/],
      ['nodefault.mjs', 'export const x = 1;', /nodefault\.mjs: no default export/],
      ['plain.mjs', 'export default { name: "plain", async verify() { return { value: 1 }; } };', /plain\.mjs: the default export is not made with defineVerifier/],
      ['badname.mjs', `import { defineVerifier } from 'memory-warden'; export default defineVerifier({ name: 'Bad Name', async verify() {} });`, /badname\.mjs: cannot load: defineVerifier: name must be/],
      ['noverify.mjs', `import { defineVerifier } from 'memory-warden'; export default defineVerifier({ name: 'noverify' });`, /noverify\.mjs: cannot load: .*verify must be a function/],
    ];
    for (const [name, text, why] of cases) {
      await expect(loadPlugins([plugin(name, text)]), name).rejects.toThrow(why);
    }
    await expect(loadPlugins([join(box.dir, 'plugins/missing.mjs')])).rejects.toThrow(/missing\.mjs: no such file/);
    const dup = plugin('dup.mjs', `import { defineVerifier } from 'memory-warden'; export default defineVerifier({ name: 'file', async verify() { return { value: 1 }; } });`);
    expect(() => createRegistry([{ file: dup, verifier: { name: 'file', verify: async () => ({ value: 1 }) } }])).toThrow(/dup\.mjs: a verifier named "file" is already built in/);
  });
});
