import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLI, cli } from '../helpers/cli.js';
import { makeStore } from '../helpers/store.js';
import { verifyLink } from '../../src/links/tokens.js';
import { makeAuthenticator } from '../../src/review-web/auth.js';

const KEY = 'q'.repeat(44);

describe('memory-warden serve', { timeout: 90_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'mw-serve-'));
  makeStore(join(dir, 'agent.db'), [{ id: 'm_1', fact: 'prefers pnpm', confirmed_at: '2026-01-01 00:00:00' }]);
  const config = join(dir, 'warden.yaml');
  writeFileSync(config, `stateDb: ./state.db\nstores:\n  agent:\n    db: ./agent.db\nreview:\n  listen: { host: 127.0.0.1, port: 0 }\n  auth: { mode: users, usersFile: ./users }\n`);
  let child: ChildProcess | undefined;
  afterEach(() => {
    if (child && child.exitCode === null) child.kill('SIGTERM');
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('refuses to start without its key or its users, in one line naming what is missing', () => {
    const noKey = cli(['serve', '--config', config], { MEMORY_WARDEN_REVIEW_KEY: '' });
    expect(noKey.code).toBe(2);
    // Both missing: one line names both, not the first alone (a person fixes one, then meets the other).
    const lines = noKey.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^memory-warden: review\.secretEnv: environment variable MEMORY_WARDEN_REVIEW_KEY is not set \(the key that signs review links\); review\.auth\.usersFile .*users: cannot read \(ENOENT\)/);
    const short = cli(['serve', '--config', config], { MEMORY_WARDEN_REVIEW_KEY: 'short' });
    expect(short.stderr).toMatch(/shorter than 32 characters/);
    const noUsers = cli(['serve', '--config', config], { MEMORY_WARDEN_REVIEW_KEY: KEY });
    expect(noUsers.code).toBe(2);
    expect(noUsers.stderr).toMatch(/review\.auth\.usersFile .*users: cannot read \(ENOENT\)/);
  });

  it('--hash-password writes a users-file line the sign-in accepts; --link a link for the store', async () => {
    const r = spawnSync(process.execPath, [CLI, 'serve', '--hash-password', 'bob'], { input: 'a long password\n', encoding: 'utf8' });
    expect(r.status).toBe(0);
    writeFileSync(join(dir, 'users'), r.stdout);
    const auth = makeAuthenticator({ mode: 'users', usersFile: join(dir, 'users'), passwordEnv: 'X' });
    expect(auth.mode !== 'proxy' && await auth.check('bob', 'a long password')).toBe('bob');
    expect(auth.mode !== 'proxy' && await auth.check('bob', 'a long passwor')).toBe(null);
    const link = cli(['serve', '--config', config, '--link', 'agent', '--now', '2026-11-29T06:00:00Z'], { MEMORY_WARDEN_REVIEW_KEY: KEY });
    expect(link.code).toBe(0);
    const t = new URL(link.stdout.trim()).searchParams.get('t')!;
    expect(verifyLink(Buffer.from(KEY), t, Date.parse('2026-11-29T06:00:00Z'))).toMatchObject({ ok: true, claims: { store: 'agent', item: '*' } });
  });

  it('serves the page on loopback until told to stop', async () => {
    writeFileSync(join(dir, 'users'), spawnSync(process.execPath, [CLI, 'serve', '--hash-password', 'bob'], { input: 'a long password\n', encoding: 'utf8' }).stdout);
    child = spawn(process.execPath, [CLI, 'serve', '--config', config], { env: { ...process.env, LOG_LEVEL: 'silent', MEMORY_WARDEN_REVIEW_KEY: KEY }, stdio: ['ignore', 'pipe', 'pipe'] });
    const [url, next] = await new Promise<string[]>((resolve, reject) => {
      let out = '';
      child!.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /review page at (http:\/\/127\.0\.0\.1:\d+)\n(.*)\n/.exec(out);
        if (m) resolve(m.slice(1));
      });
      child!.on('exit', (code) => reject(new Error(`serve exited ${code}`)));
    });
    // Without review.url, the next line says how to get in: the page opens only from a signed link.
    expect(next).toBe(`  it opens from a signed link (review.url is not set, so the digest has none): memory-warden serve --link STORE --config ${config} prints one`);
    const res = await fetch(`${url}/store/agent`);
    expect(res.status).toBe(401);
    expect(res.headers.get('content-security-policy')).toContain("default-src 'none'");
    const get = await fetch(`${url}/store/agent/decide?action=delete&id=m_1`);
    expect(get.status).toBe(405);
    const exited = new Promise<number | null>((resolve) => child!.on('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });
});
