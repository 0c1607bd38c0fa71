// @ts-check
/**
 * An example verifier plugin: which package manager a project uses, judged from the files in its folder.
 * It checks facts like "prefers pnpm" — a fact no clock makes false, only a decision in the repository.
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
 *         with: { dir: "${dir}", expect: pnpm }
 *         replacement: "prefers ${value}"
 */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { defineVerifier } from 'memory-warden';

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
    if (declared) return { value: declared, evidence: { dir, from: 'package.json packageManager' } };
    const found = LOCKFILES.filter(([file]) => names.includes(file));
    if (found.length === 0) return { verdict: 'unverifiable', reason: `${dir}: no lockfile and no packageManager field` };
    const managers = [...new Set(found.map(([, m]) => m))];
    if (managers.length > 1) return { verdict: 'unverifiable', reason: `${dir}: lockfiles of ${managers.join(' and ')}` };
    return { value: managers[0], evidence: { dir, from: found[0]?.[0] } };
  },
});
