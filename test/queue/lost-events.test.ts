// `enqueue` waits for its job's outcome through the queue's events; an event can fail to reach it (a Redis failover
// between the worker's write and the requester's read, the stream trimmed past it by a busy queue). The requester
// then reads the job's own record: it reports the job's result, or its final failure, not a timeout. A remote erase's
// job has no record left to read (it leaves Redis as it completes, with the person's selector): the requester says
// the result did not reach it and where the host keeps the outcome, claiming neither success nor failure.
import { describe, expect, it } from 'vitest';
import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { openDatabase } from '../../src/store/sqlite.js';
import { CLI, countRows, makeStore, redisDump, ROOT, spawnWorker, tempDir, until, useWorkerProcesses, writeConfig, writeTwoHostFleet, type SpawnedWorker } from './fixtures.js';

const exec = promisify(execFile);
const SUBJECT = 'lost-event-person-41c9';
const USER = 'lost-event-user-93d2';
const IDS = 'lost-event-memory-5be7';

describe('a command waiting for its job (enqueue, a remote erase) when the job\'s event never reaches it', { timeout: 90_000 }, () => {
  const { redis, workers, prefix } = useWorkerProcesses();

  /** The CLI as a process (a requester); resolves with its exit code and output. */
  function requester(args: string[], env: NodeJS.ProcessEnv = {}) {
    const proc = spawn(process.execPath, [CLI, ...args], {
      cwd: ROOT,
      env: { ...process.env, LOG_LEVEL: 'info', REDIS_URL: '', ...env },
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
    const req = requester(['enqueue', job, '--store', 'agent', '--json', '--timeout', '40', '--config', file]);
    return lose(req, p, job, () => spawnWorker(file));
  }

  async function lose(req: ReturnType<typeof requester>, p: string, job: string, startWorker: () => SpawnedWorker, queued = async () => {}) {
    await until('the job enqueued', () => /enqueued; waiting/.test(req.stderr()), 30_000);
    req.proc.kill('SIGSTOP');
    try {
      await queued();
      const w = startWorker();
      workers.push(w);
      await w.ready;
      await w.waitFor(`the ${job} job to end`, (l) => (l.msg === 'job done' || (l.msg === 'job failed' && l.retry === false)) && l.job === job, 30_000);
      const c = redis().client;
      const keys = await c.keys(`${p}:*:events`);
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

  /**
   * The person as each selector names them: their rows (id, subject, fact) and the text that must not stay in Redis
   * (the request holds it while it is queued).
   */
  const selectors = [
    {
      by: '--subject', args: ['--subject', SUBJECT], needle: SUBJECT,
      rows: [['p1', SUBJECT, 'lives in Lyon'], ['p2', 'travel', `${SUBJECT} flies to Oslo`]],
    },
    {
      by: '--user', args: ['--user', USER], needle: USER,
      rows: [['u1', USER, 'lives in Porto'], ['u2', USER, 'is allergic to peanuts']],
    },
    {
      by: '--ids', args: ['--ids', `${IDS}-1`, `${IDS}-2`], needle: IDS,
      rows: [[`${IDS}-1`, 'travel', 'boards the 7:40 train'], [`${IDS}-2`, 'health', 'sees a cardiologist on Fridays']],
    },
  ];

  it.each(selectors)("a remote erase by $by, whose job leaves Redis as it completes: exit 2, one line saying its result did not reach it and where the host keeps it; the erase happened, and nothing of the person is left in Redis", async ({ by, args, needle, rows }) => {
    const name = `lost-events-erase${by}`;
    const dir = tempDir(name);
    const p = prefix(name);
    const { db, file, onA, onB } = writeTwoHostFleet({ dir, redisUrl: redis().url, prefix: p, live: 2 });
    const w = openDatabase(db);
    for (const [id, subject, fact] of rows) w.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES (?, ?, ?, 'message')`).run(id, subject, fact);
    w.close();
    const req = requester(['erase', '--store', 'b1', ...args, '--timeout', '40', '--config', file], onA);
    const holds = async () => [...(await redisDump(redis().client, p))].filter(([k, v]) => `${k} ${v}`.toLowerCase().includes(needle.toLowerCase())).map(([k]) => k);
    const out = await lose(req, p, 'erase', () => spawnWorker(file, ['worker', '--host', 'b'], onB), async () => {
      expect(await holds()).not.toEqual([]); // the queued request holds the person's selector
    });

    expect(out.code, out.stderr).toBe(2); // could not run: transient (src/core/errors.ts), as docs/commands.md says
    expect(out.stdout).toBe(''); // no receipt printed: none reached it
    const lines = out.stderr.split('\n').filter((l) => l.startsWith('memory-warden:'));
    expect(lines).toHaveLength(1);
    const line = lines[0] ?? '';
    expect(line).toMatch(/^memory-warden: erase b1: its result did not reach this command \(job \d+ finished and was removed from maintenance\.b; whether it succeeded is not known here\); its outcome is kept there: memory-warden erase receipts --store b1, on host b$/);
    // Neither success nor failure is claimed, and it is not taken for a timeout.
    expect(line.replace('whether it succeeded is not known here', '')).not.toMatch(/\berased\b|succeed|\bfail|no result within|nothing was done/i);

    // The erase happened on b's store (the person's rows gone, the others kept); its receipt is where the line says.
    const ids = rows.map(([id]) => `'${id}'`).join(', ');
    expect(countRows(db, `id IN (${ids})`)).toBe(0);
    expect(countRows(db)).toBe(2);
    const receipts = await exec(process.execPath, [CLI, 'erase', 'receipts', '--store', 'b1', '--json', '--config', file], { cwd: ROOT, env: { ...process.env, REDIS_URL: '', ...onB } });
    expect(JSON.parse(receipts.stdout)).toHaveLength(1);

    // Nothing under the prefix holds the person's selector: not the job (removed), not an event, not a lock or a log.
    expect((await redisDump(redis().client, p)).size).toBeGreaterThan(0);
    expect(await holds()).toEqual([]);
  });
});
