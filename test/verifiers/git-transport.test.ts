import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import git from '../../src/verifiers/git.js';
import { transportOf } from '../../src/verifiers/git-cli.js';
import { runVerifier } from '../../src/drift/dispatch.js';
import { sh } from '../helpers/git.js';
import { isRoot } from '../helpers/not-files.js';

interface FileServer {
  base: string;
  hits: string[];
  close(): Promise<void>;
}

/**
 * A loopback HTTP server that logs every request and serves the files under `root` (git's dumb HTTP protocol
 * reads a bare repository as plain files), unless `route` answers first (a redirect).
 */
function serveFiles(root: string, route: (path: string) => string | undefined = () => undefined): Promise<FileServer> {
  const hits: string[] = [];
  const server = createServer((req, res) => {
    const url = req.url ?? '/';
    hits.push(url);
    const location = route(url);
    if (location) return void res.writeHead(302, { location }).end();
    const file = join(root, decodeURIComponent(url.split('?')[0]!));
    try {
      if (!statSync(file).isFile()) throw new Error('not a file');
      res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(readFileSync(file));
    } catch {
      res.writeHead(404).end();
    }
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      resolve({ base, hits, close: () => new Promise((r) => server.close(() => r())) });
    }),
  );
}

/** A bare copy of `source` at `dest`, ready for dumb HTTP. */
function bare(source: string, dest: string): void {
  sh(source, 'clone', '-q', '--bare', source, dest);
  sh(dest, 'update-server-info');
}

/**
 * git must not be led to another origin than the allowed repository's: not by a redirect, not by http-alternates,
 * not by a URL rewrite in the user's or the system's git config or in the environment. Two real loopback servers:
 * `front` holds the allowed addresses, `target` a repository that must see no request.
 */
