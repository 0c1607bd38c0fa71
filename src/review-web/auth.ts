import { readRegularFile } from '../read-file.js';
import { randomBytes, scryptSync, timingSafeEqual, createHash } from 'node:crypto';
import { configError } from '../errors.js';
import type { ReviewWebConfig } from './config.js';

/**
 * Who may decide. `proxy`: the reverse proxy in front has its own login; the user is read from `userHeader` only
 * when config names it. `password`: one shared password from the environment. `users`: a file of names with
 * scrypt-hashed passwords. Every check is constant-time over equal-length digests.
 */
export type Authenticator =
  | { mode: 'proxy'; userHeader?: string }
  | { mode: 'password' | 'users'; check(user: string, password: string): string | null };

const SCRYPT = { N: 16384, r: 8, p: 1 } as const;
const KEY_LEN = 32;

/** One line of a users file: `name:scrypt:SALT:HASH` (base64url); `serve --hash-password NAME` prints one. */
export function hashPasswordLine(name: string, password: string): string {
  if (!/^[A-Za-z0-9_.@-]{1,64}$/.test(name)) throw configError(`review users: "${name}" is not a user name of letters, digits, _ . @ -`);
  const salt = randomBytes(16);
  return `${name}:scrypt:${salt.toString('base64url')}:${scryptSync(password, salt, KEY_LEN, SCRYPT).toString('base64url')}`;
}

const digest = (s: string) => createHash('sha256').update(s, 'utf8').digest();
const same = (a: Buffer, b: Buffer) => a.length === b.length && timingSafeEqual(a, b);

function readUsers(file: string): Map<string, { salt: Buffer; hash: Buffer }> {
  let text: string;
  try {
    text = readRegularFile(file);
  } catch (err) {
    throw configError(`review.auth.usersFile ${file}: cannot read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  const users = new Map<string, { salt: Buffer; hash: Buffer }>();
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const m = /^([A-Za-z0-9_.@-]{1,64}):scrypt:([A-Za-z0-9_-]+):([A-Za-z0-9_-]+)$/.exec(line);
    if (!m) throw configError(`review.auth.usersFile ${file}:${i + 1}: expected name:scrypt:SALT:HASH (memory-warden serve --hash-password NAME)`);
    users.set(m[1]!, { salt: Buffer.from(m[2]!, 'base64url'), hash: Buffer.from(m[3]!, 'base64url') });
  });
  if (users.size === 0) throw configError(`review.auth.usersFile ${file}: no users`);
  return users;
}

/** Built once at start: a missing password, users file or header setting fails `serve` before it listens. */
export function makeAuthenticator(auth: ReviewWebConfig['auth'], env: NodeJS.ProcessEnv = process.env): Authenticator {
  if (auth.mode === 'proxy') return { mode: 'proxy', ...(auth.userHeader ? { userHeader: auth.userHeader.toLowerCase() } : {}) };
  if (auth.mode === 'password') {
    const shared = env[auth.passwordEnv];
    if (!shared) throw configError(`review.auth.passwordEnv: environment variable ${auth.passwordEnv} is not set (the review page's shared password)`);
    const want = digest(shared);
    // A shared password says nothing of who decided: the name typed beside it is recorded, marked as such.
    return { mode: 'password', check: (user, password) => (same(digest(password), want) ? `${user.trim() || 'someone'} (shared password)` : null) };
  }
  if (!auth.usersFile) throw configError('review.auth.usersFile: users mode needs a file of name:scrypt:SALT:HASH lines');
  const users = readUsers(auth.usersFile);
  // Unknown names still pay for one scrypt, so the time taken does not tell which names exist.
  const decoy = { salt: randomBytes(16), hash: randomBytes(KEY_LEN) };
  return {
    mode: 'users',
    check: (user, password) => {
      const u = users.get(user) ?? decoy;
      const ok = same(scryptSync(password, u.salt, u.hash.length, SCRYPT), u.hash);
      return ok && users.has(user) ? user : null;
    },
  };
}
