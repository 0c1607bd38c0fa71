import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { createRedis } from '../../src/queue/connection.js';
import { openDatabase } from '../../src/store/sqlite.js';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from '../helpers/redis.js';
import { startSmtp, type TestSmtp } from '../helpers/smtp.js';
import { toCanonical } from '../../src/time/instants.js';
import { assertBuilt, CLI, countRows, killAll, makeStore, spawnWorker, tempDir, until, type LogLine, type SpawnedWorker } from './fixtures.js';

const exec = promisify(execFile);
const HOSTS = ['a', 'b', 'c'] as const;

/**
 * Three worker processes on one machine, each started as its own host (`--host a|b|c`) with its own store folder
 * and state db (`${STATE_DIR}`), all from ONE config file that describes the whole fleet, as it is deployed.
 */
// Real worker processes, three at a time, on a shared 2-core machine: generous time, no timing assertions.
describe('a fleet of hosts sharing one Redis', { timeout: 180_000 }, () => {
  let redis: TestRedis;
  let conn: Redis;
  const workers: SpawnedWorker[] = [];
  const prefixes: string[] = [];

  beforeAll(async () => {
    assertBuilt();
    redis = await startTestRedis();
    conn = createRedis(redis.url);
    await conn.connect();
  });
  afterEach(async () => {
    await killAll(workers.splice(0));
    for (const p of prefixes.splice(0)) await deletePrefix(redis.client, p);
  });
  afterAll(async () => {
    await conn.quit();
    await redis.stop();
  });

  function fleet(name: string, extra: { smtp?: TestSmtp; digest?: Record<string, unknown>; worker?: Record<string, unknown> } = {}) {
    const dir = tempDir(name);
    const prefix = uniquePrefix(name);
    prefixes.push(prefix);
    const stores: Record<string, { db: string; host: string }> = {};
    for (const h of HOSTS) {
      mkdirSync(join(dir, h));
      stores[`${h}1`] = { db: makeStore(join(dir, h, `${h}1.db`), { expired: 5, live: 2 }), host: h };
      // one row the agent wrote an hour ago: each host's section of today's digest lists it
      const db = openDatabase(stores[`${h}1`]!.db);
      db.prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at) VALUES (?, 'fleet', 'new on this host', 'message', ?, ?)`).run(`new_on_${h}`, toCanonical(Date.now() - 3_600_000), toCanonical(Date.now() - 3_600_000));
      db.close();
    }
    const every = { enabled: true, pattern: '* * * * * *' };
    const off = { enabled: false };
    const file = join(dir, 'fleet.yaml');
    writeFileSync(
      file,
      JSON.stringify({
        stateDb: '${STATE_DIR}/state.db',
        snapshot: { root: '${STATE_DIR}/snapshots' },
        log: { level: 'info' },
        redis: { url: redis.url, prefix },
        worker: {
          http: { port: 0 },
          concurrency: 1,
          attempts: 3,
          backoff: { type: 'fixed', delayMs: 50 },
          heartbeatMs: 200,
          silentAfterMs: 1500,
          schedules: { prune: every, integrity: every, snapshot: off, digest: off, drift: off },
          ...extra.worker,
        },
        ...(extra.smtp ? { smtp: extra.smtp.config(), digest: { to: ['owner@example.org'], from: 'warden <warden@example.org>', hostTimeoutSeconds: 3, ...extra.digest } } : {}),
        stores,
      }),
    );
    const start = (host: string, config = file) => {
      const w = spawnWorker(config, ['worker', '--host', host], { STATE_DIR: join(dir, host) });
      workers.push(w);
      return w;
    };
    const cli = (args: string[], env: NodeJS.ProcessEnv = {}) =>
      exec(process.execPath, [CLI, ...args, '--config', file], { env: { ...process.env, REDIS_URL: '', STATE_DIR: join(dir, 'ops'), ...env } }).catch(
        (e: { code: number; stdout: string; stderr: string }) => e,
      );
    mkdirSync(join(dir, 'ops'));
    return { dir, prefix, file, stores, start, cli };
  }

  const done = (w: SpawnedWorker, store?: string) => w.lines.filter((l) => l.msg === 'job done' && (store === undefined || l.store === store));
  const starts = (ws: SpawnedWorker[]) => ws.flatMap((w) => w.lines.filter((l) => l.msg === 'job start'));
  const jobRuns = (dir: string, host: string) => {
    const db = openDatabase(join(dir, host, 'state.db'), { readonly: true });
    try {
      return db.prepare(`SELECT DISTINCT store FROM job_runs ORDER BY store`).pluck().all() as string[];
    } finally {
      db.close();
    }
  };

  it("runs each host's stores only on that host, each run once; a dead host's jobs wait for it, the others go on, and fleet names it", async () => {
    const f = fleet('hosts');
    const [a, b, c] = HOSTS.map((h) => f.start(h)) as [SpawnedWorker, SpawnedWorker, SpawnedWorker];
    await Promise.all([a.ready, b.ready, c.ready]);
    for (const [w, h] of [[a, 'a'], [b, 'b'], [c, 'c']] as const) await until(`host ${h} to run its prune and integrity`, () => done(w, `${h}1`).length >= 4, 20_000);

    // nothing of another host's stores ever started on a host, and no run started twice anywhere
    for (const [w, h] of [[a, 'a'], [b, 'b'], [c, 'c']] as const) {
      expect(new Set(w.lines.filter((l) => l.msg === 'job start').map((l) => l.store))).toEqual(new Set([`${h}1`]));
      expect(jobRuns(f.dir, h)).toEqual([`${h}1`]);
      expect(countRows(f.stores[`${h}1`]!.db)).toBe(3); // two live rows and today's new one
    }
    const ids = starts([a, b, c]).map((l: LogLine) => String(l.jobId));
    expect(new Set(ids).size).toBe(ids.length);

    // kill -9 host b: a's and c's runs go on, b's wait in b's queue
    b.proc.kill('SIGKILL');
    await b.exited;
    const killedAt = Date.now();
    const aBefore = done(a).length;
    const cBefore = done(c).length;
    await until('a and c to keep running while b is dead', () => done(a).length >= aBefore + 4 && done(c).length >= cBefore + 4 && Date.now() - killedAt > 2500, 20_000);
    const bQueue = new Queue(`maintenance.b`, { connection: conn, prefix: f.prefix });
    try {
      const waiting = (await bQueue.getJobs(['delayed', 'waiting', 'prioritized'])).filter((j) => j.data.store === 'b1');
      expect(waiting.length).toBeGreaterThan(0);
      expect(waiting.every((j) => j.timestamp + (j.opts.delay ?? 0) < Date.now())).toBe(true); // due, and nobody took them
    } finally {
      await bQueue.close();
    }

    // fleet, from a machine that is none of the hosts: b is silent, its jobs overdue, a and c up; exit 1
    const out = (await f.cli(['fleet', '--json'], { MEMORY_WARDEN_HOST: 'ops' })) as { code?: number; stdout: string };
    expect(out.code).toBe(1);
    const status = JSON.parse(out.stdout) as { silent: string[]; overdue: { store: string; job: string }[]; hosts: { host: string; silent: boolean; version: string | null; stores: { store: string; jobs: { job: string; lastSuccess: string | null }[] }[] }[] };
    expect(status.silent).toEqual(['b']);
    expect(new Set(status.overdue.map((o) => o.store))).toEqual(new Set(['b1']));
    const hostA = status.hosts.find((h) => h.host === 'a')!;
    expect(hostA).toMatchObject({ silent: false, version: expect.any(String) });
    expect(hostA.stores).toEqual([{ store: 'a1', jobs: expect.arrayContaining([expect.objectContaining({ job: 'prune', lastSuccess: expect.any(String) })]) }]);

    // b back: its due runs happen, once each
    const b2 = f.start('b');
    await b2.ready;
    await until('b to catch up', () => done(b2, 'b1').length >= 2, 20_000);
    const all = starts([a, b, c, b2]).map((l: LogLine) => String(l.jobId));
    expect(new Set(all).size).toBe(all.length);
    expect(new Set(b2.lines.filter((l) => l.msg === 'job start').map((l) => l.store))).toEqual(new Set(['b1']));
  });

  it("a job that reaches a host that does not hold its store fails for good, saying whose store it is; enqueue routes to the store's host", async () => {
    const f = fleet('route');
    const a = f.start('a');
    const b = f.start('b');
    await Promise.all([a.ready, b.ready]);
    // a job for b's store, put on a's queue by hand (an old release, a mistake)
    const aQueue = new Queue('maintenance.a', { connection: conn, prefix: f.prefix });
    try {
      const job = await aQueue.add('prune', { store: 'b1' }, { attempts: 3 });
      const failed = await a.waitFor('the misrouted job to fail', (l) => l.msg.startsWith('job failed') && l.jobId === job.id);
      expect(failed).toMatchObject({ retry: false, owner: 'b' });
      await until('the job to be failed for good', async () => (await aQueue.getJob(job.id!))?.finishedOn);
      const after = (await aQueue.getJob(job.id!))!;
      expect(after.attemptsMade).toBe(1);
      expect(after.failedReason).toMatch(/lives on host "b", not on this worker's host "a"/);
    } finally {
      await aQueue.close();
    }

    // from host a's machine, enqueue prune for b1: it runs on b
    const out = (await f.cli(['enqueue', 'integrity', '--store', 'b1', '--json'], { MEMORY_WARDEN_HOST: 'a' })) as { code?: number; stdout: string; stderr: string };
    expect(out.code ?? 0).toBe(0);
    expect(JSON.parse(out.stdout)).toMatchObject({ store: 'b1' });
    const ranOn = await until('the enqueued run', () => [a, b].find((w) => w.lines.some((l) => l.msg === 'job done' && l.store === 'b1' && !String(l.jobId).startsWith('repeat:'))));
    expect(ranOn).toBe(b);
  });

  it("erase and restore of another host's store run on that host, from any machine; the erase payload leaves Redis", async () => {
    const f = fleet('remote');
    const b = f.start('b');
    await b.ready;
    const asA = { MEMORY_WARDEN_HOST: 'a' };
    // a snapshot of b1 taken on b, then a change, then a restore asked for from a: b puts the snapshot back
    const snap = (await f.cli(['enqueue', 'snapshot', '--store', 'b1', '--json'], asA)) as { code?: number; stdout: string; stderr: string };
    expect(snap.code ?? 0, snap.stderr).toBe(0);
    const dir = JSON.parse(snap.stdout).dir as string;
    expect(dir.startsWith(join(f.dir, 'b'))).toBe(true); // under b's own snapshot root
    const db = openDatabase(f.stores.b1!.db);
    db.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES ('after_snapshot', 'x', 'written after the snapshot', 'message')`).run();
    db.close();
    const relative = (await f.cli(['restore', 'snapshots/x', '--store', 'b1'], asA)) as { code?: number; stderr: string };
    expect(relative.code).toBe(2);
    expect(relative.stderr).toMatch(/lives on host b: give the snapshot folder as an absolute path/);
    const restored = (await f.cli(['restore', dir, '--store', 'b1', '--json', '--force'], asA)) as { code?: number; stdout: string; stderr: string };
    expect(restored.code ?? 0, restored.stderr).toBe(0);
    expect(JSON.parse(restored.stdout)).toMatchObject({ store: 'b1', dryRun: false });
    expect(countRows(f.stores.b1!.db, "id = 'after_snapshot'")).toBe(0);
    expect(b.lines.some((l) => l.msg === 'job done' && l.job === 'restore' && l.store === 'b1')).toBe(true);

    // erase --subject from a: b erases, the receipt comes back, and no job holding the subject stays in Redis
    const erased = (await f.cli(['erase', '--store', 'b1', '--subject', 'new on this host', '--json'], asA)) as { code?: number; stdout: string; stderr: string };
    expect([0, 1]).toContain(erased.code ?? 0);
    expect(JSON.parse(erased.stdout)).toMatchObject({ store: 'b1', memories: 1 });
    expect(countRows(f.stores.b1!.db, "id = 'new_on_b'")).toBe(0);
    const bQueue = new Queue('maintenance.b', { connection: conn, prefix: f.prefix });
    try {
      const left = await bQueue.getJobs(['completed', 'failed', 'waiting', 'active', 'delayed']);
      expect(left.filter((j) => j.name === 'erase')).toEqual([]);
    } finally {
      await bQueue.close();
    }
    const keys = await conn.keys(`${f.prefix}:*`);
    for (const k of keys) {
      const type = await conn.type(k);
      const dump = type === 'hash' ? JSON.stringify(await conn.hgetall(k)) : type === 'string' ? String(await conn.get(k)) : type === 'list' ? JSON.stringify(await conn.lrange(k, 0, -1)) : type === 'stream' ? JSON.stringify(await conn.xrange(k, '-', '+')) : '';
      expect(dump.includes('new on this host'), k).toBe(false);
    }
  });

  describe('the digest of a fleet', () => {
    let smtp: TestSmtp;
    beforeAll(async () => {
      smtp = await startSmtp();
    });
    afterAll(async () => {
      await smtp.close();
    });
    const mails = () => smtp.received.filter((m) => m.envelope.to.includes('owner@example.org'));

    async function enqueueDigest(prefix: string) {
      const shared = new Queue('maintenance', { connection: conn, prefix });
      try {
        return await shared.add('digest', {}, { attempts: 3, backoff: { type: 'fixed', delay: 50 } });
      } finally {
        await shared.close();
      }
    }

    it("collects each host's section on its host and sends once; a dead host's section says it gave no report", async () => {
      smtp.received.length = 0;
      const f = fleet('digest', { smtp, worker: { schedules: { prune: { enabled: false }, integrity: { enabled: false }, snapshot: { enabled: false }, digest: { enabled: false }, drift: { enabled: false } } } });
      const [a, b, c] = HOSTS.map((h) => f.start(h)) as [SpawnedWorker, SpawnedWorker, SpawnedWorker];
      await Promise.all([a.ready, b.ready, c.ready]);
      b.proc.kill('SIGKILL');
      await b.exited;
      const job = await enqueueDigest(f.prefix);
      const sender = await until('the digest to be sent', () => [a, c].find((w) => w.lines.some((l) => l.msg === 'job done' && l.jobId === job.id)), 30_000);
      expect(sender.lines.find((l) => l.msg === 'job done' && l.jobId === job.id)).toMatchObject({ outcome: 'ok' });
      expect(mails()).toHaveLength(1);
      const text = String(mails()[0]!.parsed.text);
      expect(text).toContain('new_on_a');
      expect(text).toContain('new_on_c');
      expect(text).not.toContain('new_on_b');
      expect(text).toMatch(/no report from host b since \d{4}-\d\d-\d\dT/);
      // each section was read on its own host: a's and c's state dbs recorded no run of another host's store
      expect(jobRuns(f.dir, 'a').filter((s) => s !== null && s !== 'a1')).toEqual([]);
      // enqueued again the same day (a retry, another machine): nothing more is sent
      await enqueueDigest(f.prefix);
      await until('the second run to finish', () => [a, c].flatMap((w) => w.lines).filter((l) => l.msg === 'job done' && l.job === 'digest').length >= 2, 30_000);
      expect(mails()).toHaveLength(1);
    });

    it("a silent host's stores are unknown, not empty, and the next digest lists what this one could not", async () => {
      smtp.received.length = 0;
      const off = { enabled: false };
      const schedules = { prune: off, integrity: off, snapshot: off, digest: off, drift: off };
      // Two digest days without moving a clock: the day is the date in the digest's time zone, UTC+14 then UTC-11.
      const f = fleet('digest-unknown', { smtp, worker: { timezone: 'Pacific/Kiritimati', schedules } });
      const nextDay = join(f.dir, 'fleet-next-day.yaml');
      const cfg = JSON.parse(readFileSync(f.file, 'utf8'));
      writeFileSync(nextDay, JSON.stringify({ ...cfg, worker: { ...cfg.worker, timezone: 'Pacific/Pago_Pago' } }));
      const [a, b, c] = HOSTS.map((h) => f.start(h)) as [SpawnedWorker, SpawnedWorker, SpawnedWorker];
      await Promise.all([a.ready, b.ready, c.ready]);
      b.proc.kill('SIGKILL');
      await b.exited;
      const first = await enqueueDigest(f.prefix);
      await until('the first digest', () => [a, c].some((w) => w.lines.some((l) => l.msg === 'job done' && l.jobId === first.id)), 30_000);
      expect(mails()).toHaveLength(1);
      const text = String(mails()[0]!.parsed.text);
      const section = (t: string, store: string) => t.slice(t.indexOf(`=== ${store} `), t.indexOf('\n=== ', t.indexOf(`=== ${store} `) + 1));
      const b1 = section(text, 'b1');
      expect(b1).toMatch(/no report from host b since /);
      expect(b1).toMatch(/Unknown: no report of this store/);
      for (const claim of ['Nothing new', 'rows 0', 'live 0', 'no problems', 'none']) expect(b1, claim).not.toContain(claim);
      expect(String(mails()[0]!.parsed.html)).toMatch(/Unknown: no report of this store/);
      expect(text).toContain('new_on_a');

      // the next day, b back: its section starts where the first digest could not list it; a's and c's do not repeat
      for (const w of [a, c]) {
        w.proc.kill('SIGTERM');
        await w.exited;
      }
      const again = HOSTS.map((h) => f.start(h, nextDay));
      await Promise.all(again.map((w) => w.ready));
      const second = await enqueueDigest(f.prefix);
      await until('the second digest', () => again.some((w) => w.lines.some((l) => l.msg === 'job done' && l.jobId === second.id)), 30_000);
      expect(mails()).toHaveLength(2);
      const next = String(mails()[1]!.parsed.text);
      expect(section(next, 'b1')).toContain('new_on_b');
      expect(section(next, 'b1')).toMatch(/section starts at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: an earlier digest had no report of it/);
      expect(next).not.toContain('new_on_a');
      expect(next).not.toContain('new_on_c');
      expect(next).not.toMatch(/Unknown: no report/);
    });

    it('a digest job killed after the server took the message is retried on another host and never sends a second Message-ID', async () => {
      smtp.received.length = 0;
      const fast = { lockDurationMs: 1000, stalledIntervalMs: 500, schedules: { prune: { enabled: false }, integrity: { enabled: false }, snapshot: { enabled: false }, digest: { enabled: false }, drift: { enabled: false } } };
      const f = fleet('digest-crash', { smtp, worker: fast, digest: { claimMinutes: 0.05, hostTimeoutSeconds: 2 } });
      const [a, c] = [f.start('a'), f.start('c')];
      await Promise.all([a.ready, c.ready]);
      const release = smtp.hold();
      const attempts = smtp.attempts;
      const job = await enqueueDigest(f.prefix);
      await until('the message to reach the server', () => smtp.attempts > attempts, 30_000);
      const victim = [a, c].find((w) => w.lines.some((l) => l.msg === 'job start' && l.jobId === job.id))!;
      victim.proc.kill('SIGKILL');
      await victim.exited;
      release(); // the server keeps the message the dead worker sent: "accepted", never recorded sent
      const rescuer = victim === a ? c : a;
      await rescuer.waitFor('the retried digest to finish', (l) => l.msg === 'job done' && l.jobId === job.id, 30_000);
      const ids = new Set(mails().map((m) => m.parsed.messageId));
      expect(mails().length).toBeGreaterThanOrEqual(1);
      expect(ids.size).toBe(1); // a duplicate at worst, and one a mail client shows once
    });
  });
});
