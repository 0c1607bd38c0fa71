// `enqueue` waits for its job's outcome through the queue's events; an event can fail to reach it (a Redis failover
// between the worker's write and the requester's read, the stream trimmed past it by a busy queue). The requester
// then reads the job's own record: it reports the job's result, or its final failure, not a timeout.
import { describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CLI, makeStore, spawnWorker, tempDir, until, useWorkerProcesses, writeConfig } from './fixtures.js';

describe('enqueue when the event of its job never reaches it', { timeout: 90_000 }, () => {
  const { redis, workers, prefix } = useWorkerProcesses();

  /** `enqueue <job> --store agent --json` as a process; resolves with its exit code and output. */
  function enqueue(file: string, job: string) {
    const proc = spawn(process.execPath, [CLI, 'enqueue', job, '--store', 'agent', '--json', '--timeout', '40', '--config', file], {
      env: { ...process.env, LOG_LEVEL: 'info', REDIS_URL: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    proc.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    proc.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    const exited = new Promise<{ code: number | null; stdout: string; stderr: string }>((r) => proc.once('exit', (code) => r({ code, stdout, stderr })));
    return { proc, exited, stderr: () => stderr };
  }

  /**
   * The job is added while no worker runs, the requester is stopped (SIGSTOP), a worker runs the job to its end, the
   * events stream is emptied (every event the requester had not read is gone), and the requester goes on.
   */
  async function eventsLost(name: string, db: string, job: string) {
    const dir = tempDir(name);
    const p = prefix(name);
    const file = writeConfig({ dir, redisUrl: redis().url, prefix: p, stores: { agent: db } });
    const req = enqueue(file, job);
    await until('the job enqueued', () => /enqueued; waiting/.test(req.stderr()), 30_000);
    req.proc.kill('SIGSTOP');
    try {
      const w = spawnWorker(file);
      workers.push(w);
      await w.ready;
      await w.waitFor(`the ${job} job to end`, (l) => (l.msg === 'job done' || (l.msg === 'job failed' && l.retry === false)) && l.job === job, 30_000);
      const c = redis().client;
      const [, keys] = await c.scan('0', 'MATCH', `${p}:*:events`, 'COUNT', 1000);
      expect(keys.length).toBeGreaterThan(0);
      for (const k of keys) await c.xtrim(k, 'MAXLEN', 0);
    } finally {
      req.proc.kill('SIGCONT');
    }
    return req.exited;
  }

  it('a job that finished: its result, as if the event had come', async () => {
    const dir = tempDir('lost-events-done');
    const out = await eventsLost('lost-events-done', makeStore(join(dir, 'agent.db'), { expired: 3, live: 2 }), 'prune');
    expect(out.code, out.stderr).toBe(0);
    expect(JSON.parse(out.stdout)).toMatchObject({ deleted: 3 });
  });

  it('a job that failed for good: its failure and its reason, not a timeout', async () => {
    const dir = tempDir('lost-events-failed');
    const db = join(dir, 'agent.db');
    writeFileSync(db, 'this is not a SQLite database, and it is long enough to have a header that says so\n'.repeat(20));
    const out = await eventsLost('lost-events-failed', db, 'integrity');
    expect(out.code).not.toBe(0);
    expect(out.stderr).not.toMatch(/no result within/);
    expect(out.stderr).toMatch(/integrity agent/);
  });
});
