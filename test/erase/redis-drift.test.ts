import { existsSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { type Job } from 'bullmq';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { JOBS } from '../../jobs/index.js';
import { validateConfig } from '../../src/config/config.js';
import { erase } from '../../src/erase/erase.js';
import { silentLogger } from '../../src/log/logger.js';
import { jobOptions } from '../../src/queue/options.js';
import { startWorker } from '../../src/queue/worker.js';
import { daysAgo, insertRows, NOW, sandbox, type Sandbox } from '../drift/helpers.js';
import { deletePrefix, startTestRedis, uniquePrefix, valuesUnder, type TestRedis } from '../helpers/redis.js';
import { until } from '../queue/fixtures.js';

/**
 * The drift job as the worker runs it (the real job, its real verify tasks): a verifier whose answer quotes the
 * memory's text leaves it in the task queue's event stream and in the drift job's own result. Erase of the person
 * removes both, in Redis, and nothing of the other person's.
 */
const PACKAGE_ROOT = resolve(import.meta.dirname, '../..');
const CAROL = 'Carol Whitfield keeps the vault code 4471 in her left shoe';
const BOB = 'Bob Arkwright hides the spare key under the blue flowerpot';

let redis: TestRedis;
let box: Sandbox | undefined;
let prefix: string | undefined;
beforeAll(async () => {
  if (!existsSync(join(PACKAGE_ROOT, 'dist/src/index.js'))) throw new Error('build first (npx tsc -p .): plugins import the built package');
  redis = await startTestRedis();
});
afterEach(async () => {
  if (prefix) await deletePrefix(redis.client, prefix);
  box?.cleanup();
});
afterAll(async () => {
  await redis.stop();
});

const holding = async (needle: string) => (await valuesUnder(redis.client, prefix!)).filter((v) => v.includes(needle)).length;

describe('erase reaches what a drift run under the worker left in Redis', { timeout: 120_000 }, () => {
  it('the verify tasks\' answers and the drift job\'s result quoting her memory go; Bob\'s stay', async () => {
    const b = (box = sandbox());
    prefix = uniquePrefix('erase-drift');
    mkdirSync(join(b.dir, 'node_modules'));
    symlinkSync(PACKAGE_ROOT, join(b.dir, 'node_modules', 'memory-warden'));
    mkdirSync(join(b.dir, 'plugins'));
    const plugin = join(b.dir, 'plugins', 'quote.mjs');
    writeFileSync(plugin, `import { defineVerifier } from 'memory-warden';
export default defineVerifier({ name: 'quote', async verify(task) { return { value: 'the page says: ' + task.memory.fact }; } });`);
    insertRows(b.dbPath, [
      { id: 'm_carol', subject: 'carol', fact: CAROL, source: 'quote:carol', confirmed_at: daysAgo(200) },
      { id: 'm_bob', subject: 'bob', fact: BOB, source: 'quote:bob', confirmed_at: daysAgo(200) },
    ]);
    const off = { enabled: false };
    const cfg = validateConfig({
      stateDb: b.statePath,
      stores: { agent: { db: b.dbPath } },
      snapshot: { root: join(b.dir, 'backups') },
      redis: { url: redis.url, prefix },
      worker: { http: { enabled: false }, concurrency: 1, attempts: 1, shutdownTimeoutMs: 20_000, schedules: { snapshot: off, prune: off, integrity: off, digest: off, drift: off } },
      verify: { cacheDir: join(b.dir, 'cache'), plugins: [plugin], rules: [{ name: 'quote', match: { source: '^quote:', fact: '.' }, use: 'quote', with: { expect: 'nothing like it' } }] },
    });
    const w = await startWorker({ jobs: JOBS, config: cfg, log: silentLogger, now: () => NOW });
    try {
      const job = await w.queue.add('drift', { store: 'agent' }, jobOptions(cfg));
      await until('the drift job to finish', async () => {
        const j = (await w.queue.getJob(job.id!)) as Job | undefined;
        if (j && (await j.getState()) === 'failed') throw new Error(`drift failed: ${j.failedReason}`);
        return j?.finishedOn;
      }, 60_000);
    } finally {
      await w.shutdown('test');
    }
    const carolBefore = await holding('vault code 4471');
    const bobBefore = await holding('blue flowerpot');
    expect(carolBefore, 'the run left her text in Redis').toBeGreaterThan(0);
    expect(bobBefore).toBeGreaterThan(0);

    const receipt = await erase(cfg, 'agent', { user: 'carol' }, { now: () => NOW, log: silentLogger });
    expect(receipt.redis).toMatchObject({ searched: true, queued: [] });
    const placed = Object.fromEntries(receipt.places.map((p) => [p.place, p.count]));
    expect(placed['redis:jobs']! + placed['redis:events']!).toBeGreaterThan(0);
    expect(receipt.snapshots.found.length).toBe(receipt.snapshots.deleted.length);
    expect(await holding('vault code 4471')).toBe(0);
    expect(await holding('blue flowerpot')).toBe(bobBefore);
  });
});
