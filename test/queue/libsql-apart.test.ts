import { describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MastraFixture } from '../layouts/mastra-fixture.js';
import { countRows, makeStore, ROOT, spawnWorker, tempDir, useWorkerProcesses } from './fixtures.js';

/**
 * libsql's driver aborts the process it runs in on some inputs (SIGABRT: a Rust panic, no exception). A worker runs
 * the jobs of a store read through libsql (Mastra) in processes of their own: a job the driver kills fails, named,
 * and the worker goes on with every other store's jobs. The real worker, the real Redis; the driver's abort is made
 * by test/helpers/abort-in-libsql.cjs (process.abort() where the driver would panic).
 */
describe('a store job that the native driver aborts does not take the worker down', () => {
  const procs = useWorkerProcesses();

  it('the poisoned store\'s job fails with the signal named; a healthy Mastra store and a warden store are served before and after', async () => {
    const dir = tempDir('libsql-apart');
    const prefix = procs.prefix('libsql-apart');
    const now = Date.now();
    for (const name of ['healthy', 'poisoned']) {
      const fx = MastraFixture.create(join(dir, `${name}.db`));
      fx.thread('user-ana', `Ana's ${name} note`, now);
      fx.close();
    }
    const agent = makeStore(join(dir, 'agent.db'), { expired: 3, live: 2 });
    const off = { enabled: false };
    const config = {
      stateDb: join(dir, 'state.db'),
      log: { level: 'info' },
      redis: { url: procs.redis().url, prefix },
      worker: { host: 'solo', http: { port: 0 }, concurrency: 1, attempts: 1, shutdownTimeoutMs: 20_000, schedules: { snapshot: off, prune: off, integrity: off, digest: off, drift: off } },
      stores: { agent: { db: agent }, healthy: { layout: 'mastra', db: join(dir, 'healthy.db') }, poisoned: { layout: 'mastra', db: join(dir, 'poisoned.db') } },
    };
    const file = join(dir, 'config.yaml');
    writeFileSync(file, JSON.stringify(config));
    const worker = spawnWorker(file, ['worker'], { NODE_OPTIONS: `--require ${join(ROOT, 'test/helpers/abort-in-libsql.cjs')}`, MW_ABORT_IN_LIBSQL: 'poisoned' });
    procs.workers.push(worker);
    await worker.ready;
    const queue = procs.queue('maintenance.solo', prefix);
    const outcome = (id: string) => worker.waitFor(`job ${id}`, (l) => String(l.jobId) === id && (l.msg === 'job done' || l.msg === 'job failed'), 60_000);

    await queue.add('integrity', { store: 'healthy' }, { jobId: 'healthy-1' });
    expect(await outcome('healthy-1')).toMatchObject({ msg: 'job done' });
    // The job's own log line, from its process, through the worker's logger with the job's bindings.
    expect(worker.lines.find((l) => l.msg === 'integrity done' && l.store === 'healthy')).toMatchObject({ ok: true, rows: 1 });

    await queue.add('integrity', { store: 'poisoned' }, { jobId: 'poisoned-1' });
    const failed = await outcome('poisoned-1');
    expect(failed).toMatchObject({ msg: 'job failed', retry: false });
    expect(String(failed.err)).toMatch(/integrity poisoned: .*killed by SIGABRT/);

    await queue.add('prune', { store: 'agent' }, { jobId: 'agent-1' });
    expect(await outcome('agent-1')).toMatchObject({ msg: 'job done' });
    expect(countRows(agent)).toBe(2);
    await queue.add('integrity', { store: 'healthy' }, { jobId: 'healthy-2' });
    expect(await outcome('healthy-2')).toMatchObject({ msg: 'job done' });
    expect(worker.proc.exitCode).toBeNull();
    expect(worker.proc.signalCode).toBeNull();
  });
});
