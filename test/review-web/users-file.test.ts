/** Users-file lines at exactly the lengths --hash-password writes, and shared passwords of 8 characters: else no serve. */
import { afterAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLI, cli } from '../helpers/cli.js';
import { makeStore } from '../helpers/store.js';
import { hashPasswordLine, makeAuthenticator } from '../../src/review-web/auth.js';

/**
 * Who may sign in is only who was really given a password: users-file lines are read at exactly the lengths
 * `--hash-password` writes, and the shared password is as long as `--hash-password` demands, or `serve` does not
 * start (exit 2, one line naming the file and line or the variable).
 */
const KEY = 'q'.repeat(44);
const dir = mkdtempSync(join(tmpdir(), 'mw-users-file-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
makeStore(join(dir, 'agent.db'), [{ id: 'm_1', fact: 'prefers pnpm', confirmed_at: '2026-01-01 00:00:00' }]);

const good = hashPasswordLine('bob', 'a long password');
const [, , salt, hash] = good.split(':') as [string, string, string, string];
let n = 0;

function usersFile(text: string): string {
  const file = join(dir, `users-${n++}`);
  writeFileSync(file, text);
  return file;
}

function configFor(review: string): string {
  const file = join(dir, `warden-${n++}.yaml`);
  writeFileSync(file, `stateDb: ./state.db\nstores:\n  agent:\n    db: ./agent.db\nreview:\n  listen: { host: 127.0.0.1, port: 0 }\n${review}`);
  return file;
}

const users = (file: string) => makeAuthenticator({ mode: 'users', usersFile: file, passwordEnv: 'X' });

describe('users file: only lines --hash-password could have written', () => {
  it('a hash of any other length is refused, naming the file and line, whatever the password', async () => {
    for (let len = 0; len <= 90; len++) {
      if (len === hash.length) continue;
      const h = (hash + 'A'.repeat(90)).slice(0, len);
      const file = usersFile(`# reviewers\nalice:scrypt:${salt}:${hash}\nbob:scrypt:${salt}:${h}\n`);
      expect(() => users(file), `hash of ${len} characters`).toThrow(new RegExp(`^review\\.auth\\.usersFile ${file}:3: expected name:scrypt:SALT:HASH`));
    }
    const ok = users(usersFile(`alice:scrypt:${salt}:${hash}\n`));
    expect(ok.mode !== 'proxy' && await ok.check('alice', 'a long password')).toBe('alice');
  });

  it('a salt of any other length, bad base64url, stray bits, extra or missing fields, a name twice: refused', () => {
    const bad = [
      ...Array.from({ length: 30 }, (_, len) => (len === salt.length ? null : `bob:scrypt:${(salt + 'A'.repeat(30)).slice(0, len)}:${hash}`)),
      `bob:scrypt:${salt}:${hash.slice(0, -1)}=`,
      `bob:scrypt:${salt}:${hash.slice(0, -1)}+`,
      `bob:scrypt:${salt}:${hash.slice(0, -1)}/`,
      `bob:scrypt:${salt.slice(0, -1)}.:${hash}`,
      // 43 characters carry 258 bits, 22 carry 132: a last character with low bits set is not what base64url writes.
      `bob:scrypt:${salt}:${hash.slice(0, -1)}B`,
      `bob:scrypt:${salt.slice(0, -1)}B:${hash}`,
      `bob:scrypt:${salt}:${hash}:extra`,
      `bob:scrypt:${salt}:${hash}:`,
      `bob:scrypt:${salt}`,
      `bob:scrypt:${salt}:`,
      `bob:scrypt::${hash}`,
      `bob:bcrypt:${salt}:${hash}`,
      `bob scrypt ${salt} ${hash}`,
      `:scrypt:${salt}:${hash}`,
      `bob:scrypt:${salt}:${hash}\u0000`,
    ].filter((l): l is string => l !== null);
    for (const line of bad) {
      const file = usersFile(`alice:scrypt:${salt}:${hash}\n${line}\n`);
      expect(() => users(file), JSON.stringify(line)).toThrow(new RegExp(`usersFile ${file}:2: `));
    }
    const twice = usersFile(`bob:scrypt:${salt}:${hash}\nbob:scrypt:${salt}:${hash}\n`);
    expect(() => users(twice)).toThrow(`review.auth.usersFile ${twice}:2: user bob is named twice`);
  });

  it('CRLF line ends, blank lines, comments and indentation are read as the same lines', async () => {
    const file = usersFile(`# reviewers\r\n\r\n  ${good}\r\n${hashPasswordLine('carol', 'another long one')}\r\n`);
    const auth = users(file);
    expect(auth.mode !== 'proxy' && await auth.check('bob', 'a long password')).toBe('bob');
    expect(auth.mode !== 'proxy' && await auth.check('carol', 'another long one')).toBe('carol');
    expect(auth.mode !== 'proxy' && await auth.check('bob', 'another long one')).toBe(null);
  });
});

describe('serve refuses credentials that were not really set', { timeout: 90_000 }, () => {
  const serve = (config: string, env: Record<string, string> = {}) => cli(['serve', '--config', config], { MEMORY_WARDEN_REVIEW_KEY: KEY, ...env });
  const oneLine = (stderr: string) => stderr.trim().split('\n');

  it('a line cut short while the file was appended to: exit 2, one line naming file and line, not a server', () => {
    const cuts = [`bob:scrypt:${salt}:A`, `bob:scrypt:${salt}:${hash.slice(0, 20)}`, `bob:scrypt:${salt.slice(0, 10)}`, `bob:scrypt:${salt}:`, `bob:scr`];
    for (const cut of cuts) {
      const file = usersFile(`alice:scrypt:${salt}:${hash}\n${cut}`);
      const r = serve(configFor(`  auth: { mode: users, usersFile: ${file} }\n`));
      expect(r.code, cut).toBe(2);
      expect(oneLine(r.stderr), cut).toEqual([expect.stringMatching(new RegExp(`^memory-warden: review\\.auth\\.usersFile ${file}:2: expected name:scrypt:SALT:HASH`))]);
    }
  });

  it('a line with a field more: exit 2 naming its line', () => {
    const extra = usersFile(`${good}:admin\n`);
    const r = serve(configFor(`  auth: { mode: users, usersFile: ${extra} }\n`));
    expect(r.code).toBe(2);
    expect(oneLine(r.stderr)).toEqual([expect.stringContaining(`usersFile ${extra}:1: expected`)]);
  });

  it('a shared password shorter than 8 characters: exit 2 naming the variable; 8 and more are taken', () => {
    const config = configFor(`  auth: { mode: password, passwordEnv: MW_SHARED }\n`);
    for (const pw of ['a', '1234567', 'seven77', ' '.repeat(7)]) {
      const r = serve(config, { MW_SHARED: pw, MEMORY_WARDEN_REVIEW_KEY: KEY });
      expect(r.code, pw).toBe(2);
      expect(oneLine(r.stderr)).toEqual(['memory-warden: review.auth.passwordEnv: MW_SHARED is shorter than 8 characters (the review page\'s shared password)']);
    }
    const blank = serve(config, { MW_SHARED: ' '.repeat(12), MEMORY_WARDEN_REVIEW_KEY: KEY });
    expect(blank.code).toBe(2);
    expect(oneLine(blank.stderr)).toEqual(['memory-warden: review.auth.passwordEnv: MW_SHARED is only white space (the review page\'s shared password)']);
    expect(() => makeAuthenticator({ mode: 'password', passwordEnv: 'P' }, { P: '\t \u00a0'.repeat(4) })).toThrow(/only white space/);
    expect(() => makeAuthenticator({ mode: 'password', passwordEnv: 'P' }, { P: '12345678' })).not.toThrow();
    expect(() => makeAuthenticator({ mode: 'password', passwordEnv: 'P' }, { P: '1234567' })).toThrow(/shorter than 8/);
  });

  it('--hash-password takes 8 characters and more, and what it writes is read back', async () => {
    for (const input of ['1234567\n', `${' '.repeat(10)}\n`, '\n', '']) {
      const short = spawnSync(process.execPath, [CLI, 'serve', '--hash-password', 'bob'], { input, encoding: 'utf8' });
      expect(short.status, JSON.stringify(input)).toBe(2);
      expect(short.stdout).toBe('');
    }
    const ok = spawnSync(process.execPath, [CLI, 'serve', '--hash-password', 'bob'], { input: '12345678\r\n', encoding: 'utf8' });
    expect(ok.status).toBe(0);
    const auth = users(usersFile(ok.stdout));
    expect(auth.mode !== 'proxy' && await auth.check('bob', '12345678')).toBe('bob');
  });
});
