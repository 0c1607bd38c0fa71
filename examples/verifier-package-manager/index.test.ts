import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
// As a plugin author would: the verifier under test and the package's own test helper.
import { runVerifier } from 'memory-warden';
import packageManager from './index.mjs';

describe('example plugin: package-manager', () => {
  let root: string;
  let outside: string;
  beforeEach(() => {
    const base = realpathSync(mkdtempSync(join(tmpdir(), 'warden-pm-')));
    root = join(base, 'projects');
    outside = join(base, 'elsewhere');
    for (const d of ['projects/web', 'projects/api', 'projects/mixed', 'projects/bare', 'elsewhere']) mkdirSync(join(base, d), { recursive: true });
    writeFileSync(join(root, 'web/pnpm-lock.yaml'), '');
    writeFileSync(join(root, 'api/package.json'), JSON.stringify({ packageManager: 'yarn@4.1.0' }));
    writeFileSync(join(root, 'api/package-lock.json'), '{}');
    writeFileSync(join(root, 'mixed/yarn.lock'), '');
    writeFileSync(join(root, 'mixed/package-lock.json'), '{}');
    writeFileSync(join(outside, 'pnpm-lock.yaml'), '');
    symlinkSync(outside, join(root, 'escape'));
    mkdirSync(join(root, 'linked'));
    writeFileSync(join(outside, 'package.json'), JSON.stringify({ packageManager: 'bun@1.0.0' }));
    symlinkSync(join(outside, 'package.json'), join(root, 'linked/package.json'));
  });
  afterEach(() => rmSync(join(root, '..'), { recursive: true, force: true }));

  const run = (dir: string, fact = 'prefers pnpm') => runVerifier(packageManager, { dir }, { allow: { fileRoots: [root] }, memory: { fact } });

  it('confirms a memory its evidence agrees with', async () => {
    expect(await run('web', 'prefers pnpm')).toMatchObject({ verdict: 'confirmed', value: 'pnpm', evidence: { from: 'pnpm-lock.yaml', claimed: 'pnpm' } });
    expect(await run('api', 'the team uses Yarn 4')).toMatchObject({ verdict: 'confirmed', value: 'yarn', evidence: { from: 'package.json packageManager' } });
  });

  it('contradicts a memory its evidence contradicts, whatever it found', async () => {
    // the case: "prefers yarn" in a project with pnpm-lock.yaml
    expect(await run('web', 'prefers yarn')).toMatchObject({ verdict: 'contradicted', value: 'pnpm', evidence: { claimed: 'yarn' } });
    expect(await run('web', 'prefers npm')).toMatchObject({ verdict: 'contradicted', value: 'pnpm' });
    // packageManager wins over the lockfile beside it: package-lock.json does not make "npm" true
    expect(await run('api', 'uses npm')).toMatchObject({ verdict: 'contradicted', value: 'yarn' });
    expect(await run('api', 'prefers pnpm')).toMatchObject({ verdict: 'contradicted', value: 'yarn' });
  });

  it('does not judge a memory that names no package manager, or several', async () => {
    for (const fact of ['likes tabs', 'prefers yarn over npm', 'pnpmfoo is used', '@pnpm/core is a dependency', '']) {
      expect(await run('web', fact), fact).toMatchObject({ verdict: 'unverifiable', reason: expect.stringMatching(/names no one package manager/) });
    }
  });

  it('says when it cannot tell', async () => {
    expect(await run('mixed')).toMatchObject({ verdict: 'unverifiable', reason: expect.stringMatching(/lockfiles of yarn and npm/) });
    expect(await run('bare')).toMatchObject({ verdict: 'unverifiable' });
    expect(await run('nope')).toMatchObject({ verdict: 'unverifiable', reason: expect.stringMatching(/ENOENT/) });
  });

  it('never leaves the allowed roots', async () => {
    expect(await run('../elsewhere')).toMatchObject({ verdict: 'refused' });
    expect(await run(outside)).toMatchObject({ verdict: 'refused' });
    expect(await run('escape')).toMatchObject({ verdict: 'refused', reason: expect.stringMatching(/symlink/) });
    // the folder is inside, its package.json a symlink out: refused, not read
    expect(await run('linked')).toMatchObject({ verdict: 'refused', reason: expect.stringMatching(/symlink/) });
  });

  it('rejects a rule with the wrong parameters', async () => {
    expect(await runVerifier(packageManager, { folder: 'web' }, { allow: { fileRoots: [root] }, memory: { fact: 'prefers pnpm' } })).toMatchObject({ verdict: 'unverifiable', reason: expect.stringMatching(/with\.dir/) });
  });
});
