import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { JOBS } from '../../jobs/index.js';
import { silentLogger } from '../../src/log/logger.js';
import { runJob } from '../../src/job/runner.js';
import { startWorker } from '../../src/queue/worker.js';
import { openStateDb } from '../../src/state/state.js';
import { parseInstant } from '../../src/time/instants.js';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from '../helpers/redis.js';
import { loadTestConfig, makeStore, tempDir } from '../queue/fixtures.js';

/** What the job-overdue rules read must not vanish when a worker restarts: it comes back from the state db. */
describe('a restarted worker', () => {
  let redis: TestRedis;
  const prefix = uniquePrefix('ops-restart');

  beforeAll(async () => {
    redis = await startTestRedis();
  });
  afterAll(async () => {
    await deletePrefix(redis.client, prefix);
    await redis.stop();
  });

  it('exports the last successes of its state db before any job runs; a store without one has no figure', async () => {
    const dir = tempDir('ops-restart');
    const stores = { ran: makeStore(join(dir, 'ran.db'), { expired: 2, live: 1 }), fresh: makeStore(join(dir, 'fresh.db'), { live: 1 }) };
    const config = loadTestConfig({ dir, redisUrl: redis.url, prefix, stores });
    await runJob('prune', { store: 'ran' }, { jobs: JOBS, config, log: silentLogger }); // recorded in the state db, as before a restart
    const db = openStateDb(config.stateDb);
    const finished = (db.prepare(`SELECT finished_at FROM job_runs WHERE job = 'prune' AND store = 'ran' AND outcome = 'ok'`).pluck().get() as string);
    db.close();

    const w = await startWorker({ jobs: JOBS, config, log: silentLogger });
    try {
      const text = await (await fetch(`${w.http!.url}/metrics`)).text();
      const lines = text.split('\n').filter((l) => l.startsWith('memory_warden_last_success_timestamp_seconds{'));
      expect(lines).toEqual([`memory_warden_last_success_timestamp_seconds{job="prune",store="ran",host="solo"} ${Math.floor(parseInstant(finished)! / 1000)}`]);
    } finally {
      await w.shutdown();
    }
  });
});
