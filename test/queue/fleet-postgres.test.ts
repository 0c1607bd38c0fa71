import { afterEach, describe, expect, it } from 'vitest';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cliAsync } from '../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../helpers/pg.js';
import { fillPgStore, ids, URL_VAR } from '../engines/pg-fixture.js';
import { missedRunId } from '../../src/queue/schedules.js';
import { openDatabase } from '../../src/store/sqlite.js';
import { countRows, killAll, makeStore, spawnWorker, stopProcess, tempDir, until, useWorkerProcesses, type SpawnedWorker } from './fixtures.js';
import { storeLockKey } from '../../src/queue/lock.js';

const QUEUE = 'maintenance'; // worker.queue's default: the shared queue; a host's is `maintenance.<host>`

interface Claim { scheduled_run: string; job: string; outcome: string; host: string; pid: number; attempts: number }
interface JobRun { job: string; store: string | null; outcome: string; scheduled_run: string | null; pid: number | null }

/**
 * A PostgreSQL store is one database every host reaches: its scheduled jobs run once across the fleet, whichever
 * worker takes them, the store's database deciding (its `warden_runs` claims), while each SQLite store's jobs stay on
 * its host. Real worker processes as hosts `a` and `b` (one config, a state db each), the real Redis on a prefix of
 * the test's own, a database of the test's own on the native PostgreSQL server. No duration asserted.
 */
