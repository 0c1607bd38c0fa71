import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import type { Job, Queue } from 'bullmq';
import { createLogger } from '../../src/log/logger.js';
import { jobOptions } from '../../src/queue/options.js';
import { startWorker } from '../../src/queue/worker.js';
import { runJob } from '../../src/job/runner.js';
import { JOBS } from '../../jobs/index.js';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from '../helpers/redis.js';
import { loadTestConfig, makeStore, tempDir, until } from './fixtures.js';

async function finished(queue: Queue, job: Job): Promise<Job> {
  return until(`job ${job.id} to finish`, async () => {
    const j = await queue.getJob(job.id!);
    return j && (j.finishedOn || (await j.getState()) === 'failed') ? j : undefined;
  });
}

/**
 * The worker's logs are JSON lines for a log shipper: no progress line may ever get into them, nor onto its stderr,
 * even when that stderr is a terminal (a worker started by hand in a shell).
 */
describe('the worker never shows progress', () => {
  let redis: TestRedis;
  const prefix = uniquePrefix('progress');
  const writes: string[] = [];
  const realWrite = process.stderr.write.bind(process.stderr);
  const realTTY = process.stderr.isTTY;

  beforeAll(async () => {
    redis = await startTestRedis();
    // stderr looks like a terminal, and everything written to it is kept.
    Object.defineProperty(process.stderr, 'isTTY', { value: true, configurable: true });
    process.stderr.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
      writes.push(String(chunk));
      return (realWrite as (c: string | Uint8Array, ...r: unknown[]) => boolean)(chunk, ...rest);
    }) as typeof process.stderr.write;
  });
  afterAll(async () => {
    process.stderr.write = realWrite;
    Object.defineProperty(process.stderr, 'isTTY', { value: realTTY, configurable: true });
    await deletePrefix(redis.client, prefix);
    await redis.stop();
  });

  it('prune, integrity and snapshot run by the worker log JSON lines only, with no progress in them or on stderr', async () => {
    const dir = tempDir('progress');
    const store = makeStore(join(dir, 'agent.db'), { expired: 3000, live: 500 });
    const config = loadTestConfig({ dir, redisUrl: redis.url, prefix, stores: { agent: store }, prune: { batchSize: 100 } });
    const raw: string[] = [];
    const log = createLogger({ level: 'debug', destination: { write: (s: string) => raw.push(s) } as unknown as NodeJS.WritableStream });
    const w = await startWorker({ jobs: JOBS, config: { ...config, snapshot: { ...config.snapshot, root: join(dir, 'snaps') } }, log });
    try {
      for (const name of ['prune', 'integrity', 'snapshot']) {
        const job = await finished(w.queue, await w.queue.add(name, { store: 'agent' }, jobOptions(config)));
        expect(job.failedReason, name).toBeUndefined();
      }
    } finally {
      await w.shutdown('test');
    }
    expect(raw.some((l) => l.includes('"prune done"'))).toBe(true);
    for (const line of raw) {
      expect(line.endsWith('\n')).toBe(true);
      expect(() => JSON.parse(line), line).not.toThrow();
      expect(line).not.toMatch(/\\u001b|\\r/);
    }
    expect(writes.join('')).not.toContain('\x1b[K');
  });

  it('runJob with the worker\'s context (no progress given) runs the loops without a reporter', async () => {
    const dir = tempDir('progress-run');
    const store = makeStore(join(dir, 'agent.db'), { expired: 2000, live: 10 });
    const config = loadTestConfig({ dir, redisUrl: redis.url, prefix, stores: { agent: store }, prune: { batchSize: 100 } });
    const raw: string[] = [];
    const log = createLogger({ level: 'trace', destination: { write: (s: string) => raw.push(s) } as unknown as NodeJS.WritableStream });
    const before = writes.length;
    const result = (await runJob('prune', { store: 'agent' }, { jobs: JOBS, config, log })) as { deleted: number; batches: number };
    expect(result.deleted).toBe(2000);
    expect(result.batches).toBeGreaterThan(1);
    for (const line of raw) expect(() => JSON.parse(line), line).not.toThrow();
    expect(writes.slice(before).join('')).not.toContain('\x1b[K');
  });
});
