import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { JOBS } from '../../jobs/index.js';
import { openDatabase } from '../../src/store/sqlite.js';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from '../helpers/redis.js';
import { startSmtp, type TestSmtp } from '../helpers/smtp.js';
import { cliAsync } from '../helpers/cli.js';
import { assertBuilt, killAll, makeStore, spawnWorker, tempDir, until, type SpawnedWorker } from '../queue/fixtures.js';
import { startPrometheus, type TestPrometheus } from './prometheus.js';
import { dashboardQueries } from './dashboard.js';

/**
 * A fresh worker exports every per-job series it will use from its start, at zero (the Prometheus convention):
 * otherwise a series first appears with its first run's value in it, and rate()/increase() never see that run (the
 * dashboard's job duration read NaN and "Pruned per day" 0 after a prune that deleted rows, right until a second run).
 * Real worker processes (hosts a and b, one fleet config), real Redis, a real Prometheus scraping them.
 */

/** The jobs that run for each store, and the one for every store at once. */
const STORE_JOBS = Object.entries(JOBS).filter(([, j]) => (j.scope ?? 'store') === 'store').map(([name]) => name);
const GLOBAL_JOBS = Object.entries(JOBS).filter(([, j]) => j.scope === 'global').map(([name]) => name);
/** What one run of each scheduled job takes here: the dashboard's per-job panels show these. */
const RUN_ONCE = ['prune', 'integrity', 'snapshot', 'drift'];

