/**
 * Vitest setup (vitest.config.ts): every test file runs with node:fs guarded (test/helpers/outside-reads.ts), in a
 * home folder of its own, and fails after its last test when it, or the code it tested, read outside the repository.
 */
import { afterAll } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { installOutsideGuard, takeOutsideReads } from './outside-reads.js';

// The machine's home is outside the repository too: what a default under ~ finds there (a state db left by someone's
// run, a ~/.gitconfig) is not on a fresh machine. A clean one per test file, for it and the processes it starts.
const home = mkdtempSync(join(tmpdir(), 'mw-home-'));
process.env.HOME = home;

installOutsideGuard();

afterAll(() => {
  rmSync(home, { recursive: true, force: true });
  const outside = takeOutsideReads();
  if (outside.length > 0) {
    throw new Error(`read outside the repository (a clone with nothing beside it has none of these; vendor what the tests need under test/vendor/): ${outside.join(', ')}`);
  }
});