describe('a PostgreSQL store in a fleet of workers', { timeout: 240_000 }, () => {
  const procs = useWorkerProcesses();
  let db: TestDatabase | undefined;
  afterEach(async () => {
    await killAll(procs.workers.splice(0)); // before the database goes: its workers hold connections to it
    await db?.drop();
    db = undefined;
  });

  async function setup(name: string, worker: Record<string, unknown>, postgres: Record<string, unknown> = {}) {
    db = await createTestDatabase('fleet_runs');
    const dir = tempDir(name);
    const prefix = procs.prefix(name);
    const stores: Record<string, unknown> = {};
    for (const h of ['a', 'b']) {
      mkdirSync(join(dir, h));
      stores[`${h}1`] = { db: makeStore(join(dir, h, `${h}1.db`), { expired: 5, live: 2 }), host: h };
    }
    stores.fleet = { engine: 'postgres', postgres: { url: `\${${URL_VAR}}`, schema: 'fleet', ...postgres } };
    const off = { enabled: false };
    const file = join(dir, 'fleet.yaml');
    writeFileSync(file, JSON.stringify({
      stateDb: '${STATE_DIR}/state.db',
      log: { level: 'info' },
      redis: { url: procs.redis().url, prefix },
      worker: {
        http: { port: 0 }, concurrency: 1, attempts: 5, backoff: { type: 'fixed', delayMs: 100 }, shutdownTimeoutMs: 20_000,
        ...worker,
        schedules: { prune: off, integrity: off, snapshot: off, digest: off, drift: off, ...(worker.schedules as object | undefined) },
      },
      stores,
    }));
    const env = (host: string) => ({ STATE_DIR: join(dir, host), [URL_VAR]: db!.url });
    mkdirSync(join(dir, 'ops'));
    const init = await cliAsync(['init', '--store', 'fleet', '--config', file], env('ops'));
    expect(init.code, init.stderr).toBe(0);
    const start = (host: string): SpawnedWorker => {
      const w = spawnWorker(file, ['worker', '--host', host], env(host));
      procs.workers.push(w);
      return w;
    };
    // The claims table is made by the first claim.
    const claims = async () => (await db!.client.query<{ t: string | null }>(`SELECT to_regclass('fleet.warden_runs') AS t`)).rows[0]!.t === null ? []
      : (await db!.client.query<Claim>('SELECT scheduled_run, job, outcome, host, pid, attempts FROM fleet.warden_runs ORDER BY id')).rows;
    const jobRuns = (host: string): JobRun[] => {
      const state = openDatabase(join(dir, host, 'state.db'), { readonly: true });
      try {
        return state.prepare('SELECT job, store, outcome, scheduled_run, pid FROM job_runs ORDER BY id').all() as JobRun[];
      } finally {
        state.close();
      }
    };
    const count = async () => Number((await db!.client.query<{ n: string }>('SELECT count(*) AS n FROM fleet.memory')).rows[0]!.n);
    /**
     * 20 000 expired rows and 50 live ones, a prune of them (the run `prune:fleet` due at 1 700 000 000 000) on the
     * shared queue, taken by host a: returned once a has claimed it and deleted a few batches.
     */
    const midRun = async (attempts: number) => {
      // Enough that the run is still going when the test stops its process: a prune walks the table on the server a
      // quarter of a second at a time, its batches growing with their speed.
      await fillPgStore(db!, 'fleet', { live: 50, expired: 200_000 });
      const kept = await ids(db!, 'fleet', `id LIKE 'live-%'`);
      const a = start('a');
      await a.ready;
      const queue = procs.queue(QUEUE, prefix);
      const job = await queue.add('prune', { store: 'fleet' }, { attempts, backoff: { type: 'fixed', delay: 300 }, jobId: missedRunId('prune:fleet', 1_700_000_000_000) });
      await until('the run claimed by host a', async () => (await claims()).some((c) => c.outcome === 'running' && c.host === 'a'));
      await until('a few batches deleted', async () => (await count()) < 200_050 - 50, 60_000);
      return { a, queue, job, kept };
    };
    return { dir, prefix, file, start, claims, jobRuns, env, count, midRun, stores: stores as Record<'a1' | 'b1', { db: string }> };
  }

  it("each scheduled run of the PostgreSQL store's jobs runs once across both hosts, from the shared queue; each SQLite store's on its own host", async () => {
    const every = { enabled: true, pattern: '* * * * * *' };
    const t = await setup('pg-once', { schedules: { prune: every, integrity: every } });
    await fillPgStore(db!, 'fleet', { live: 20, expired: 30 });
    const a = t.start('a');
    const b = t.start('b');
    await Promise.all([a.ready, b.ready]);
    const okRuns = async (job: string) => (await t.claims()).filter((c) => c.job === job && c.outcome === 'ok').length;
    await until('four runs each of the PostgreSQL store\'s prune and integrity', async () => (await okRuns('prune')) >= 4 && (await okRuns('integrity')) >= 4, 60_000);
    await until('each host to prune its own store twice', () => ['a', 'b'].every((h) => t.jobRuns(h).filter((r) => r.store === `${h}1` && r.job === 'prune' && r.outcome === 'ok').length >= 2), 60_000);
    for (const w of [a, b]) w.proc.kill('SIGTERM');
    for (const w of [a, b]) expect((await w.exited).code).toBe(0);

    // Where they are scheduled: the PostgreSQL store's on the shared queue, each SQLite store's on its host's queue.
    const schedulers = async (name: string) => (await procs.queue(name, t.prefix).getJobSchedulers(0, -1)).map((s) => s.id ?? s.key).sort();
    expect(await schedulers(QUEUE)).toEqual(['integrity:fleet', 'prune:fleet']);
    expect(await schedulers(`${QUEUE}.a`)).toEqual(['integrity:a1', 'prune:a1']);
    expect(await schedulers(`${QUEUE}.b`)).toEqual(['integrity:b1', 'prune:b1']);

    // Every scheduled run of the PostgreSQL store finished ok exactly once across the two hosts' records, by the host
    // its claim in the database names.
    const runs = { a: t.jobRuns('a'), b: t.jobRuns('b') };
    const claims = await t.claims();
    const fleetOk = (['a', 'b'] as const).flatMap((h) => runs[h].filter((r) => r.store === 'fleet' && r.outcome === 'ok').map((r) => ({ host: h, run: r.scheduled_run! })));
    expect(fleetOk.length).toBeGreaterThanOrEqual(8);
    expect(new Set(fleetOk.map((r) => r.run)).size).toBe(fleetOk.length);
    for (const { host, run } of fleetOk) expect(claims.find((c) => c.scheduled_run === run), run).toMatchObject({ outcome: 'ok', host });
    expect(claims.filter((c) => c.outcome !== 'ok')).toEqual([]);
    expect(claims.map((c) => c.scheduled_run).sort()).toEqual(fleetOk.map((r) => r.run).sort());
    // The SQLite stores ran on their own host only.
    expect(runs.a.filter((r) => r.store !== 'a1' && r.store !== 'fleet')).toEqual([]);
    expect(runs.b.filter((r) => r.store !== 'b1' && r.store !== 'fleet')).toEqual([]);
    expect(countRows(t.stores.a1.db, 'expires_at IS NOT NULL')).toBe(0);
    expect(countRows(t.stores.b1.db, 'expires_at IS NOT NULL')).toBe(0);
    expect(await ids(db!, 'fleet')).toHaveLength(20); // the live rows; every expired one pruned

    // `fleet` shows the store under no host, its jobs run by any one worker.
    const status = await cliAsync(['fleet', '--json', '--config', t.file], t.env('ops'));
    const s = JSON.parse(status.stdout) as { hosts: { host: string; stores: { store: string }[] }[]; anyHost: { store: string; jobs: { job: string; lastSuccess: string | null }[] }[] };
    expect(s.hosts.map((h) => [h.host, h.stores.map((x) => x.store)])).toEqual([['a', ['a1']], ['b', ['b1']]]);
    expect(s.anyHost.map((x) => x.store)).toEqual(['fleet']);
    expect(s.anyHost[0]!.jobs.find((j) => j.job === 'prune')!.lastSuccess).not.toBe(null);
  });

  it("a run handed to the other host while the first still runs it (the queue's locks lost in a failover) is refused there by the database, and finishes ok once", async () => {
    const t = await setup('pg-beside', { stalledIntervalMs: 300, attempts: 200, backoff: { type: 'fixed', delayMs: 300 } }, { batchSize: 5 });
    const { a, queue, job, kept } = await t.midRun(200);
    const count = t.count;
    // Host a holds the run (its process lives, stopped) for as long as this test says, whatever either's speed.
    await stopProcess(a);
    try {
      const b = t.start('b');
      await b.ready;
      // What a promoted replica without the job's lock and the store lock looks like: neither is there.
      await procs.redis().client.del(`${t.prefix}:${QUEUE}:${job.id}:lock`, storeLockKey(t.prefix, 'fleet'));
      const busy = await b.waitFor('host b to find the run in progress', (l) => l.msg === 'job failed' && l.jobId === job.id, 30_000);
      expect(busy).toMatchObject({ retry: true, kind: 'transient' });
      expect(String(busy.err)).toContain(`in progress in process ${a.proc.pid} on host a`);
      expect(await count()).toBeGreaterThan(50); // nothing else pruned: host a is still mid-run
    } finally {
      a.proc.kill('SIGCONT');
    }
    // However the first ends (done, or stopped because its store lock went), the run finishes ok once.
    await until('the run to finish ok', async () => (await t.claims())[0]?.outcome === 'ok' && (await queue.getJob(job.id!))?.finishedOn, 120_000);
    expect(await ids(db!, 'fleet')).toEqual(kept);
    const ok = [...t.jobRuns('a'), ...t.jobRuns('b')].filter((r) => r.scheduled_run === 'prune:fleet:1700000000000' && r.outcome === 'ok');
    expect(ok).toHaveLength(1);
    expect((await t.claims())[0]).toMatchObject({ outcome: 'ok', host: ok[0]!.pid === a.proc.pid ? 'a' : 'b', pid: ok[0]!.pid });
  });

  it('kill -9 of the worker running a PostgreSQL store\'s run: the other host completes it, once; handed out again, no host runs it again', async () => {
    const fast = { lockDurationMs: 1000, stalledIntervalMs: 500, storeLock: { ttlMs: 1000, waitMs: 20_000 } };
    const t = await setup('pg-kill', fast, { batchSize: 5 }); // short transactions, the first of 5 rows
    const { a: victim, queue, job, kept } = await t.midRun(5);
    const count = t.count;
    victim.proc.kill('SIGKILL');
    expect((await victim.exited).signal).toBe('SIGKILL');
    expect(await count()).toBeGreaterThan(50); // killed mid-run
    expect(await t.claims()).toEqual([{ scheduled_run: 'prune:fleet:1700000000000', job: 'prune', outcome: 'running', host: 'a', pid: victim.proc.pid, attempts: 1 }]);

    const rescuer = t.start('b');
    await rescuer.ready;
    await rescuer.waitFor('the run to finish on host b', (l) => l.msg === 'job done' && l.jobId === job.id, 120_000);
    await until('the job to be marked completed', async () => (await queue.getJob(job.id!))?.finishedOn);
    expect(await ids(db!, 'fleet')).toEqual(kept);
    expect(await t.claims()).toEqual([{ scheduled_run: 'prune:fleet:1700000000000', job: 'prune', outcome: 'ok', host: 'b', pid: rescuer.proc.pid, attempts: 2 }]);
    expect(t.jobRuns('a')).toEqual([{ job: 'prune', store: 'fleet', outcome: 'running', scheduled_run: 'prune:fleet:1700000000000', pid: victim.proc.pid }]);
    expect(t.jobRuns('b')).toEqual([{ job: 'prune', store: 'fleet', outcome: 'ok', scheduled_run: 'prune:fleet:1700000000000', pid: rescuer.proc.pid }]);

    // Handed out again (a completion Redis lost) to host a, whose own record has the run unfinished: the store's
    // database says it is done, so nothing runs; a memory a prune would delete stays.
    rescuer.proc.kill('SIGTERM');
    expect((await rescuer.exited).code).toBe(0);
    await db!.client.query(`INSERT INTO fleet.memory (id, subject, fact, source, expires_at) VALUES ('proof', 'user', 'meeting', 'message', now() - interval '1 day')`);
    const again = t.start('a');
    await again.ready;
    await (await queue.getJob(job.id!))!.retry('completed');
    const skipped = await again.waitFor('the run found done in the fleet', (l) => l.msg === 'a scheduled run already done in the fleet: not run again');
    expect(skipped).toMatchObject({ scheduledRun: 'prune:fleet:1700000000000', doneBy: 'b' });
    await until('the job to complete again', async () => (await queue.getJob(job.id!))?.returnvalue?.alreadyRan);
    expect((await queue.getJob(job.id!))!.returnvalue).toMatchObject({ alreadyRan: { scheduledRun: 'prune:fleet:1700000000000', host: 'b' } });
    expect(await ids(db!, 'fleet', `id = 'proof'`)).toEqual(['proof']);
    expect(again.lines.filter((l) => l.msg === 'job done')).toEqual([]);
    expect(t.jobRuns('a')).toHaveLength(1);
    expect((await t.claims())[0]).toMatchObject({ outcome: 'ok', host: 'b', attempts: 2 });
  });
});
