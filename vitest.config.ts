import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'examples/**/*.test.ts'],
    // Guards against a hang, not limits on speed (that is `npm run bench`): generous enough that a test starting a
    // dozen CLI processes still finishes on a 2-core machine whose cores something else keeps busy.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // Fails a test file that reads outside the repository (test/helpers/outside-reads.ts says what it sees).
    setupFiles: ['test/helpers/outside-reads.setup.ts'],
  },
});
