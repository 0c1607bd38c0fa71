import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

const MAX_OUTPUT = 10 * 1024 * 1024;
/** The operator's GIT_* variables git still sees: how to reach a server (ssh, TLS), and where git's programs are. */
const GIT_ENV_KEPT = new Set(['GIT_SSH', 'GIT_SSH_COMMAND', 'GIT_SSH_VARIANT', 'GIT_SSL_CAINFO', 'GIT_SSL_CAPATH', 'GIT_SSL_CERT', 'GIT_SSL_KEY', 'GIT_EXEC_PATH']);
/** Transports a repository on gitRepos may be reached by. */
const TRANSPORTS = new Set(['file', 'git', 'http', 'https', 'ssh']);

/**
 * The git CLI with an argument vector: no shell ever sees a repository, ref or path. And nothing outside the
 * allowed address leads git elsewhere:
 * - no redirect is followed (http.followRedirects=false; git's default follows the first request's, to any host),
 *   which also keeps git from a dumb HTTP server's http-alternates;
 * - only `transport`, the allowed repository's own (none when not given: commands on the mirror need none);
 * - no config but the repository's: not the system's nor the user's (GIT_CONFIG_NOSYSTEM, GIT_CONFIG_GLOBAL),
 *   where a `url.*.insteadOf` rewrites an address, a credential helper runs a program, a proxy is set; only
 *   their safe.directory entries, given as `globalConfig` (trustedOwnersConfig);
 * - none of the environment's GIT_* variables but GIT_ENV_KEPT: GIT_CONFIG_*, GIT_DIR,
 *   GIT_ALTERNATE_OBJECT_DIRECTORIES and the like change which config, repository or objects git uses.
 */
export function git(args: string[], opts: { cwd?: string; signal?: AbortSignal; transport?: string; globalConfig?: string } = {}): Promise<string> {
  const inherited = Object.entries(process.env).filter(([name]) => !name.startsWith('GIT_') || GIT_ENV_KEPT.has(name));
  const env = {
    ...Object.fromEntries(inherited),
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_CONFIG_GLOBAL: opts.globalConfig ?? '/dev/null',
    GIT_ALLOW_PROTOCOL: opts.transport ?? '',
    GIT_TERMINAL_PROMPT: '0',
    GIT_ASKPASS: 'true',
    LC_ALL: 'C',
  };
  return new Promise((resolvePromise, reject) => {
    execFile(
      'git',
      ['-c', 'http.followRedirects=false', '-c', 'core.hooksPath=/dev/null', ...args],
      { cwd: opts.cwd, signal: opts.signal, maxBuffer: MAX_OUTPUT, encoding: 'utf8', env },
      (err, stdout, stderr) => {
        if (err) {
          const why = String(stderr).trim().split('\n')[0] || err.message.split('\n')[0];
          reject(new Error(`git ${args[0] === '-C' ? args[2] : args[0]}: ${why}`));
        } else resolvePromise(stdout);
      },
    );
  });
}

/** The transport a repository's address needs: `file` for a path, `ssh` for user@host:path, else its scheme. */
export function transportOf(repo: string): string {
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(repo)?.[1]?.toLowerCase();
  const transport = scheme === undefined ? (/^[^/]+@[^/]+:/.test(repo) ? 'ssh' : 'file') : scheme === 'git+ssh' || scheme === 'ssh+git' ? 'ssh' : scheme;
  return TRANSPORTS.has(transport) ? transport : ''; // another (a remote helper): git may use none
}

/**
 * A global config holding only the safe.directory entries of the system's and the user's git config, for a clone or
 * fetch of a local repository: git reads neither config here (see git()), and without them a repository on gitRepos
 * that another user owns, which the operator trusted there, could no longer be read. /dev/null when there are
 * none. Written once per content, into `dir` (the cache folder's).
 */
export async function trustedOwnersConfig(dir: string): Promise<string> {
  // In git's order, an empty value forgetting those before it, as git reads them.
  const values = (await Promise.all(['--system', '--global'].map((scope) => operatorConfig(scope, 'safe.directory')))).flat();
  const entries = values.reduce<string[]>((kept, v) => (v === '' ? [] : [...kept, v]), []);
  if (entries.length === 0) return '/dev/null';
  const quoted = (v: string) => `"${v.replace(/[\\"]/g, '\\$&').replace(/\n/g, '\\n')}"`;
  const text = `[safe]\n${entries.map((e) => `\tdirectory = ${quoted(e)}\n`).join('')}`;
  const file = join(dir, `safe-directories-${createHash('sha256').update(text).digest('hex').slice(0, 16)}.gitconfig`);
  if (!existsSync(file)) {
    const tmp = `${file}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
    await writeFile(tmp, text, { mode: 0o600 });
    await rename(tmp, file); // whole or not at all: another run may be reading it
  }
  return file;
}

/** Every value of `key` in one scope of git config, as git finds it in the operator's environment; none on error. */
function operatorConfig(scope: string, key: string): Promise<string[]> {
  return new Promise((resolvePromise) =>
    execFile('git', ['config', scope, '-z', '--get-all', key], { encoding: 'utf8' }, (err, out) => resolvePromise(err ? [] : out.split('\0').slice(0, -1))),
  );
}
