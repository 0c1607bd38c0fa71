import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'examples/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    // Fails a test file that reads outside the repository (test/helpers/outside-reads.ts says what it sees).
    setupFiles: ['test/helpers/outside-reads.setup.ts'],
  },
});
