// End to end on Redis behind Sentinel: two worker processes (hosts a and b, the real CLI), a primary, a replica and
// three sentinels, a real SMTP server on loopback. The primary is killed (-9) while the fleet digest is being sent
// and while its claim waits for the replica; the day's digest reaches the server exactly once, the workers go on
// against the promoted replica, and no scheduled run finishes twice on its host (docs/fleet.md, "Sentinel", says what
// is and is not guaranteed; these tests are that text).
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import Database from 'better-sqlite3';
import { scheduledRunOf } from '../../src/queue/schedules.js';
import { openDatabase } from '../../src/store/sqlite.js';
import { toCanonical } from '../../src/time/instants.js';
import { roleOf, startSentinelSet, type RedisProc, type SentinelSet } from '../helpers/redis-servers.js';
import { startSmtp, type TestSmtp } from '../helpers/smtp.js';
import { assertBuilt, CLI, killAll, makeStore, spawnWorker, tempDir, until, type SpawnedWorker } from './fixtures.js';

const HOSTS = ['a', 'b'] as const;
const exec = promisify(execFile);

/** One command on one node, from a fresh connection; null when the node does not answer. */
async function onNode<T>(port: number, fn: (c: Redis) => Promise<T>): Promise<T | null> {
  const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  c.on('error', () => {});
  try {
    await c.connect();
    return await fn(c);
  } catch {
    return null;
  } finally {
    c.disconnect();
  }
}

/** `node` is the primary, and every sentinel names it (a client that asks any of them finds it). */
const promoted = (set: SentinelSet, node: RedisProc) =>
  until(`node ${node.port} promoted by the sentinels`, async () => {
    if ((await roleOf(node.port)) !== 'master') return false;
    const named = await Promise.all(set.sentinels.map((s) => onNode(s.port, (c) => c.call('SENTINEL', 'get-master-addr-by-name', set.masterName) as Promise<string[]>)));
    return named.every((n) => n?.[1] === String(node.port));
  }, 90_000);
const replicaOnline = (primary: RedisProc) =>
  until(`a replica online at ${primary.port}`, async () => /slave0:.*state=online/.test((await onNode(primary.port, (c) => c.info('replication'))) ?? ''), 60_000);

/** The status of the digest's day record under `prefix` on one node, read directly (not through the sentinels). */
const dayStatus = (port: number, prefix: string) =>
  onNode(port, async (c) => {
    const [, keys] = await c.scan('0', 'MATCH', `${prefix}:digest:*:day:*`, 'COUNT', 1000);
    return keys.length > 0 ? c.hget(keys[0]!, 'status') : null;
  });

