import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import git from '../../src/verifiers/git.js';
import { runVerifier } from '../../src/drift/dispatch.js';
import { drift } from '../../jobs/drift.js';
import { configFor, daysAgo, insertRows, jobContext, sandbox, type Sandbox } from '../drift/helpers.js';
import { DAY_MS } from '../../src/time/instants.js';
import { NOW } from '../drift/helpers.js';
import { sh } from '../helpers/git.js';

describe('git verifier', () => {
  let box: Sandbox;
  let repo: string;
  let cacheDir: string;
  beforeEach(() => {
    box = sandbox();
    repo = join(box.dir, 'app');
    cacheDir = join(box.dir, 'cache');
    mkdirSync(repo);
    sh(repo, 'init', '-q', '-b', 'main');
    writeFileSync(join(repo, 'package.json'), JSON.stringify({ packageManager: 'pnpm@9.1.0' }));
    writeFileSync(join(repo, 'deploy.yaml'), 'branch: staging\n');
    sh(repo, 'add', '.');
    sh(repo, 'commit', '-q', '-m', 'first');
    sh(repo, 'tag', 'v1');
  });
  afterEach(() => box.cleanup());

  const allow = () => ({ gitRepos: [repo] });

  it('reads a file at a ref and the latest commit touching a path, from a cached clone', async () => {
    expect(await runVerifier(git, { repo, path: 'package.json', select: '$.packageManager' }, { allow: allow(), cacheDir })).toMatchObject({ value: 'pnpm@9.1.0' });
    expect(existsSync(join(cacheDir, 'git'))).toBe(true);
    writeFileSync(join(repo, 'package.json'), JSON.stringify({ packageManager: 'npm@10.0.0' }));
    sh(repo, 'commit', '-q', '-am', 'switch to npm');
    expect(await runVerifier(git, { repo, path: 'package.json', select: '$.packageManager' }, { allow: allow(), cacheDir })).toMatchObject({ value: 'npm@10.0.0' });
    expect(await runVerifier(git, { repo, path: 'package.json', ref: 'v1', select: '$.packageManager' }, { allow: allow(), cacheDir })).toMatchObject({ value: 'pnpm@9.1.0' });
    const last = await runVerifier(git, { repo, path: 'package.json', read: 'lastCommit' }, { allow: allow(), cacheDir });
    expect(last).toMatchObject({ value: { subject: 'switch to npm', commit: sh(repo, 'rev-parse', 'HEAD').trim() } });
    expect(readdirSync(join(cacheDir, 'git')).filter((n) => n.endsWith('.git'))).toHaveLength(1);
    expect(await runVerifier(git, { repo, path: 'nope.json' }, { allow: allow(), cacheDir })).toMatchObject({ verdict: 'unverifiable' });
    expect(await runVerifier(git, { repo, path: 'package.json', ref: 'no-such-branch' }, { allow: allow(), cacheDir })).toMatchObject({ verdict: 'unverifiable' });
  });

  it('refuses repositories, paths and refs the config does not allow, before running git', async () => {
    const other = join(box.dir, 'other');
    mkdirSync(other);
    sh(other, 'init', '-q');
    const cases: [object, RegExp][] = [
      [{ repo: other, path: 'x' }, /not on verify.allow.gitRepos/],
      [{ repo: `file://${repo}`, path: 'x' }, /not on verify.allow.gitRepos/],
      [{ repo: '--upload-pack=touch /tmp/pwned', path: 'x' }, /looks like an option/],
      [{ repo, path: '../other/x' }, /"\.\." segment/],
      [{ repo, path: '/etc/passwd' }, /relative to the repository/],
      [{ repo, path: 'x', ref: '--output=/tmp/pwned' }, /not a plain branch/],
      [{ repo, path: 'x', ref: 'main@{1}' }, /not a plain branch/],
      [{ repo, path: 'x', ref: 'HEAD..v1' }, /not a plain branch/],
    ];
    for (const [params, why] of cases) {
      expect(await runVerifier(git, params, { allow: allow(), cacheDir }), JSON.stringify(params)).toMatchObject({ verdict: 'refused', reason: expect.stringMatching(why) });
    }
    expect(existsSync(join(cacheDir, 'git'))).toBe(false);
  });

  it('in the drift job: one fetch per run however many memories, and a new commit seen by the next run', async () => {
    insertRows(box.dbPath, [
      { id: 'm_pm', fact: 'prefers pnpm', source: 'repo:app:package.json', confirmed_at: daysAgo(100) },
      { id: 'm_pm2', fact: 'uses pnpm 9', source: 'repo:app:package.json', confirmed_at: daysAgo(101) },
      { id: 'm_deploy', fact: 'deploys go through staging', source: 'repo:app:deploy.yaml', confirmed_at: daysAgo(102) },
      { id: 'm_evil', fact: 'x', source: 'repo:../../etc:passwd', confirmed_at: daysAgo(103) },
    ]);
    const config = configFor(box, {
      allow: { gitRepos: [repo] },
      rules: [
        {
          match: { source: '^repo:app:(?<file>package\\.json)$', fact: 'pnpm' },
          use: 'git',
          with: { repo, path: '${file}', select: '$.packageManager', expect: '^pnpm@' },
          replacement: { fact: 'prefers ${value}', source: 'repo:app:package.json' },
          autoSupersede: true,
        },
        { match: { source: '^repo:app:(?<file>deploy\\.yaml)$', fact: 'through staging$' }, use: 'git', with: { repo, path: '${file}', select: 'branch', expect: 'staging' } },
        { match: { source: '^repo:(?<name>[^:]+):(?<file>.+)$' }, use: 'git', with: { repo: '${name}', path: '${file}' } },
      ],
    });
    const first = await drift({ store: 'agent' }, jobContext(config));
    const v1 = Object.fromEntries(first.verdicts.map((v) => [v.id, v]));
    expect(v1.m_pm!.verdict).toBe('confirmed');
    expect(v1.m_pm2!.verdict).toBe('confirmed');
    expect(v1.m_deploy!.verdict).toBe('confirmed');
    expect(v1.m_evil).toMatchObject({ verdict: 'refused', reason: expect.stringMatching(/not on verify.allow.gitRepos/) });
    // reads: one clone of the repository, one read of package.json, one of deploy.yaml (a fetch per memory would be 5)
    expect(first.reads).toBe(3);
    expect(first.sharedReads).toBe(3);

    // change, commit again: the next run fetches and sees it
    writeFileSync(join(repo, 'package.json'), JSON.stringify({ packageManager: 'npm@10.2.0' }));
    sh(repo, 'commit', '-q', '-am', 'npm now');
    const later = NOW + 100 * DAY_MS;
    const second = await drift({ store: 'agent' }, jobContext(config, later));
    const v2 = Object.fromEntries(second.verdicts.map((v) => [v.id, v]));
    expect(v2.m_pm!.verdict).toBe('contradicted');
    expect(v2.m_pm!.supersededBy).toBeDefined();
    expect(v2.m_deploy!.verdict).toBe('confirmed');
  });
});
