import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import git from '../../src/verifiers/git.js';
import { runVerifier } from '../../src/drift/dispatch.js';
import { drift } from '../../jobs/drift.js';
import { configFor, daysAgo, insertRows, jobContext, sandbox, withState, type Sandbox } from '../drift/helpers.js';
import { sh, shInput } from '../helpers/git.js';

/**
 * A commit id is memory text: it is read only when it is in the allowed repository's own history, and the cached
 * mirror holds that repository's objects, never those of a repository its alternates point at. Real repositories.
 */
describe("git verifier: only the allowed repository's own history", () => {
  let box: Sandbox;
  let app: string;
  let secret: string;
  let cacheDir: string;
  /** Commits: on the secret repository; in app, one no ref reaches; app's first and last on main. */
  let S: string, D: string, first: string, last: string;
  beforeEach(() => {
    box = sandbox();
    [app, secret, cacheDir] = ['app', 'secret', 'cache'].map((d) => join(box.dir, d)) as [string, string, string];
    for (const dir of [app, secret]) {
      mkdirSync(dir);
      sh(dir, 'init', '-q', '-b', 'main');
    }
    writeFileSync(join(secret, 's.txt'), 'TOPSECRET-GIT\n');
    sh(secret, 'add', '.');
    sh(secret, 'commit', '-q', '-m', 'secret');
    S = sh(secret, 'rev-parse', 'HEAD').trim();

    writeFileSync(join(app, 's.txt'), 'version 1\n');
    sh(app, 'add', '.');
    sh(app, 'commit', '-q', '-m', 'first');
    first = sh(app, 'rev-parse', 'HEAD').trim();
    sh(app, 'tag', 'v1');
    sh(app, 'tag', '-a', '-m', 'annotated', 'v1a');
    writeFileSync(join(app, 's.txt'), 'version 2\n');
    sh(app, 'commit', '-q', '-am', 'second');
    last = sh(app, 'rev-parse', 'HEAD').trim();
    // A commit only the object store has: written, never put on a ref (as a rebase or a dropped stash leaves them).
    const blob = shInput(app, 'UNREACHABLE-GIT\n', 'hash-object', '-w', '--stdin').trim();
    const tree = shInput(app, `100644 blob ${blob}\ts.txt\n`, 'mktree').trim();
    D = sh(app, 'commit-tree', tree, '-p', last, '-m', 'dangling').trim();
    // The repository borrows objects from another, not on gitRepos.
    writeFileSync(join(app, '.git', 'objects', 'info', 'alternates'), join(secret, '.git', 'objects') + '\n');
  });
  afterEach(() => box.cleanup());

  const run = (ref: string, extra: object = {}) => runVerifier(git, { repo: app, path: 's.txt', format: 'text', ref, ...extra }, { allow: { gitRepos: [app] }, cacheDir });
  const mirror = () => join(cacheDir, 'git', readdirSync(join(cacheDir, 'git')).find((n) => n.endsWith('.git'))!);

  it('refuses a commit of the repository the alternates point at, and the mirror holds none of its objects', async () => {
    for (const ref of [S, S.slice(0, 7)]) {
      const r = await run(ref);
      expect(r, ref).toMatchObject({ verdict: 'refused', reason: expect.stringMatching(/not a commit reachable from the repository's refs/) });
      expect(JSON.stringify(r)).not.toContain('TOPSECRET');
    }
    expect(await run(S, { read: 'lastCommit' })).toMatchObject({ verdict: 'refused' });
    expect(existsSync(join(mirror(), 'objects', 'info', 'alternates'))).toBe(false);
    expect(() => sh(mirror(), 'cat-file', '-e', S)).toThrow();
  });

  it('refuses a commit in the repository that no ref reaches', async () => {
    for (const extra of [{}, { read: 'lastCommit' }]) {
      const r = await run(D, extra);
      expect(r).toMatchObject({ verdict: 'refused', reason: expect.stringMatching(/not a commit reachable/) });
      expect(JSON.stringify(r)).not.toContain('UNREACHABLE');
    }
  });

  it('refuses a commit the mirror fetched on a branch since deleted', async () => {
    sh(app, 'checkout', '-q', '-b', 'old');
    writeFileSync(join(app, 's.txt'), 'OLD-BRANCH\n');
    sh(app, 'commit', '-q', '-am', 'on a branch');
    const old = sh(app, 'rev-parse', 'HEAD').trim();
    sh(app, 'checkout', '-q', 'main');
    expect(await run(old)).toMatchObject({ value: 'OLD-BRANCH\n' });
    sh(app, 'branch', '-q', '-D', 'old');
    // the next run fetches (--prune drops the branch; its commit stays in the mirror's objects)
    const r = await run(old);
    expect(r).toMatchObject({ verdict: 'refused', reason: expect.stringMatching(/not a commit reachable/) });
    expect(JSON.stringify(r)).not.toContain('OLD-BRANCH');
  });

  it('makes again a mirror an older version cloned locally, alternates file and all', async () => {
    expect(await run('main')).toMatchObject({ value: 'version 2\n' });
    const dir = mirror();
    rmSync(dir, { recursive: true });
    sh(box.dir, 'clone', '-q', '--mirror', '--', app, dir); // the old way: hard links and the alternates file
    expect(existsSync(join(dir, 'objects', 'info', 'alternates'))).toBe(true);
    const r = await run(S);
    expect(r).toMatchObject({ verdict: 'refused' });
    expect(JSON.stringify(r)).not.toContain('TOPSECRET');
    expect(existsSync(join(dir, 'objects', 'info', 'alternates'))).toBe(false);
    expect(() => sh(dir, 'cat-file', '-e', D)).toThrow();
  });

  it('reads commits on a branch or a tag: by name, by full and abbreviated id, by an annotated tag id', async () => {
    const tagObject = sh(app, 'rev-parse', 'v1a').trim();
    const cases: [string, string][] = [
      ['main', 'version 2\n'],
      [last, 'version 2\n'],
      [last.slice(0, 8), 'version 2\n'],
      [first, 'version 1\n'],
      ['v1', 'version 1\n'],
      [tagObject, 'version 1\n'],
    ];
    for (const [ref, value] of cases) expect(await run(ref), ref).toMatchObject({ value, evidence: { ref } });
    expect(await run(first, { read: 'lastCommit', select: 'commit' })).toMatchObject({ value: first });
    // a name that is no ref is still a missing source, tried again next run
    expect(await run('no-such-branch')).toMatchObject({ verdict: 'unverifiable' });
  });

  it('reads a repository whose own history sits in the store its alternates point at (a --shared clone)', async () => {
    const fork = join(box.dir, 'fork');
    sh(box.dir, 'clone', '-q', '--shared', secret, fork);
    writeFileSync(join(fork, 'f.txt'), 'forked\n');
    sh(fork, 'add', '.');
    sh(fork, 'commit', '-q', '-m', 'fork');
    const params = { repo: fork, format: 'text' };
    const allow = { gitRepos: [fork] };
    // s.txt is the upstream's commit, in the fork's history: it is the fork's own content too
    expect(await runVerifier(git, { ...params, path: 's.txt', ref: S }, { allow, cacheDir })).toMatchObject({ value: 'TOPSECRET-GIT\n' });
    expect(await runVerifier(git, { ...params, path: 'f.txt' }, { allow, cacheDir })).toMatchObject({ value: 'forked\n' });
  });

  it('in the drift job: commit ids from memory text, refused or read, and nothing of a refused one recorded', async () => {
    insertRows(box.dbPath, [
      { id: 'g_secret', fact: 'f', source: `g:${S}:s.txt`, confirmed_at: daysAgo(200) },
      { id: 'g_dangling', fact: 'f', source: `g:${D}:s.txt`, confirmed_at: daysAgo(199) },
      { id: 'g_main', fact: 'f', source: `g:${last}:s.txt`, confirmed_at: daysAgo(198) },
    ]);
    const config = configFor(box, {
      allow: { gitRepos: [app] },
      rules: [{ match: { source: '^g:(?<ref>\\w+):(?<p>[\\w.]+)$' }, use: 'git', with: { repo: app, ref: '${ref}', path: '${p}', format: 'text' } }],
    });
    const r = await drift({ store: 'agent' }, jobContext(config));
    const byId = Object.fromEntries(r.verdicts.map((v) => [v.id, v.verdict]));
    expect(byId).toEqual({ g_secret: 'refused', g_dangling: 'refused', g_main: 'confirmed' });
    const recorded = withState(box.statePath, (state) => JSON.stringify(state.prepare('SELECT * FROM drift_verdicts').all()));
    expect(recorded).not.toMatch(/TOPSECRET|UNREACHABLE/);
    expect(recorded).toContain('version 2');
  });
});