describe('a fleet on Redis Sentinel: kill -9 of the primary during the digest', { timeout: 300_000 }, () => {
  let set: SentinelSet | undefined;
  let smtp: TestSmtp;
  const workers: SpawnedWorker[] = [];
  const clients: Redis[] = [];

  beforeAll(async () => {
    assertBuilt();
    smtp = await startSmtp();
  });
  afterEach(async () => {
    await killAll(workers.splice(0));
    for (const c of clients.splice(0)) c.disconnect();
    await set?.stop();
    set = undefined;
  });
  afterAll(async () => {
    await smtp.close();
  });

  /** Two hosts' workers from one fleet config on the set's sentinels; prune and integrity every second on each. */
  async function fleet(name: string, redis: Record<string, unknown> = {}, setOpts: { link?: boolean } = {}, extra: { worker?: Record<string, unknown>; digest?: Record<string, unknown> } = {}) {
    set = await startSentinelSet('mw-primary', setOpts);
    const dir = tempDir(name);
    const prefix = `mw-sf-${randomBytes(3).toString('hex')}`;
    const stores: Record<string, { db: string; host: string }> = {};
    for (const h of HOSTS) {
      mkdirSync(join(dir, h));
      const db = makeStore(join(dir, h, `${h}1.db`), { live: 2 });
      const conn = openDatabase(db);
      conn.prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at) VALUES (?, 'fleet', 'new on this host', 'message', ?, ?)`).run(`new_on_${h}`, toCanonical(Date.now() - 3_600_000), toCanonical(Date.now() - 3_600_000));
      conn.close();
      stores[`${h}1`] = { db, host: h };
    }
    const every = { enabled: true, pattern: '* * * * * *' };
    const off = { enabled: false };
    const file = join(dir, 'fleet.yaml');
    writeFileSync(file, JSON.stringify({
      stateDb: '${STATE_DIR}/state.db',
      log: { level: 'info' },
      redis: { ...set.config, prefix, ...redis },
      worker: {
        http: { port: 0 },
        concurrency: 1,
        // A digest whose claim no replica acknowledged is retried until one is back: enough tries, a second apart.
        attempts: 60,
        backoff: { type: 'fixed', delayMs: 1000 },
        schedules: { prune: every, integrity: every, snapshot: off, digest: off, drift: off },
        ...extra.worker,
      },
      // The SMTP client waits as long as the test holds the server's reply (the failover happens meanwhile).
      smtp: smtp.config({ timeoutMs: 180_000 }),
      digest: { to: ['owner@example.org'], from: 'warden <warden@example.org>', hostTimeoutSeconds: 60, ...extra.digest },
      stores,
    }));
    const start = (h: string) => {
      const w = spawnWorker(file, ['worker', '--host', h], { STATE_DIR: join(dir, `state-${h}`) });
      workers.push(w);
      return w;
    };
    for (const h of HOSTS) mkdirSync(join(dir, `state-${h}`));
    const ws = HOSTS.map(start);
    await Promise.all(ws.map((w) => w.ready));
    await replicaOnline(set.primary);
    mkdirSync(join(dir, 'ops'));
    /**
     * `memory-warden enqueue digest` from a machine that is neither host, as an operator runs it: it finds the
     * primary through the sentinels too, and waits for the result across a failover. Resolves with the result.
     */
    const enqueueDigest = async (): Promise<{ deliveries: Array<{ status: string; messageId: string }> }> => {
      const out = await exec(process.execPath, [CLI, 'enqueue', 'digest', '--json', '--timeout', '280', '--config', file], {
        env: { ...process.env, REDIS_URL: '', STATE_DIR: join(dir, 'ops'), MEMORY_WARDEN_HOST: 'ops' },
      }).catch((e: { code: number; stdout: string; stderr: string }) => {
        throw new Error(`enqueue digest exited ${e.code}: ${e.stderr.slice(-2000)}`);
      });
      return JSON.parse(out.stdout) as { deliveries: Array<{ status: string; messageId: string }> };
    };
    /** Each host's own record of its job runs. */
    const stateDbOf = (h: string) => join(dir, `state-${h}`, 'state.db');
    return { set, prefix, workers: ws, start, enqueueDigest, stateDbOf };
  }

  /** The id of the first digest job a worker started after `marks` (each worker's log length then). */
  const digestJobAfter = (ws: SpawnedWorker[], marks: number[]) =>
    until('a worker to start the digest', () => ws.flatMap((w, i) => w.lines.slice(marks[i])).find((l) => l.msg === 'job start' && l.job === 'digest')?.jobId as string | undefined, 120_000);
  const marksOf = (ws: SpawnedWorker[]) => ws.map((w) => w.lines.length);
  const mails = () => smtp.received.filter((m) => m.envelope.to.includes('owner@example.org'));
  const scheduledDone = (w: SpawnedWorker, from = 0) => w.lines.slice(from).filter((l) => l.msg === 'job done' && l.job !== 'digest');
  const digestLines = (ws: SpawnedWorker[], jobId: string | undefined, msg: string) => ws.flatMap((w) => w.lines.filter((l) => l.msg === msg && l.job === 'digest' && l.jobId === jobId));

  /**
   * Every scheduled run finished 'ok' at most once on its host, by its own record: the host's state db holds one 'ok'
   * row per scheduled run at most, and its log one 'job done' (a run Redis handed out again after a failover, its
   * completion lost, is found done and not run: docs/fleet.md). A run may start twice (handed out again), never finish
   * twice.
   */
  function eachRunOnce(w: SpawnedWorker, host: string, stateDb: string) {
    const done = w.lines.filter((l) => l.msg === 'job done' && l.job !== 'digest').map((l) => scheduledRunOf(String(l.jobId)));
    expect(done.length, `host ${host}: scheduled runs finished`).toBeGreaterThan(0);
    expect(done.filter((r) => r === null), `host ${host}: runs not scheduled`).toEqual([]);
    expect(done.filter((r, i) => done.indexOf(r) !== i), `host ${host}: scheduled runs finished twice (log)`).toEqual([]);
    const db = new Database(stateDb, { readonly: true });
    try {
      const twice = db.prepare(`SELECT scheduled_run, count(*) AS n FROM job_runs WHERE outcome = 'ok' AND scheduled_run IS NOT NULL GROUP BY scheduled_run HAVING n > 1`).all();
      expect(twice, `host ${host}: scheduled runs finished 'ok' twice (state db)`).toEqual([]);
      const ok = db.prepare(`SELECT count(*) AS n FROM job_runs WHERE outcome = 'ok' AND scheduled_run IS NOT NULL`).get() as { n: number };
      expect(ok.n, `host ${host}: every finished run recorded`).toBeGreaterThanOrEqual(done.length);
    } finally {
      db.close();
    }
  }

  it('killed while the server holds the mail: sent once, the workers go on on the promoted replica; killed again after `sent`: not sent again', async () => {
    smtp.received.length = 0;
    const f = await fleet('sentinel-fleet');
    const [a, b] = f.workers as [SpawnedWorker, SpawnedWorker];
    for (const w of [a, b]) await until('scheduled runs on each host', () => scheduledDone(w).length >= 2, 60_000);

    // The server takes the message and holds its reply: the digest is claimed (on the replica too) and being sent.
    const release = smtp.hold();
    const attempts = smtp.attempts;
    const marks = marksOf([a, b]);
    const first = f.enqueueDigest();
    first.catch(() => {});
    const jobId = await digestJobAfter([a, b], marks);
    await until('the digest to reach the SMTP server', () => smtp.attempts > attempts, 90_000);
    expect(await dayStatus(f.set.replica.port, f.prefix)).toBe('sending'); // the claim was on the replica before anything was sent
    const killedAt = marksOf([a, b]);
    f.set.primary.proc.kill('SIGKILL');
    await promoted(f.set, f.set.replica);
    release(); // the server accepts the message; the sender records `sent` on whichever primary it reaches now

    // The operator's `enqueue` (its own connection through the sentinels) gets the result across the failover.
    expect((await first).deliveries).toMatchObject([{ status: 'sent' }]);
    expect(await until('the job done line', () => digestLines([a, b], jobId, 'job done')[0])).toMatchObject({ outcome: 'ok' });
    expect(mails()).toHaveLength(1);
    const messageId = mails()[0]!.parsed.messageId;
    expect(String(mails()[0]!.parsed.text)).toContain('new_on_a');
    expect(String(mails()[0]!.parsed.text)).toContain('new_on_b'); // each host's section was read on its host
    expect(await dayStatus(f.set.replica.port, f.prefix)).toBe('sent'); // on the promoted replica, the primary now

    // Both workers reached the promoted replica: each goes on with its scheduled runs.
    for (const [i, w] of [a, b].entries()) await until(`host ${HOSTS[i]} to run on after the failover`, () => scheduledDone(w, killedAt[i]).length >= 3, 120_000);
    // The same day enqueued again (a retry, another machine): not sent again.
    expect((await f.enqueueDigest()).deliveries).toMatchObject([{ status: 'already-sent' }]);
    expect(mails()).toHaveLength(1);

    // The killed node comes back as a replica of the promoted one and gets `sent`; then the promoted one is killed.
    const back = await f.set.rejoin(f.set.primary, f.set.replica);
    await replicaOnline(f.set.replica);
    await until('the rejoined node to hold `sent`', async () => (await dayStatus(back.port, f.prefix)) === 'sent', 60_000);
    const killedAgainAt = marksOf([a, b]);
    f.set.replica.proc.kill('SIGKILL');
    await promoted(f.set, back);
    expect((await f.enqueueDigest()).deliveries).toMatchObject([{ status: 'already-sent' }]);
    expect(mails()).toHaveLength(1);
    expect(new Set(smtp.received.map((m) => m.parsed.messageId))).toEqual(new Set([messageId]));
    for (const [i, w] of [a, b].entries()) await until(`host ${HOSTS[i]} to run on after the second failover`, () => scheduledDone(w, killedAgainAt[i]).length >= 3, 120_000);
    for (const [i, w] of [a, b].entries()) eachRunOnce(w, HOSTS[i]!, f.stateDbOf(HOSTS[i]!));
    for (const w of [a, b]) expect(w.proc.exitCode).toBeNull();
  });

  it('killed while the claim waits for the replica: nothing is sent until a replica acknowledges a claim, then exactly once', async () => {
    smtp.received.length = 0;
    const f = await fleet('sentinel-fleet-unacked', { claimWaitMs: 5000 });
    const [a, b] = f.workers as [SpawnedWorker, SpawnedWorker];
    const attempts = smtp.attempts;
    const marks = marksOf([a, b]);
    f.set.replica.proc.kill('SIGSTOP'); // the replica stops reading its replication stream: no acknowledgement
    let stopped = true;
    try {
      const first = f.enqueueDigest();
      first.catch(() => {});
      const jobId = await digestJobAfter([a, b], marks);
      await until('the claim on the primary', async () => (await dayStatus(f.set.primary.port, f.prefix)) === 'sending', 90_000);
      const killedAt = marksOf([a, b]);
      f.set.primary.proc.kill('SIGKILL'); // while the claim waits (WAIT) for the replica
      f.set.replica.proc.kill('SIGCONT');
      stopped = false;
      await promoted(f.set, f.set.replica);
      // The promoted replica has no replica of its own: no claim is acknowledged, nothing is sent, the job retries.
      await until('a try given up for want of an acknowledgement', () => digestLines([a, b], jobId, 'job failed').find((l) => l.retry === true && /not acknowledged/.test(String(l.err))), 120_000);
      expect(smtp.attempts).toBe(attempts);
      expect(digestLines([a, b], jobId, 'job done')).toEqual([]);
      // Meanwhile the workers go on with their scheduled runs on the promoted replica.
      for (const [i, w] of [a, b].entries()) await until(`host ${HOSTS[i]} to run on after the failover`, () => scheduledDone(w, killedAt[i]).length >= 3, 120_000);

      expect(smtp.attempts).toBe(attempts); // still nothing: no try can send while no replica acknowledges

      // The killed node comes back as a replica: the next try's claim is acknowledged and the day is sent, once.
      await f.set.rejoin(f.set.primary, f.set.replica);
      await replicaOnline(f.set.replica);
      expect((await first).deliveries).toMatchObject([{ status: 'sent' }]);
      expect(await until('the job done line', () => digestLines([a, b], jobId, 'job done')[0])).toMatchObject({ outcome: 'ok' });
      expect(mails()).toHaveLength(1);
      expect((await f.enqueueDigest()).deliveries).toMatchObject([{ status: 'already-sent' }]);
      expect(mails()).toHaveLength(1);
      for (const [i, w] of [a, b].entries()) eachRunOnce(w, HOSTS[i]!, f.stateDbOf(HOSTS[i]!));
    } finally {
      if (stopped) f.set.replica.proc.kill('SIGCONT');
    }
  });

  it('the primary took `sent` and died before its replica had it: the sender writes it again on the promoted one, so the day is not sent again', async () => {
    smtp.received.length = 0;
    // The replica replicates through a link the test can hold; the sender waits long enough for the kill to fall
    // inside its wait for the replica's acknowledgement of `sent`.
    const f = await fleet('sentinel-fleet-lost-sent', { claimWaitMs: 8000 }, { link: true });
    const [a, b] = f.workers as [SpawnedWorker, SpawnedWorker];
    const release = smtp.hold();
    const attempts = smtp.attempts;
    const marks = marksOf([a, b]);
    const first = f.enqueueDigest();
    first.catch(() => {});
    const jobId = await digestJobAfter([a, b], marks);
    await until('the digest to reach the SMTP server', () => smtp.attempts > attempts, 90_000);
    expect(await dayStatus(f.set.replica.port, f.prefix)).toBe('sending'); // the claim is on the replica
    f.set.link!.hold(); // nothing the primary writes from here reaches the replica
    release();
    await until('`sent` on the primary', async () => (await dayStatus(f.set.primary.port, f.prefix)) === 'sent', 60_000);
    f.set.primary.proc.kill('SIGKILL');
    f.set.link!.cut();
    // The replica's data is final now (its primary is gone), and it has the claim but not `sent`: the write was lost.
    expect(await dayStatus(f.set.replica.port, f.prefix)).toBe('sending');
    await promoted(f.set, f.set.replica);

    expect((await first).deliveries).toMatchObject([{ status: 'sent' }]);
    expect(await until('the job done line', () => digestLines([a, b], jobId, 'job done')[0])).toMatchObject({ outcome: 'ok' });
    // The sender saw no acknowledgement and wrote `sent` again: it is on the promoted replica, the primary now.
    expect(await dayStatus(f.set.replica.port, f.prefix)).toBe('sent');
    expect((await f.enqueueDigest()).deliveries).toMatchObject([{ status: 'already-sent' }]);
    expect(mails()).toHaveLength(1);
  });

  it('the sending worker dies with the primary while the server holds the mail: taken over after claimMinutes and sent again with the same Message-ID', async () => {
    smtp.received.length = 0;
    // A short claim and quicker stalled-job recovery, so the takeover the docs describe happens within the test; the
    // job lock still outlasts a failover (a lock shorter than the outage lets a live job stall too).
    const f = await fleet('sentinel-fleet-sender-dies', {}, {}, { worker: { lockDurationMs: 10_000, stalledIntervalMs: 1000 }, digest: { claimMinutes: 0.1 } });
    const release = smtp.hold();
    const whole = smtp.whole;
    const marks = marksOf(f.workers);
    const first = f.enqueueDigest();
    first.catch(() => {});
    const jobId = await digestJobAfter(f.workers, marks);
    await until('the whole digest at the SMTP server', () => smtp.whole > whole, 90_000);
    const sender = f.workers.findIndex((w) => w.lines.some((l) => l.msg === 'job start' && l.job === 'digest' && l.jobId === jobId));
    f.workers[sender]!.proc.kill('SIGKILL');
    f.set.primary.proc.kill('SIGKILL');
    await f.workers[sender]!.exited;
    await promoted(f.set, f.set.replica);
    release(); // the server keeps the message the dead worker sent: accepted, never recorded `sent`
    await f.set.rejoin(f.set.primary, f.set.replica); // a replica again, so a new claim can be acknowledged
    await f.start(HOSTS[sender]!).ready; // its supervisor starts the dead worker again
    // The job, stalled, runs again; its run takes the claim over once claimMinutes have passed, and sends.
    const result = await first.catch((err: Error) => {
      // What the workers logged of the digest and of Redis, so that a failure says where the job went.
      const said = workers.map((w, i) => `worker ${i} (pid ${w.proc.pid}):\n` + w.lines.filter((l) => l.job === 'digest' || /redis|stall/i.test(String(l.msg))).slice(-40).map((l) => JSON.stringify(l)).join('\n'));
      throw new Error(`${err.message}\n${said.join('\n')}`);
    });
    expect(result.deliveries).toMatchObject([{ status: 'sent' }]);
    expect(mails()).toHaveLength(2); // the dead worker's mail, and the takeover's
    expect(new Set(mails().map((m) => m.parsed.messageId)).size).toBe(1); // one message in a mail client
  });
});