describe('git verifier: the transport goes nowhere but the allowed address', () => {
  let dir: string;
  let local: string;
  let front: FileServer;
  let target: FileServer;
  let cacheDir: string;
  beforeAll(async () => {
    dir = realpathSync(mkdtempSync(join(tmpdir(), 'warden-git-http-')));
    for (const [name, branch] of [
      ['target-src', 'TARGET-REPO'],
      ['front-src', 'front'],
      ['local', 'local'],
    ] as const) {
      const repo = join(dir, name);
      mkdirSync(repo);
      sh(repo, 'init', '-q', '-b', 'main');
      writeFileSync(join(repo, 'deploy.yaml'), `branch: ${branch}\n`);
      sh(repo, 'add', '.');
      sh(repo, 'commit', '-q', '-m', 'first');
    }
    local = join(dir, 'local');
    bare(join(dir, 'target-src'), join(dir, 'target-root', 'repo.git'));
    bare(join(dir, 'front-src'), join(dir, 'front-root', 'front.git'));
    target = await serveFiles(join(dir, 'target-root'));
    // alt.git: the target's refs without its objects, and an http-alternates file pointing at the target's store.
    const alt = join(dir, 'front-root', 'alt.git');
    bare(join(dir, 'target-src'), alt);
    for (const d of readdirSync(join(alt, 'objects'))) if (d !== 'info') rmSync(join(alt, 'objects', d), { recursive: true });
    writeFileSync(join(alt, 'objects', 'info', 'packs'), '');
    writeFileSync(join(alt, 'objects', 'info', 'http-alternates'), `${target.base}/repo.git/objects\n`);
    front = await serveFiles(join(dir, 'front-root'), (url) => {
      if (url.startsWith('/redir/')) return `${target.base}/${url.slice('/redir/'.length)}`;
      if (url.startsWith('/moved.git/')) return url.replace('/moved.git/', '/front.git/');
      return undefined;
    });
  });
  afterAll(async () => {
    await front.close();
    await target.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const saved = { ...process.env };
  beforeEach(() => {
    cacheDir = mkdtempSync(join(dir, 'cache-'));
    target.hits.length = 0;
    front.hits.length = 0;
  });
  afterEach(() => {
    for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
    Object.assign(process.env, saved);
  });

  const run = (repo: string) => runVerifier(git, { repo, path: 'deploy.yaml', select: 'branch' }, { allow: { gitRepos: [repo] }, cacheDir, timeoutMs: 10_000 });

  it('reads an allowed repository over HTTP', async () => {
    expect(await run(`${front.base}/front.git`)).toMatchObject({ value: 'front' });
    expect(target.hits).toEqual([]);
  });

  it('follows no redirect: to another origin the target sees no request; on the same server neither', async () => {
    const away = await run(`${front.base}/redir/repo.git`);
    expect(away).toMatchObject({ verdict: 'unverifiable', reason: expect.stringMatching(/returned error: 302/) });
    expect(JSON.stringify(away)).not.toContain('TARGET-REPO');
    expect(target.hits).toEqual([]);
    expect(await run(`${front.base}/moved.git`)).toMatchObject({ verdict: 'unverifiable' });
    expect(front.hits.filter((h) => h.startsWith('/front.git'))).toEqual([]);
  });

  it('does not fetch objects from the http-alternates of an allowed repository', async () => {
    expect(await run(`${front.base}/alt.git`)).toMatchObject({ verdict: 'unverifiable' });
    expect(front.hits).toContain('/alt.git/objects/info/http-alternates'); // git looked, and went no further
    expect(target.hits).toEqual([]);
  });

  it("ignores a URL rewrite in the user's or the system's git config, or in the environment", async () => {
    const gone = `${front.base}/gone.git`; // front has nothing there: only a rewrite to the target would read
    const rewrite = `[url "${target.base}/repo.git"]\n\tinsteadOf = ${gone}\n`;
    const home = join(dir, 'home');
    const xdg = join(dir, 'xdg');
    mkdirSync(join(xdg, 'git'), { recursive: true });
    mkdirSync(home, { recursive: true });
    writeFileSync(join(dir, 'gitconfig'), rewrite);
    const ways: Record<string, Record<string, string>> = {
      '~/.gitconfig': { HOME: home },
      '$XDG_CONFIG_HOME/git/config': { HOME: join(dir, 'empty-home'), XDG_CONFIG_HOME: xdg },
      GIT_CONFIG_SYSTEM: { GIT_CONFIG_SYSTEM: join(dir, 'gitconfig') },
      GIT_CONFIG_GLOBAL: { GIT_CONFIG_GLOBAL: join(dir, 'gitconfig') },
      GIT_CONFIG_COUNT: { GIT_CONFIG_COUNT: '1', GIT_CONFIG_KEY_0: `url.${target.base}/repo.git.insteadOf`, GIT_CONFIG_VALUE_0: gone },
    };
    writeFileSync(join(home, '.gitconfig'), rewrite);
    writeFileSync(join(xdg, 'git', 'config'), rewrite);
    for (const [way, env] of Object.entries(ways)) {
      Object.assign(process.env, env);
      cacheDir = mkdtempSync(join(dir, 'cache-'));
      expect(await run(gone), way).toMatchObject({ verdict: 'unverifiable' });
      expect(target.hits, way).toEqual([]);
      for (const k of Object.keys(env)) delete process.env[k];
      Object.assign(process.env, saved);
    }
  });

  it("speaks only the transport of the allowed address, even where the mirror's own config would rewrite it", async () => {
    expect(await run(local)).toMatchObject({ value: 'local' });
    // No config from outside reaches git any more; the one left is the mirror's, rewritten here by hand.
    const mirror = join(cacheDir, 'git', readdirSync(join(cacheDir, 'git')).find((n) => n.endsWith('.git'))!);
    sh(mirror, 'config', `url.${target.base}/repo.git.insteadOf`, local);
    expect(await run(local)).toMatchObject({ verdict: 'unverifiable', reason: expect.stringMatching(/transport 'http' not allowed/) });
    expect(target.hits).toEqual([]);
    expect([local, 'https://h/r.git', 'git@h:r.git', 'git+ssh://h/r', 'ssh://h/r', 'git://h/r', 'foo://h/r'].map(transportOf)).toEqual(['file', 'https', 'ssh', 'ssh', 'ssh', 'git', '']);
  });

  // chown needs root; the repository of another user is what safe.directory is about. Runs in CI always (isRoot).
  it.skipIf(!isRoot)("keeps the user's safe.directory (and only that): another user's repository reads when trusted there", async () => {
    const owned = join(dir, 'owned');
    sh(dir, 'clone', '-q', local, owned);
    execFileSync('chown', ['-R', 'nobody', owned]);
    const home = join(dir, 'home-safe');
    mkdirSync(home, { recursive: true });
    process.env.HOME = home;
    expect(await run(owned)).toMatchObject({ verdict: 'unverifiable', reason: expect.stringMatching(/dubious ownership/) });
    writeFileSync(join(home, '.gitconfig'), `[safe]\n\tdirectory = ${owned}/.git\n[url "${target.base}/repo.git"]\n\tinsteadOf = ${owned}\n`);
    cacheDir = mkdtempSync(join(dir, 'cache-'));
    expect(await run(owned)).toMatchObject({ value: 'local' });
    expect(target.hits).toEqual([]);
  });

  it('reads a local repository as itself when the environment would rewrite it to HTTP', async () => {
    Object.assign(process.env, { GIT_CONFIG_COUNT: '1', GIT_CONFIG_KEY_0: `url.${target.base}/repo.git.insteadOf`, GIT_CONFIG_VALUE_0: local });
    expect(await run(local)).toMatchObject({ value: 'local' });
    expect(target.hits).toEqual([]);
  });
});
