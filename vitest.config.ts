import { configDefaults, defineConfig } from 'vitest/config';

// Tests that drive Mastra's own SDK (*.node24.test.ts) need Node 22.13 or later: they run in CI's Node 24 pass.
const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
const mastraSdkNode = major > 22 || (major === 22 && minor >= 13);

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'examples/**/*.test.ts'],
    exclude: mastraSdkNode ? configDefaults.exclude : [...configDefaults.exclude, 'test/**/*.node24.test.ts'],
    // Guards against a hang, not limits on speed (that is `npm run bench`): generous enough that a test starting a
    // dozen CLI processes still finishes on a 2-core machine whose cores something else keeps busy.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // Fails a test file that reads outside the repository (test/helpers/outside-reads.ts says what it sees).
    setupFiles: ['test/helpers/outside-reads.setup.ts'],
  },
});
