import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { JOBS } from '../../jobs/index.js';
import { existsSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Queue, QueueEvents, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { validateConfig, type Config } from '../../src/config/config.js';
import { silentLogger } from '../../src/log/logger.js';
import { jobOptions } from '../../src/queue/options.js';
import { taskQueueName } from '../../src/queue/tasks.js';
import { startWorker, type RunningWorker } from '../../src/queue/worker.js';
import { verdictsFor } from '../../src/drift/record.js';
import { toCanonical } from '../../src/time/instants.js';
import type { DriftResult } from '../../jobs/drift.js';
import { daysAgo, insertRows, liveIds, NOW, row, sandbox, withDb, withState, type Sandbox } from '../drift/helpers.js';
import { deletePrefix, freePort, startTestRedis, uniquePrefix, type TestRedis } from '../helpers/redis.js';
import { until } from './fixtures.js';

const PACKAGE_ROOT = resolve(import.meta.dirname, '../..');

/** What the plugins below share with the test: they run in this process, inside the worker's task processor. */
interface Probe {
  running: number;
  most: number;
  started: string[];
  calls: Record<string, number>;
  release: () => void;
  gate: Promise<void>;
}
const probe = (): Probe => (globalThis as unknown as { __driftTasks: Probe }).__driftTasks;
function resetProbe(): void {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  (globalThis as unknown as { __driftTasks: Probe }).__driftTasks = { running: 0, most: 0, started: [], calls: {}, release, gate };
}

const PLUGINS: Record<string, string> = {
  // Holds every verification until the test opens the gate, counting how many run at once.
  'probe.mjs': `import { defineVerifier } from 'memory-warden';
export default defineVerifier({ name: 'probe', async verify(task) {
  const s = globalThis.__driftTasks;
  s.running += 1; s.most = Math.max(s.most, s.running); s.started.push(task.memory.id);
  try { await s.gate; } finally { s.running -= 1; }
  return { value: 'yes' };
} });`,
  'boom.mjs': `import { defineVerifier } from 'memory-warden';
export default defineVerifier({ name: 'boom', async verify() { throw new Error('kaboom'); } });`,
  // A value no JSON can carry: the task itself fails (for good), not the verifier.
  'huge.mjs': `import { defineVerifier } from 'memory-warden';
export default defineVerifier({ name: 'huge', async verify() { return { value: 10n }; } });`,
  // Fails like a dropped connection the first time it is asked about a memory, answers the second time.
  'flaky.mjs': `import { defineVerifier } from 'memory-warden';
export default defineVerifier({ name: 'flaky', async verify(task) {
  const s = globalThis.__driftTasks;
  s.calls[task.memory.id] = (s.calls[task.memory.id] ?? 0) + 1;
  if (s.calls[task.memory.id] === 1) throw Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
  return { value: 'yes' };
} });`,
};

describe('drift through the worker: one BullMQ task per source read', () => {
  let redis: TestRedis;
  let box: Sandbox;
  let root: string;
  let prefix: string;
  const workers: RunningWorker[] = [];

  beforeAll(async () => {
    if (!existsSync(join(PACKAGE_ROOT, 'dist/src/index.js'))) throw new Error('build first (npx tsc -p .): plugins import the built package');
    redis = await startTestRedis();
  });
  afterAll(async () => {
    await redis.stop();
  });
  beforeEach(() => {
    resetProbe();
    box = sandbox();
    prefix = uniquePrefix('drift-tasks');
    mkdirSync(join(box.dir, 'node_modules'));
    symlinkSync(PACKAGE_ROOT, join(box.dir, 'node_modules', 'memory-warden'));
    mkdirSync(join(box.dir, 'plugins'));
    for (const [name, text] of Object.entries(PLUGINS)) writeFileSync(join(box.dir, 'plugins', name), text);
    root = join(box.dir, 'configs');
    mkdirSync(root);
    writeFileSync(join(root, 'app.yaml'), 'database:\n  version: "15.4"\n');
    writeFileSync(join(root, 'app.json'), JSON.stringify({ database: { version: '16.2' } }));
  });
  afterEach(async () => {
    probe().release();
    for (const w of workers.splice(0)) await w.shutdown('test');
    await deletePrefix(redis.client, prefix);
    box.cleanup();
  });

  function config(verify: Record<string, unknown>): Config {
    const off = { enabled: false };
    return validateConfig({
      stateDb: box.statePath,
      stores: { agent: { db: box.dbPath } },
      redis: { url: redis.url, prefix },
      worker: {
        http: { enabled: false },
        concurrency: 1,
        attempts: 3,
        backoff: { type: 'fixed', delayMs: 20 },
        shutdownTimeoutMs: 20_000,
        schedules: { snapshot: off, prune: off, integrity: off, digest: off, drift: off },
      },
      verify: {
        cacheDir: join(box.dir, 'cache'),
        plugins: Object.keys(PLUGINS).map((p) => join(box.dir, 'plugins', p)),
        ...verify,
      },
    });
  }

  const rule = (use: string, extra: Record<string, unknown> = {}) => ({ name: use, match: { source: `^${use}:`, fact: '.' }, use, with: { expect: 'yes' }, ...extra });

  async function runDrift(cfg: Config, w: RunningWorker): Promise<DriftResult> {
    const job = await w.queue.add('drift', { store: 'agent' }, jobOptions(cfg));
    const done = await until(
      'the drift job to finish',
      async () => {
        const j = (await w.queue.getJob(job.id!)) as Job | undefined;
        if (j && (await j.getState()) === 'failed') throw new Error(`drift failed: ${j.failedReason}`);
        return j?.finishedOn ? j : undefined;
      },
      30_000,
    );
    return done.returnvalue as DriftResult;
  }

  it('sends each verifiable row out as its own task and applies every verdict once, in the drift job', async () => {
    const closedPort = await freePort();
    insertRows(box.dbPath, [
      { id: 'm_yaml', fact: 'the database is Postgres 15', source: 'file:app.yaml', confirmed_at: daysAgo(200) },
      { id: 'm_json', fact: 'the database is Postgres 15', source: 'file:app.json', confirmed_at: daysAgo(190) },
      { id: 'm_http', fact: 'the status page is up', source: 'status:up', confirmed_at: daysAgo(180) },
      { id: 'm_boom', fact: 'x', source: 'boom:x', confirmed_at: daysAgo(170) },
      { id: 'm_huge', fact: 'x', source: 'huge:x', confirmed_at: daysAgo(160) },
      { id: 'm_flaky', fact: 'x', source: 'flaky:x', confirmed_at: daysAgo(150) },
      { id: 'm_chat', fact: 'prefers pnpm', source: 'chat 2026-05-01', confirmed_at: daysAgo(140) },
    ]);
    const cfg = config({
      allow: { fileRoots: [root], httpHosts: ['127.0.0.1'] },
      rules: [
        {
          name: 'db version',
          match: { source: '^file:(?<path>.+)$', fact: 'Postgres 15' },
          use: 'file',
          with: { path: '${path}', select: '$.database.version', expect: '^15' },
          replacement: 'the database is Postgres ${value}',
          autoSupersede: true,
        },
        { name: 'status', match: { source: '^status:', fact: 'is up' }, use: 'http', with: { url: `http://127.0.0.1:${closedPort}/health`, read: 'status', expect: 200 } },
        rule('boom'),
        rule('huge'),
        rule('flaky'),
      ],
    });
    const w = await startWorker({ jobs: JOBS, config: cfg, log: silentLogger, now: () => NOW });
    workers.push(w);
    const verifyQueue = taskQueueName(cfg, 'verify');
    const eventsConnection = new Redis(redis.url, { maxRetriesPerRequest: null });
    const events = new QueueEvents(verifyQueue, { connection: eventsConnection, prefix });
    const completed: string[] = [];
    const failed: string[] = [];
    events.on('completed', ({ jobId }) => completed.push(jobId));
    events.on('failed', ({ jobId }) => failed.push(jobId));
    await events.waitUntilReady();
    let r: DriftResult;
    try {
      r = await runDrift(cfg, w);
      await until('every task event', () => completed.length + failed.length >= 6);
    } finally {
      await events.close();
      eventsConnection.disconnect();
    }

    // One task per row a verifier can check (not the chat row: no rule), each finished once: retries are one task.
    expect(Number(await redis.client.get(`${prefix}:${verifyQueue}:id`))).toBe(6);
    expect(completed).toHaveLength(5);
    expect(failed).toHaveLength(1);
    // Read and gone: no task (with its memory text) is left in Redis.
    const counts = await new Queue(verifyQueue, { connection: redis.client, prefix }).getJobCounts('completed', 'failed', 'wait', 'active', 'delayed');
    expect(counts).toEqual({ completed: 0, failed: 0, wait: 0, active: 0, delayed: 0 });

    const byId = Object.fromEntries(r.verdicts.map((v) => [v.id, v]));
    expect(r).toMatchObject({ due: 7, confirmed: 2, contradicted: 1, superseded: 1, unverifiable: 4, toPerson: 1 });
    expect(byId.m_yaml).toMatchObject({ verdict: 'confirmed' });
    expect(row(box.dbPath, 'm_yaml')!.confirmed_at).toBe(toCanonical(NOW));
    // contradicted with autoSupersede: the replacement is in, the old row points at it and has left live_memory
    const newId = byId.m_json!.supersededBy!;
    expect(newId).toMatch(/^m_/);
    expect(row(box.dbPath, newId)).toMatchObject({ fact: 'the database is Postgres 16.2', superseded_by: null });
    expect(row(box.dbPath, 'm_json')!.superseded_by).toBe(newId);
    expect(liveIds(box.dbPath)).not.toContain('m_json');
    // a failing source (nothing listens on that port) is unverifiable after its retries; nothing changes
    expect(byId.m_http).toMatchObject({ verdict: 'unverifiable', needsPerson: false });
    expect(byId.m_http!.reason).toMatch(/fetch failed|ECONNREFUSED/);
    expect(row(box.dbPath, 'm_http')!.confirmed_at).toBe(daysAgo(180));
    // a verifier that throws, and a task that fails for good: unverifiable, and the others carried on
    expect(byId.m_boom).toMatchObject({ verdict: 'unverifiable', reason: 'boom: kaboom' });
    expect(byId.m_huge).toMatchObject({ verdict: 'unverifiable' });
    expect(byId.m_huge!.reason).toMatch(/^verification task failed: .*BigInt/);
    // retried after a dropped connection, then confirmed: one verdict, applied once
    expect(probe().calls.m_flaky).toBe(2);
    expect(byId.m_flaky).toMatchObject({ verdict: 'confirmed' });
    expect(byId.m_chat).toMatchObject({ verdict: 'unverifiable', verifier: null, needsPerson: true });

    withState(box.statePath, (state) => {
      for (const id of ['m_yaml', 'm_json', 'm_http', 'm_boom', 'm_huge', 'm_flaky', 'm_chat', newId]) expect(verdictsFor(state, 'agent', id)).toHaveLength(1);
      expect(verdictsFor(state, 'agent', 'm_json')[0]).toMatchObject({ verdict: 'contradicted', resolution: `superseded:${newId}` });
      expect(verdictsFor(state, 'agent', 'm_yaml')[0]!.fingerprint).toMatch(/^sha256:/);
    });
  });

  it('runs at most verify.concurrency tasks at once, across two workers sharing the Redis', async () => {
    insertRows(box.dbPath, Array.from({ length: 6 }, (_, i) => ({ id: `m_${i}`, fact: 'f', source: `probe:${i}`, confirmed_at: daysAgo(100 + i) })));
    const cfg = config({ concurrency: 2, rules: [rule('probe')] });
    const a = await startWorker({ jobs: JOBS, config: cfg, log: silentLogger, now: () => NOW });
    workers.push(a);
    const b = await startWorker({ jobs: JOBS, config: cfg, log: silentLogger, now: () => NOW });
    workers.push(b);
    const drift = runDrift(cfg, a);
    drift.catch(() => {}); // awaited below; a failed assertion before that must not leave it unhandled
    await until('two verifications running', () => probe().running >= 2);
    const tasks = new Queue(taskQueueName(cfg, 'verify'), { connection: redis.client, prefix });
    // The other four wait in the queue although two workers, each with two slots, are idle enough to take them.
    await until('four tasks waiting', async () => (await tasks.getJobCounts('wait')).wait === 4);
    expect(probe().running).toBe(2);
    expect(probe().started).toHaveLength(2);
    probe().release();
    const r = await drift;
    expect(r.confirmed).toBe(6);
    expect(probe().most).toBe(2);
    expect(probe().started.sort()).toEqual(['m_0', 'm_1', 'm_2', 'm_3', 'm_4', 'm_5']);
    for (let i = 0; i < 6; i++) expect(row(box.dbPath, `m_${i}`)!.confirmed_at).toBe(toCanonical(NOW));
  });

  it('does not apply a task verdict to a row the agent rewrote while it was being read', async () => {
    insertRows(box.dbPath, [
      { id: 'm_0', fact: 'f', source: 'probe:0', confirmed_at: daysAgo(110) },
      { id: 'm_1', fact: 'f', source: 'probe:1', confirmed_at: daysAgo(100) },
    ]);
    const cfg = config({ rules: [rule('probe')] });
    const w = await startWorker({ jobs: JOBS, config: cfg, log: silentLogger, now: () => NOW });
    workers.push(w);
    const drift = runDrift(cfg, w);
    drift.catch(() => {});
    await until('both rows being read', () => probe().started.length === 2);
    withDb(box.dbPath, (db) => db.prepare(`UPDATE memory SET fact = 'f, corrected by the agent' WHERE id = 'm_0'`).run());
    probe().release();
    const r = await drift;
    expect(r.verdicts.find((v) => v.id === 'm_0')).toMatchObject({ verdict: 'unverifiable', skipped: 'the row was rewritten while it was being verified' });
    expect(r.verdicts.find((v) => v.id === 'm_1')).toMatchObject({ verdict: 'confirmed' });
    expect(row(box.dbPath, 'm_0')).toMatchObject({ fact: 'f, corrected by the agent', confirmed_at: daysAgo(110) });
  });

  it('a worker told to stop mid-run: the drift job stops waiting and records nothing for the reads it cut short', async () => {
    insertRows(box.dbPath, [
      { id: 'm_0', fact: 'f', source: 'probe:0', confirmed_at: daysAgo(110) },
      { id: 'm_1', fact: 'f', source: 'probe:1', confirmed_at: daysAgo(100) },
    ]);
    const cfg = config({ rules: [rule('probe')] });
    cfg.worker.shutdownTimeoutMs = 100;
    const w = await startWorker({ jobs: JOBS, config: cfg, log: silentLogger, now: () => NOW });
    workers.push(w);
    await w.queue.add('drift', { store: 'agent' }, jobOptions(cfg));
    await until('both rows being read', () => probe().started.length === 2);
    // The probe never answers: past the shutdown timeout the worker tells the drift job and its tasks to stop.
    expect(await w.shutdown('test')).toEqual({ drained: true });
    withState(box.statePath, (state) => {
      expect(verdictsFor(state, 'agent', 'm_0')).toHaveLength(0);
      expect(verdictsFor(state, 'agent', 'm_1')).toHaveLength(0);
      const run = state.prepare(`SELECT outcome, result FROM job_runs WHERE job = 'drift' ORDER BY id DESC LIMIT 1`).get() as { outcome: string; result: string };
      expect(run.outcome).toBe('ok');
      expect(JSON.parse(run.result)).toMatchObject({ due: 2, verdicts: [] });
    });
    expect(row(box.dbPath, 'm_0')!.confirmed_at).toBe(daysAgo(110));
  });
});