/** One sample of a Prometheus text exposition (`name{a="b"} 3`) with at least these labels. */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    const m = /^([a-z_:]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = (m[2] ?? '').split(/,(?=[a-z_]+=")/).filter(Boolean);
    if (want.every((w) => have.includes(w))) return Number(m[3]);
  }
  return undefined;
}

describe('a fresh worker and its first runs, as Prometheus sees them', { timeout: 300_000 }, () => {
  let redis: TestRedis;
  let smtp: TestSmtp;
  let prom: TestPrometheus | undefined;
  let prefix: string;
  let file: string;
  let dir: string;
  const workers: Record<string, SpawnedWorker> = {};
  const metricsUrl: Record<string, string> = {};

  beforeAll(async () => {
    assertBuilt();
    redis = await startTestRedis();
    smtp = await startSmtp();
    prefix = uniquePrefix('first-run');
    dir = tempDir('first-run');
    const stores: Record<string, { db: string; host: string }> = {};
    for (const h of ['a', 'b']) {
      mkdirSync(join(dir, h));
      const db = makeStore(join(dir, h, `${h}1.db`), { expired: 5, live: 3 });
      // a row the agent wrote an hour ago: the digest lists it as new
      const w = openDatabase(db);
      w.prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at) VALUES ('new_1', 'tools', 'uses vitest', 'message', datetime('now', '-1 hour'), datetime('now', '-1 hour'))`).run();
      w.close();
      stores[`${h}1`] = { db, host: h };
    }
    const off = { enabled: false };
    file = join(dir, 'fleet.yaml');
    writeFileSync(file, JSON.stringify({
      stateDb: '${STATE_DIR}/state.db',
      snapshot: { root: '${STATE_DIR}/snapshots' },
      log: { level: 'info' },
      redis: { url: redis.url, prefix },
      smtp: smtp.config(),
      digest: { to: ['owner@example.org'], from: 'warden <warden@example.org>', hostTimeoutSeconds: 30 },
      // prune scheduled once a year (fleet lists a job by its schedule); nothing else is: every run here is enqueued
      worker: { http: { port: 0 }, concurrency: 1, attempts: 1, heartbeatMs: 200, schedules: { prune: { enabled: true, pattern: '0 0 1 1 *' }, integrity: off, snapshot: off, digest: off, drift: off } },
      stores,
    }));
    for (const h of ['a', 'b']) workers[h] = spawnWorker(file, ['worker', '--host', h], { STATE_DIR: join(dir, h) });
    for (const h of ['a', 'b']) {
      await workers[h]!.ready;
      metricsUrl[h] = `${String((await workers[h]!.waitFor('http listening', (l) => l.msg.startsWith('http listening'))).url)}`;
    }
  });

  afterAll(async () => {
    await killAll(Object.values(workers));
    await prom?.stop();
    await smtp?.close();
    if (prefix) await deletePrefix(redis.client, prefix);
    await redis?.stop();
  });

  const scrape = async (h: string) => (await fetch(`${metricsUrl[h]}/metrics`)).text();
  const enqueue = async (args: string[]) => {
    const r = await cliAsync(['enqueue', ...args, '--config', file, '--timeout', '120'], { STATE_DIR: join(dir, 'a'), MEMORY_WARDEN_HOST: 'a' });
    expect(r.code, r.stderr).toBe(0);
  };

  it('before any run, /metrics lists every series each worker will use, at 0', async () => {
    for (const h of ['a', 'b']) {
      const text = await scrape(h);
      const store = `${h}1`;
      for (const [job, s] of [...STORE_JOBS.map((j) => [j, store]), ...GLOBAL_JOBS.map((j) => [j, '*'])] as [string, string][]) {
        for (const outcome of ['ok', 'failed']) expect(sample(text, 'memory_warden_job_runs_total', { job, store: s, outcome }), `${h} ${job} ${outcome}`).toBe(0);
        for (const retry of ['yes', 'no']) expect(sample(text, 'memory_warden_job_failures_total', { job, store: s, retry }), `${h} ${job} ${retry}`).toBe(0);
        expect(sample(text, 'memory_warden_job_duration_seconds_count', { job, store: s }), `${h} ${job}`).toBe(0);
        expect(sample(text, 'memory_warden_job_duration_seconds_bucket', { job, store: s, le: '+Inf' }), `${h} ${job}`).toBe(0);
        expect(sample(text, 'memory_warden_job_duration_seconds_sum', { job, store: s }), `${h} ${job}`).toBe(0);
      }
      expect(sample(text, 'memory_warden_rows_deleted_total', { store })).toBe(0);
      for (const name of ['memory_warden_digest_new_rows_total', 'memory_warden_digest_flagged_rows_total']) expect(sample(text, name, { scope: 'all stores' }), name).toBe(0);
      // another host's store is not this worker's: none of its series here
      expect(sample(text, 'memory_warden_job_runs_total', { store: h === 'a' ? 'b1' : 'a1' })).toBeUndefined();
      // what only a run can know stays absent, never a made-up 0: rows, live rows, problems, last success
      for (const name of ['memory_warden_rows', 'memory_warden_live_rows', 'memory_warden_integrity_problems', 'memory_warden_last_success_timestamp_seconds']) {
        expect(sample(text, name, {}), name).toBeUndefined();
      }
    }
  });

  it("after one run of each job, the dashboard's queries answer with numbers in a real Prometheus: durations, rows pruned, new rows", async () => {
    // Prometheus scrapes both workers at their zero before anything runs
    prom = await startPrometheus({ targets: Object.values(metricsUrl).map((u) => new URL(u).host), rules: 'groups: []\n' });
    const zero = 'memory_warden_job_runs_total{job="prune",outcome="ok"} == 0';
    await until('Prometheus to scrape both workers at zero', async () => (await prom!.query(zero)).length === 2, 60_000);
    await until('a second scrape of each', async () => (await prom!.query(`count_over_time(${zero.replace(' == 0', '')}[1h]) >= 2`)).length === 2, 60_000);

    for (const store of ['a1', 'b1']) for (const job of RUN_ONCE) await enqueue([job, '--store', store]);
    await enqueue(['digest']);
    expect(smtp.received).toHaveLength(1);

    // Each query as the dashboard has it, over a range that holds the scrapes before and after the runs.
    const queries = dashboardQueries().map((q) => ({ ...q, expr: q.expr.replaceAll('$__rate_interval', '1h') }));
    const answer = async (panel: string, pick = 0) => {
      const q = queries.filter((x) => x.panel === panel)[pick]!;
      return (await prom!.query(q.expr)).map((r) => ({ labels: r.metric, value: Number(r.value[1]) }));
    };
    const ran = [...RUN_ONCE, 'digest'];
    // both panels of job duration: the p95 and the mean, a number for every job that ran once
    for (const pick of [0, 1]) {
      const seen = await until(`"Job duration (p95)" query ${pick} to answer for every job`, async () => {
        const rows = await answer('Job duration (p95)', pick);
        return ran.every((job) => rows.some((r) => r.labels.job === job && Number.isFinite(r.value))) ? rows : null;
      }, 60_000);
      for (const job of ran) expect(seen.find((r) => r.labels.job === job)!.value, job).not.toBeNaN();
    }
    const pruned = await until('"Pruned per day" to count the prune', async () => {
      const rows = await answer('Pruned per day');
      return ['a1', 'b1'].every((s) => (rows.find((r) => r.labels.store === s)?.value ?? 0) > 0) ? rows : null;
    }, 60_000);
    expect(pruned.map((r) => r.labels.store).sort()).toEqual(['a1', 'b1']);
    await until('"New and flagged rows per day" to count the digest', async () => ((await answer('New and flagged rows per day (digests sent)')).find((r) => r.labels.scope === 'all stores')?.value ?? 0) > 0, 60_000);
    await until('"Job runs and failures" to count each run', async () => {
      const rows = await answer('Job runs and failures');
      return ran.every((job) => (rows.find((r) => r.labels.job === job && r.labels.outcome === 'ok')?.value ?? 0) > 0);
    }, 60_000);
    // and no query of the dashboard answers NaN
    for (const q of queries) {
      const rows = await prom.query(q.expr);
      expect(rows.filter((r) => Number.isNaN(Number(r.value[1]))).map((r) => r.metric), `${q.panel}: ${q.expr}`).toEqual([]);
    }
  });

  it('/healthz and fleet --json give a last success in one format, ISO-8601 UTC with its Z', async () => {
    const health = (await (await fetch(`${metricsUrl.a}/healthz`)).json()) as { lastSuccess: Record<string, Record<string, string>> };
    const fromHealth = health.lastSuccess.a1!.prune!;
    const fleet = await cliAsync(['fleet', '--json', '--config', file], { STATE_DIR: join(dir, 'a'), MEMORY_WARDEN_HOST: 'a' });
    const status = fleet.json<{ hosts: { host: string; stores: { store: string; jobs: { job: string; lastSuccess: string | null }[] }[] }[] }>();
    const fromFleet = status.hosts.find((h) => h.host === 'a')!.stores.find((s) => s.store === 'a1')!.jobs.find((j) => j.job === 'prune')!.lastSuccess!;
    const iso = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
    expect(fromHealth).toMatch(iso);
    expect(fromFleet).toMatch(iso);
    // the same run, seen by both: at most the second the state db rounds to apart
    expect(Math.abs(Date.parse(fromHealth) - Date.parse(fromFleet))).toBeLessThan(1000);
  });
});
