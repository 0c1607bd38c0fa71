import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { isAbsolute, join, resolve } from 'node:path';
import { z } from '../vendor/zod.js';
import { defineVerifier } from './define.js';
import { git, transportOf, trustedOwnersConfig } from './git-cli.js';
import { FORMATS, formatOf, parseContent } from './formats.js';
import { select } from './select.js';
import { Refusal } from './types.js';

const params = z.strictObject({
  /** Exactly one of verify.allow.gitRepos: a local path or a URL. */
  repo: z.string().min(1),
  /** Path inside the repository. */
  path: z.string().min(1),
  /** Branch, tag or commit; default the repository's HEAD. */
  ref: z.string().min(1).default('HEAD'),
  /** `file`: the file at the ref; `lastCommit`: the latest commit touching the path ({ commit, committedAt, subject }). */
  read: z.enum(['file', 'lastCommit']).default('file'),
  format: z.enum(FORMATS).optional(),
  select: z.string().min(1).optional(),
});
type Params = z.infer<typeof params>;

/** Branch and tag names as people write them; nothing git would read as an option, a range or a reflog. */
const SAFE_REF = /^[A-Za-z0-9_][A-Za-z0-9._/-]*$/;
/** A commit id, full or abbreviated, as a memory would quote one. */
const OBJECT_ID = /^[0-9a-f]{4,64}$/i;

const isUrl = (r: string) => /^[a-z][a-z0-9+.-]*:\/\//i.test(r) || /^[^/]+@[^/]+:/.test(r);

/** The allowlisted repository this names, or a refusal. Local paths compare as absolute paths. */
export function allowedRepo(repo: string, allowed: readonly string[]): string {
  if (repo.startsWith('-')) throw new Refusal(`repository ${JSON.stringify(repo)} looks like an option`);
  const key = isUrl(repo) || !isAbsolute(repo) ? repo : resolve(repo);
  const hit = allowed.find((a) => a === repo || (!isUrl(a) && isAbsolute(key) && resolve(a) === key));
  if (!hit) throw new Refusal(`repository ${JSON.stringify(repo)} is not on verify.allow.gitRepos`);
  return hit;
}

function checkPathInRepo(path: string): void {
  if (path.includes('\0')) throw new Refusal('path contains a NUL byte');
  if (isAbsolute(path) || path.startsWith('-')) throw new Refusal(`path ${JSON.stringify(path)} must be relative to the repository`);
  if (path.split(/[\\/]+/).includes('..')) throw new Refusal(`path ${JSON.stringify(path)} has a ".." segment`);
}

function checkRef(ref: string): void {
  if (!SAFE_REF.test(ref) || ref.includes('..') || ref.endsWith('.lock') || ref.endsWith('/')) {
    throw new Refusal(`ref ${JSON.stringify(ref)} is not a plain branch, tag or commit name`);
  }
}

/**
 * A mirror clone under the cache folder, cloned once and then fetched: at most once per run (ctx.once), however
 * many memories read from it. A new clone is made beside and renamed into place, so a killed run leaves no half
 * clone behind.
 *
 * The mirror holds the repository's own objects only. A local clone would copy (hard-link) every object file,
 * dangling ones too, and the repository's objects/info/alternates, through which the mirror then reads objects of
 * another repository, one not on gitRepos. `--no-local` clones a local path through git's transport, as a remote:
 * what is reachable from the repository's refs, stored in the mirror. A mirror an older version cloned locally
 * (with an alternates file) is made again.
 */
