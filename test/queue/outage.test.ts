import { afterAll, describe, expect, it } from 'vitest';
import { JOBS } from '../../jobs/index.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { createLogger } from '../../src/log/logger.js';
import { startWorker, type RunningWorker } from '../../src/queue/worker.js';
import { freePort, uniquePrefix } from '../helpers/redis.js';
import { loadTestConfig, makeStore, tempDir, until, type LogLine } from './fixtures.js';

/**
 * Redis lost while the worker runs. This needs a Redis the test may stop and start, so it runs its own
 * redis-server (persistent, AOF) on a free port instead of the shared one.
 */
describe('Redis lost while running', () => {
  const dir = tempDir('outage');
  let server: ChildProcess | undefined;
  let worker: RunningWorker | undefined;

  async function startServer(port: number): Promise<void> {
    server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--appendonly', 'yes', '--appendfsync', 'always', '--save', ''], { stdio: 'ignore' });
    const probe = new Redis(port, '127.0.0.1', { lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    probe.on('error', () => {});
    try {
      await until('redis-server to answer', async () => {
        try {
          if (probe.status !== 'ready') await probe.connect();
          return (await probe.ping()) === 'PONG';
        } catch {
          probe.disconnect();
          return false;
        }
      });
    } finally {
      probe.disconnect();
    }
  }

  async function stopServer(): Promise<void> {
    if (!server || server.exitCode !== null) return;
    const exited = new Promise((r) => server!.once('exit', r));
    server.kill('SIGTERM');
    await exited;
  }

  afterAll(async () => {
    await worker?.shutdown('test').catch(() => {});
    await stopServer();
  });

  it('logs the outage, reports it on /healthz, reconnects, and runs the scheduled run that fell due meanwhile', async () => {
    const port = await freePort();
    await startServer(port);
    const store = makeStore(join(dir, 'agent.db'), { live: 1 });
    const config = loadTestConfig({
      dir,
      redisUrl: `redis://127.0.0.1:${port}`,
      prefix: uniquePrefix('outage'),
      stores: { agent: store },
      worker: { schedules: { integrity: { enabled: true, pattern: '* * * * * *' } } },
    });
    const lines: LogLine[] = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => lines.push(JSON.parse(s) as LogLine) } as unknown as NodeJS.WritableStream });
    worker = await startWorker({ jobs: JOBS, config, log });
    await until('a first scheduled run', () => lines.find((l) => l.msg === 'job done'));

    const stoppedAt = lines.length;
    await stopServer();
    await until('the outage to be logged', () => lines.find((l) => l.msg.startsWith('redis connection lost')));
    const health = await fetch(`${worker.http!.url}/healthz`);
    expect(health.status).toBe(503);
    expect(await health.json()).toMatchObject({ ok: false, redis: 'down' });
    expect(lines.filter((l) => l.msg.startsWith('redis connection lost'))).toHaveLength(1); // once, not per retry

    await startServer(port);
    const back = await until('the reconnection', () => lines.find((l) => l.msg === 'redis connection back'), 20_000);
    // a run that fell due while Redis was away (its tick is before the reconnection) still runs
    const late = await until(
      'a run due during the outage',
      () => lines.slice(stoppedAt).find((l) => l.msg === 'job done' && Number(String(l.jobId).split(':').pop()) < back.time),
      20_000,
    );
    expect(late.outcome).toBe('ok');
    expect((await fetch(`${worker.http!.url}/healthz`)).status).toBe(200);
  });
});
