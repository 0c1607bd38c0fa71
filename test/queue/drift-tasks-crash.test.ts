import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdirSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { verdictsFor } from '../../src/drift/record.js';
import { daysAgo, insertRows, row, sandbox, withState, type Sandbox } from '../drift/helpers.js';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from '../helpers/redis.js';
import { assertBuilt, killAll, ROOT, spawnWorker, until, type SpawnedWorker } from './fixtures.js';

/** Reads a memory and, while the `hold` file exists, never answers: a worker to kill in the middle of a drift run. */
const HOLD_PLUGIN = `import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { defineVerifier } from 'memory-warden';
const dir = process.env.DRIFT_TEST_DIR;
export default defineVerifier({ name: 'hold', async verify(task) {
  writeFileSync(join(dir, 'reads', task.memory.id + '.' + process.pid), '');
  if (existsSync(join(dir, 'hold'))) await new Promise(() => {});
  return { value: 'yes' };
} });`;

describe('drift through worker processes, one killed mid-run', () => {
  let redis: TestRedis;
  let box: Sandbox;
  const prefix = uniquePrefix('drift-crash');
  const spawned: SpawnedWorker[] = [];

  beforeAll(async () => {
    assertBuilt();
    redis = await startTestRedis();
    box = sandbox();
  });
  afterEach(async () => {
    await killAll(spawned.splice(0));
  });
  afterAll(async () => {
    await deletePrefix(redis.client, prefix);
    await redis.stop();
    box.cleanup();
  });

  it('the drift job is taken over by another worker and each verdict is applied once; the dead run applied nothing', async () => {
    mkdirSync(join(box.dir, 'node_modules'));
    symlinkSync(ROOT, join(box.dir, 'node_modules', 'memory-warden'));
    mkdirSync(join(box.dir, 'reads'));
    writeFileSync(join(box.dir, 'hold.mjs'), HOLD_PLUGIN);
    writeFileSync(join(box.dir, 'hold'), '');
    const now = Date.now();
    const ids = ['m_0', 'm_1', 'm_2'];
    insertRows(box.dbPath, ids.map((id, i) => ({ id, fact: 'f', source: `hold:${i}`, confirmed_at: daysAgo(120 + i, now) })));
    const off = { enabled: false };
    const configFile = join(box.dir, 'warden.yaml');
    writeFileSync(
      configFile,
      JSON.stringify({
        stateDb: box.statePath,
        log: { level: 'info' },
        redis: { url: redis.url, prefix },
        stores: { agent: { db: box.dbPath } },
        worker: {
          http: { port: 0 },
          concurrency: 1,
          attempts: 3,
          backoff: { type: 'fixed', delayMs: 50 },
          // short BullMQ job lock and store lock, so the dead worker's hold lapses quickly
          lockDurationMs: 1000,
          stalledIntervalMs: 500,
          storeLock: { ttlMs: 1000, waitMs: 20_000 },
          shutdownTimeoutMs: 5000,
          schedules: { snapshot: off, prune: off, integrity: off, digest: off, drift: off },
        },
        verify: { plugins: ['./hold.mjs'], cacheDir: './cache', timeoutMs: 60_000, rules: [{ match: { source: '^hold:', fact: '.' }, use: 'hold', with: { expect: 'yes' } }] },
      }),
    );
    const env = { DRIFT_TEST_DIR: box.dir };
    const victim = spawnWorker(configFile, ['worker'], env);
    spawned.push(victim);
    await victim.ready;

    const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
    const queue = new Queue('maintenance', { connection, prefix });
    try {
      const job = await queue.add('drift', { store: 'agent' }, { attempts: 3 });
      const readsBy = (pid: number) => readdirSync(join(box.dir, 'reads')).filter((f) => f.endsWith(`.${pid}`));
      await until('the victim to be reading all three sources', () => readsBy(victim.proc.pid!).length === 3);
      victim.proc.kill('SIGKILL');
      expect((await victim.exited).signal).toBe('SIGKILL');
      // it died mid-run: nothing applied, nothing recorded
      for (const [i, id] of ids.entries()) expect(row(box.dbPath, id)!.confirmed_at).toBe(daysAgo(120 + i, now));
      withState(box.statePath, (state) => ids.forEach((id) => expect(verdictsFor(state, 'agent', id)).toHaveLength(0)));

      rmSync(join(box.dir, 'hold'));
      const rescuer = spawnWorker(configFile, ['worker'], env);
      spawned.push(rescuer);
      await rescuer.ready;
      const done = await rescuer.waitFor('the rescued drift job to complete', (l) => l.msg === 'job done' && l.jobId === job.id, 30_000);
      expect(done.outcome).toBe('ok');
      expect(rescuer.lines.some((l) => l.msg.startsWith('job stalled') && l.jobId === job.id)).toBe(true);
      // 'job done' is logged as the processor returns; BullMQ stores the result and marks the job completed just after.
      const finished = await until('the rescued drift job to be marked completed', async () => {
        const j = await queue.getJob(job.id!);
        return j?.finishedOn ? j : undefined;
      });
      expect(finished.returnvalue).toMatchObject({ due: 3, confirmed: 3 });
      // Each row: one verdict, applied once, although the dead run's tasks were picked up again too.
      withState(box.statePath, (state) => {
        for (const id of ids) expect(verdictsFor(state, 'agent', id).map((v) => v.verdict)).toEqual(['confirmed']);
      });
      for (const [i, id] of ids.entries()) expect(row(box.dbPath, id)!.confirmed_at).not.toBe(daysAgo(120 + i, now));
      expect(readsBy(rescuer.proc.pid!).length).toBeGreaterThanOrEqual(3);
      rescuer.proc.kill('SIGTERM');
      expect((await rescuer.exited).code).toBe(0);
      expect(existsSync(join(box.dir, 'hold'))).toBe(false);
    } finally {
      await queue.close();
      connection.disconnect();
    }
  });
});