async function syncClone(repo: string, cacheDir: string, signal: AbortSignal): Promise<string> {
  const dir = join(cacheDir, 'git', createHash('sha256').update(repo).digest('hex').slice(0, 24) + '.git');
  await mkdir(join(cacheDir, 'git'), { recursive: true, mode: 0o700 });
  const transport = transportOf(repo);
  const globalConfig = transport === 'file' ? await trustedOwnersConfig(join(cacheDir, 'git')) : undefined;
  if (existsSync(join(dir, 'HEAD'))) {
    if (!existsSync(join(dir, 'objects', 'info', 'alternates'))) {
      await git(['-C', dir, 'fetch', '--prune', '--quiet', 'origin'], { signal, transport, globalConfig });
      return dir;
    }
    await rm(dir, { recursive: true, force: true });
  }
  const tmp = `${dir}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    await git(['clone', '--mirror', '--no-local', '--quiet', '--', repo, tmp], { signal, transport, globalConfig });
    await rename(tmp, dir).catch(async (err: NodeJS.ErrnoException) => {
      if (!existsSync(join(dir, 'HEAD'))) throw err; // someone else's clone won the race: use theirs
    });
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
  return dir;
}

/**
 * Whether `commit` is in the history of one of the mirror's refs (the repository's branches, tags and other refs as
 * last fetched). A commit id from memory text could otherwise name any commit the mirror holds: one left behind by
 * a force-push or a deleted branch, which the repository itself no longer shows.
 */
async function reachable(dir: string, commit: string, signal: AbortSignal): Promise<boolean> {
  return (await git(['-C', dir, 'for-each-ref', '--count=1', '--format=%(refname)', '--contains', commit], { signal })).trim() !== '';
}

/** A file at a ref, or the latest commit touching a path, in an allowlisted repository. */
export default defineVerifier<Params>({
  name: 'git',
  description: 'a file at a ref (or the latest commit touching a path) in a repository on verify.allow.gitRepos',
  params,
  async verify({ params: p }, ctx) {
    const repo = allowedRepo(p.repo, ctx.allow.gitRepos);
    checkPathInRepo(p.path);
    checkRef(p.ref);
    const dir = await ctx.once(`git-sync:${repo}`, () => syncClone(repo, ctx.cacheDir, ctx.signal));
    const commit = await git(['-C', dir, 'rev-parse', '--verify', '--quiet', '--end-of-options', `${p.ref}^{commit}`], { signal: ctx.signal }).then(
      (out) => out.trim(),
      () => '',
    );
    // Nothing is read at a commit outside the repository's history. A commit id the fetched mirror lacks is not in
    // it either: refused alike, so that the answer does not tell whether such an object exists.
    const unreachable = () => new Refusal(`${repo}: ${p.ref} is not a commit reachable from the repository's refs`);
    if (!commit && OBJECT_ID.test(p.ref)) throw unreachable();
    if (!commit) return { verdict: 'unverifiable', reason: `${repo}: no commit ${p.ref}` };
    if (!(await reachable(dir, commit, ctx.signal))) throw unreachable();
    const evidence: Record<string, unknown> = { repo, ref: p.ref, commit, path: p.path };
    if (p.read === 'lastCommit') {
      const out = await ctx.once(`git-log:${dir}:${commit}:${p.path}`, () =>
        git(['-C', dir, 'log', '-1', '--format=%H%x00%cI%x00%s', commit, '--', p.path], { signal: ctx.signal }),
      );
      const [hash, committedAt, subject] = out.trim().split('\0');
      if (!hash) return { verdict: 'unverifiable', reason: `${repo}: no commit at ${p.ref} touches ${p.path}`, evidence };
      const value = { commit: hash, committedAt, subject };
      return { value: p.select ? select(value, p.select) : value, evidence };
    }
    let text: string;
    try {
      text = await ctx.once(`git-blob:${dir}:${commit}:${p.path}`, () => git(['-C', dir, 'cat-file', 'blob', `${commit}:${p.path}`], { signal: ctx.signal }));
    } catch {
      return { verdict: 'unverifiable', reason: `${repo}: no file ${p.path} at ${p.ref} (${commit.slice(0, 12)})`, evidence };
    }
    const format = p.format ?? formatOf(p.path);
    let parsed: unknown;
    try {
      parsed = parseContent(text, format);
    } catch (err) {
      return { verdict: 'unverifiable', reason: `${repo} ${p.path}: not valid ${format}: ${(err as Error).message.split('\n')[0]}`, evidence };
    }
    const value = p.select ? select(parsed, p.select) : parsed;
    if (value === undefined) return { verdict: 'unverifiable', reason: `${repo} ${p.path}: nothing at ${p.select}`, evidence };
    return { value, evidence };
  },
});
