import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * The README's first lines: after `npm ci && npm run demo` in a clone, every `memory-warden …` command of the docs
 * runs there as `npx memory-warden …` (npm runs the package's own bin; nothing is installed globally).
 */
const ROOT = fileURLToPath(new URL('..', import.meta.url));

describe('the command in a clone', () => {
  it('npx memory-warden runs the built CLI, as the README says', () => {
    expect(readFileSync(new URL('../README.md', import.meta.url), 'utf8')).toMatch(/^npx memory-warden --help /m);
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
    // npx is npm exec: npm's own program runs it here (`--no`: install nothing).
    const r = spawnSync('npm', ['exec', '--no', '--', 'memory-warden', '--version'], {
      cwd: ROOT, encoding: 'utf8', timeout: 60_000, env: { ...process.env, npm_config_loglevel: 'error', npm_config_update_notifier: 'false' },
    });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe(pkg.version);
  }, 90_000);
});
