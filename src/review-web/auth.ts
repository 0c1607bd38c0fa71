import { readRegularFile } from '../core/read-file.js';
import { randomBytes, scrypt, scryptSync, timingSafeEqual, createHash, type ScryptOptions } from 'node:crypto';
import { configError } from '../core/errors.js';
import type { ReviewWebConfig } from './config.js';
import type { Account } from './sign-in-limits.js';

/**
 * Who may decide. `proxy`: the reverse proxy in front has its own login; the user is read from `userHeader` only
 * when config names it. `password`: one shared password from the environment. `users`: a file of names with
 * scrypt-hashed passwords. Every check is constant-time over equal-length digests.
 */
export type Authenticator =
  | { mode: 'proxy'; userHeader?: string }
  | { mode: 'password' | 'users'; check(user: string, password: string): Promise<string | null>; account(user: string): Account };

const SCRYPT = { N: 16384, r: 8, p: 1 } as const;
const KEY_LEN = 32;

/**
 * scrypt on libuv's thread pool: a sign-in (tens of milliseconds of hashing, on purpose) never holds the review
 * server's one thread, so every other request is answered meanwhile.
 */
const scryptOffThread = (password: string, salt: Buffer, options: ScryptOptions) =>
  new Promise<Buffer>((resolve, reject) => scrypt(password, salt, KEY_LEN, options, (err, key) => (err ? reject(err) : resolve(key))));
/** The shortest password a person may set: the shared one, and what `--hash-password` takes. */
export const MIN_PASSWORD_CHARS = 8;

/** Why a password cannot be set (too short, or only white space: a variable set to blanks), or undefined. */
export function passwordProblem(password: string): string | undefined {
  if (password.length < MIN_PASSWORD_CHARS) return `is shorter than ${MIN_PASSWORD_CHARS} characters`;
  return password.trim() === '' ? 'is only white space' : undefined;
}

/** One line of a users file: `name:scrypt:SALT:HASH` (base64url); `serve --hash-password NAME` prints one. */
export function hashPasswordLine(name: string, password: string): string {
  if (!/^[A-Za-z0-9_.@-]{1,64}$/.test(name)) throw configError(`review users: "${name}" is not a user name of letters, digits, _ . @ -`);
  const salt = randomBytes(16);
  return `${name}:scrypt:${salt.toString('base64url')}:${scryptSync(password, salt, KEY_LEN, SCRYPT).toString('base64url')}`;
}

const digest = (s: string) => createHash('sha256').update(s, 'utf8').digest();
const same = (a: Buffer, b: Buffer) => a.length === b.length && timingSafeEqual(a, b);

// The lengths `--hash-password` writes: a 16-byte salt and a KEY_LEN-byte hash, base64url without padding. Anything
// else is refused, not read: an empty hash made scrypt derive an empty key, and two empty keys compare equal, so a
// line cut short while being appended (`bob:scrypt:SALT:`) matched every password.
const SALT_LEN = 16;
const B64URL = (bytes: number) => `[A-Za-z0-9_-]{${Math.ceil((bytes * 4) / 3)}}`;
const USER_LINE = new RegExp(`^([A-Za-z0-9_.@-]{1,64}):scrypt:(${B64URL(SALT_LEN)}):(${B64URL(KEY_LEN)})$`);

/** The bytes of a base64url field, or null when they would not be written back the same (stray trailing bits). */
function exactBytes(text: string, bytes: number): Buffer | null {
  const b = Buffer.from(text, 'base64url');
  return b.length === bytes && b.toString('base64url') === text ? b : null;
}

function readUsers(file: string): Map<string, { salt: Buffer; hash: Buffer }> {
  let text: string;
  try {
    text = readRegularFile(file);
  } catch (err) {
    throw configError(`review.auth.usersFile ${file}: cannot read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  const users = new Map<string, { salt: Buffer; hash: Buffer }>();
  text.split('\n').forEach((raw, i) => {
    const line = raw.replace(/\r$/, '').trim();
    if (line === '' || line.startsWith('#')) return;
    const where = `review.auth.usersFile ${file}:${i + 1}`;
    const m = USER_LINE.exec(line);
    const salt = m ? exactBytes(m[2]!, SALT_LEN) : null;
    const hash = m ? exactBytes(m[3]!, KEY_LEN) : null;
    if (!m || !salt || !hash) {
      throw configError(`${where}: expected name:scrypt:SALT:HASH with a ${SALT_LEN}-byte salt and a ${KEY_LEN}-byte hash, as \`memory-warden serve --hash-password NAME\` writes (a line cut short?)`);
    }
    if (users.has(m[1]!)) throw configError(`${where}: user ${m[1]} is named twice`);
    users.set(m[1]!, { salt, hash });
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
    const weak = passwordProblem(shared);
    if (weak) throw configError(`review.auth.passwordEnv: ${auth.passwordEnv} ${weak} (the review page's shared password)`);
    const want = digest(shared);
    // A shared password says nothing of who decided: the name typed beside it is recorded, marked as such.
    return {
      mode: 'password',
      check: async (user, password) => (same(digest(password), want) ? `${user.trim() || 'someone'} (shared password)` : null),
      // Every name tries the one shared password: one account, whatever is typed.
      account: () => ({ name: '(shared password)', known: false }),
    };
  }
  if (!auth.usersFile) throw configError('review.auth.usersFile: users mode needs a file of name:scrypt:SALT:HASH lines');
  const users = readUsers(auth.usersFile);
  // Unknown names still pay for one scrypt, so the time taken does not tell which names exist.
  const decoy = { salt: randomBytes(16), hash: randomBytes(KEY_LEN) };
  return {
    mode: 'users',
    check: async (user, password) => {
      const u = users.get(user) ?? decoy;
      const ok = same(await scryptOffThread(password, u.salt, SCRYPT), u.hash);
      return ok && users.has(user) ? user : null;
    },
    account: (user) => ({ name: user, known: users.has(user) }),
  };
}
