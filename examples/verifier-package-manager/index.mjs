// @ts-check
/**
 * An example verifier plugin: which package manager a project uses, judged from the files in its folder.
 * It checks facts like "prefers pnpm" — a fact no clock makes false, only a decision in the repository.
 *
 * It judges by itself, comparing what it reads with what the memory says: "prefers yarn" in a folder with
 * pnpm-lock.yaml is contradicted, "prefers pnpm" there confirmed, and a memory naming no package manager (or more
 * than one) cannot be judged. The rule needs no `expect`: the memory says what to expect.
 *
 * Use it from your config (paths relative to the config file):
 *
 *   verify:
 *     plugins: [./examples/verifier-package-manager/index.mjs]
 *     allow:
 *       fileRoots: [/srv/projects]
 *     rules:
 *       - match: { source: "^project:(?<dir>[a-z0-9-]+)$", subject: "package manager" }
 *         use: package-manager
 *         with: { dir: "${dir}" }
 *         replacement: "prefers ${value}"
 */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { defineVerifier } from 'memory-warden';

/** The package managers this verifier knows, as a memory would name them. */
const MANAGERS = ['npm', 'pnpm', 'yarn', 'bun'];

/**
 * The package manager a memory claims: the one of MANAGERS its fact names as a word ("prefers yarn", "uses pnpm 9"),
 * or undefined when it names none or several ("yarn, not npm" says two things; a person reads it). Memory text is
 * hostile: it is only matched here, never used as a pattern or a path.
 * @param {string} fact
 */
export function claimedManager(fact) {
  const named = MANAGERS.filter((m) => new RegExp(`(?<![\\w@/-])${m}(?![\\w/-])`, 'i').test(fact));
  return named.length === 1 ? named[0] : undefined;
}

/** Lockfiles, most specific first. @type {[file: string, manager: string][]} */
const LOCKFILES = [
  ['pnpm-lock.yaml', 'pnpm'],
  ['bun.lockb', 'bun'],
  ['bun.lock', 'bun'],
  ['yarn.lock', 'yarn'],
  ['package-lock.json', 'npm'],
];

export default defineVerifier({
  name: 'package-manager',
  description: 'the package manager of a project folder: packageManager in package.json, else its lockfile',
  // Without a zod dependency: any object with safeParse validates the rule's `with`.
  params: {
    safeParse(value) {
      const v = /** @type {{ dir?: unknown }} */ (value);
      if (v && typeof v === 'object' && typeof v.dir === 'string' && Object.keys(v).length === 1) return { success: true, data: { dir: v.dir } };
      return { success: false, error: { issues: [{ path: ['dir'], message: 'with: { dir: PATH } and nothing else' }] } };
    },
  },
  async verify(task, ctx) {
    // What the memory says comes first: a memory this verifier cannot judge is not read for.
    const claimed = claimedManager(task.memory.fact);
    if (!claimed) return { verdict: 'unverifiable', reason: `the memory names no one package manager (${MANAGERS.join(', ')})` };
    // Checked against verify.allow.fileRoots: a ".." or a symlink out of the roots is refused, never read.
    const dir = await ctx.resolveFile(task.params.dir);
    // Once per run per folder, however many memories talk about it.
    const { names, manifest } = await ctx.once(`package-manager:${dir}`, async () => {
      const names = await readdir(dir);
      // ctx.readFile, not readFile: package.json may be a symlink out of the roots, or become one as it is opened.
      const manifest = names.includes('package.json') ? JSON.parse((await ctx.readFile(join(dir, 'package.json'))).text) : {};
      return { names, manifest };
    });
    const declared = typeof manifest.packageManager === 'string' ? manifest.packageManager.split('@')[0] : undefined;
    /** @type {{ value: string, from: string } | undefined} */
    let read;
    if (declared) read = { value: declared, from: 'package.json packageManager' };
    else {
      const found = LOCKFILES.filter(([file]) => names.includes(file));
      if (found.length === 0) return { verdict: 'unverifiable', reason: `${dir}: no lockfile and no packageManager field` };
      const managers = [...new Set(found.map(([, m]) => m))];
      if (managers.length > 1) return { verdict: 'unverifiable', reason: `${dir}: lockfiles of ${managers.join(' and ')}` };
      read = { value: /** @type {string} */ (managers[0]), from: /** @type {string} */ (found[0]?.[0]) };
    }
    // The verdict compares the two: evidence existing confirms nothing, agreeing with the memory does.
    const verdict = read.value === claimed ? 'confirmed' : 'contradicted';
    return { value: read.value, verdict, evidence: { dir, from: read.from, claimed } };
  },
});
