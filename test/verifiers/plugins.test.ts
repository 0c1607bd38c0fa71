import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { existsSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { loadConfig } from '../../src/config.js';
import { loadPlugins } from '../../src/verifiers/plugins.js';
import { createRegistry } from '../../src/verifiers/registry.js';
import { drift } from '../../jobs/drift.js';
import { pendingItems, verdictsFor } from '../../src/drift/record.js';
import { daysAgo, insertRows, jobContext, sandbox, withState, type Sandbox } from '../drift/helpers.js';

const PACKAGE_ROOT = resolve(import.meta.dirname, '../..');

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
  beforeEach(() => {
    box = sandbox();
    mkdirSync(join(box.dir, 'node_modules'));
    symlinkSync(PACKAGE_ROOT, join(box.dir, 'node_modules', 'memory-warden'));
    mkdirSync(join(box.dir, 'plugins'));
  });
  afterEach(() => box.cleanup());

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
    const configFile = join(box.dir, 'warden.yaml');
    writeFileSync(
      configFile,
      `stateDb: ./state.db
stores:
  agent:
    db: ./memory.db
verify:
  plugins: [./plugins/lockfile.mjs, ./plugins/thrower.mjs, ./plugins/hanger.mjs]
  cacheDir: ./cache
  allow:
    fileRoots: [./repos]
  rules:
    - name: package manager
      match: { source: "^repo:(?<dir>[a-z]+)$", subject: "^package manager$" }
      use: lockfile
      with: { dir: "\${dir}", expect: pnpm }
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
    expect(config.verify.rules[0]!.with).toEqual({ dir: '${dir}', expect: 'pnpm' });
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
