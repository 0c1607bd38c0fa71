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

  const run = (dir: string) => runVerifier(packageManager, { dir }, { allow: { fileRoots: [root] } });

  it('reads packageManager first, then the lockfile', async () => {
    expect(await run('web')).toMatchObject({ value: 'pnpm' });
    expect(await run('api')).toMatchObject({ value: 'yarn', evidence: { from: 'package.json packageManager' } });
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
    expect(await runVerifier(packageManager, { folder: 'web' }, { allow: { fileRoots: [root] } })).toMatchObject({ verdict: 'unverifiable', reason: expect.stringMatching(/with\.dir/) });
  });
});
