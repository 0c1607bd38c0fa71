import { execFileSync } from 'node:child_process';

const AUTHOR = { GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@example.org', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@example.org' };

/** git in `cwd` with a fixed author, as the tests' repositories are made; its stdout. */
export function sh(cwd: string, ...args: string[]): string {
  return shInput(cwd, '', ...args);
}

/** sh with `input` on git's stdin (hash-object --stdin, mktree). */
export function shInput(cwd: string, input: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, input, encoding: 'utf8', env: { ...process.env, ...AUTHOR } });
}
