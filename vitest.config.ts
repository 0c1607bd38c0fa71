import { configDefaults, defineConfig } from 'vitest/config';

// Tests that drive Mastra's own SDK (*.node24.test.ts) need Node 22.13 or later: they run in CI's Node 24 pass.
const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
const mastraSdkNode = major > 22 || (major === 22 && minor >= 13);

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'examples/**/*.test.ts'],
    exclude: mastraSdkNode ? configDefaults.exclude : [...configDefaults.exclude, 'test/**/*.node24.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
  },
});
