import { configDefaults, defineConfig } from 'vitest/config';
import LongestFirst from './test/helpers/sequencer.js';

// Tests that drive Mastra's own SDK (*.node24.test.ts) need Node 22.13 or later: they run in CI's Node 24 pass.
const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
const mastraSdkNode = major > 22 || (major === 22 && minor >= 13);
const exclude = mastraSdkNode ? configDefaults.exclude : [...configDefaults.exclude, 'test/**/*.node24.test.ts'];

// Files whose processes must meet deadlines of a real protocol while they run (a Sentinel failover, a fleet's
// scheduled runs every second on two hosts): they run after the rest, one at a time, so the cores are theirs.
const ALONE = ['test/queue/redis-sentinel-fleet.test.ts', 'test/queue/fleet-postgres.test.ts'];

const common = {
  // Guards against a hang, not limits on speed (that is `npm run bench`): generous enough that a test starting a
  // dozen CLI processes still finishes on a 2-core machine whose cores something else keeps busy.
  testTimeout: 120_000,
  hookTimeout: 120_000,
  pool: 'forks' as const,
  // Fails a test file that reads outside the repository (test/helpers/outside-reads.ts says what it sees).
  setupFiles: ['test/helpers/outside-reads.setup.ts'],
};

export default defineConfig({
  test: {
    // The longest files first, by a recorded run (test/durations.json), on a fresh clone too.
    sequence: { sequencer: LongestFirst },
    projects: [
      {
        // Most files wait on child processes, servers and disks more than they compute: three at a time on two cores.
        test: { ...common, name: 'suite', include: ['test/**/*.test.ts', 'examples/**/*.test.ts'], exclude: [...exclude, ...ALONE], maxWorkers: 3, sequence: { groupOrder: 0 } },
      },
      {
        test: { ...common, name: 'alone', include: ALONE, exclude, maxWorkers: 1, sequence: { groupOrder: 1 } },
      },
    ],
  },
});
