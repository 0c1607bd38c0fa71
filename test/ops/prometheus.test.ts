import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from '../helpers/redis.js';
import { startSmtp, type TestSmtp } from '../helpers/smtp.js';
import { assertBuilt, killAll, makeStore, ROOT, spawnWorker, tempDir, until, type SpawnedWorker } from '../queue/fixtures.js';
import { shortenRules, startPrometheus, type TestPrometheus } from './prometheus.js';
import { dashboardQueries, unexportedMetrics } from './dashboard.js';

/**
 * Two worker processes (hosts a and b, one config for the fleet) scraped by a real Prometheus on loopback that
 * loads the shipped alert rules (waits shortened) and answers the shipped dashboard's queries.
 */
describe('a real Prometheus scraping two workers', { timeout: 240_000 }, () => {
  let redis: TestRedis;
  let smtp: TestSmtp;
  let prom: TestPrometheus;
  let prefix: string;
  const workers: Record<string, SpawnedWorker> = {};
  const metricsUrl: Record<string, string> = {};

  beforeAll(async () => {
    assertBuilt();
    redis = await startTestRedis();
    smtp = await startSmtp();
    prefix = uniquePrefix('ops-prom');
    const dir = tempDir('ops-prom');
    mkdirSync(join(dir, 'nas'));
    const stores: Record<string, { db: string; host: string }> = {};
    for (const h of ['a', 'b']) {
      mkdirSync(join(dir, h));
      stores[`${h}1`] = { db: makeStore(join(dir, h, `${h}1.db`), { expired: 5, live: 3 }), host: h };
    }
    // A store whose file is not a database: its jobs fail, so the failure figures exist.
    writeFileSync(join(dir, 'a', 'broken.db'), 'not a database, and never one\n'.repeat(200));
    stores.broken = { db: join(dir, 'a', 'broken.db'), host: 'a' };
    const every = (s: number) => ({ enabled: true, pattern: `*/${s} * * * * *` });
    const file = join(dir, 'fleet.yaml');
    writeFileSync(
      file,
      JSON.stringify({
        stateDb: '${STATE_DIR}/state.db',
        snapshot: { root: '${STATE_DIR}/snapshots', targets: [{ name: 'nas', type: 'local', path: join(dir, 'nas') }] },
        log: { level: 'info' },
        redis: { url: redis.url, prefix },
        smtp: smtp.config(),
        digest: { to: ['owner@example.org'], from: 'warden <warden@example.org>', hostTimeoutSeconds: 5 },
        worker: {
          http: { port: 0 },
          concurrency: 1,
          attempts: 1,
          heartbeatMs: 200,
          silentAfterMs: 1500,
          schedules: { prune: every(1), integrity: every(1), snapshot: every(2), digest: every(2), drift: { enabled: false } },
        },
        stores,
      }),
    );
    for (const h of ['a', 'b']) workers[h] = spawnWorker(file, ['worker', '--host', h], { STATE_DIR: join(dir, h) });
    for (const h of ['a', 'b']) {
      await workers[h]!.ready;
      metricsUrl[h] = `${String((await workers[h]!.waitFor('http listening', (l) => l.msg.startsWith('http listening'))).url)}/metrics`;
    }
    const rules = shortenRules(readFileSync(join(ROOT, 'config/alerts.yml'), 'utf8'));
    prom = await startPrometheus({ targets: Object.values(metricsUrl).map((u) => new URL(u).host), rules });
  });

  afterAll(async () => {
    await killAll(Object.values(workers));
    await prom?.stop();
    await smtp?.close();
    if (prefix) await deletePrefix(redis.client, prefix);
    await redis?.stop();
  });

  const scrape = async () => (await Promise.all(Object.values(metricsUrl).map(async (u) => (await fetch(u)).text()))).join('\n');

  it('every query of the dashboard names only metrics the workers export, and returns data', async () => {
    const queries = dashboardQueries();
    expect(queries.length).toBeGreaterThan(10);
    // Each job has run (and the broken store failed) once every figure is there; then Prometheus must answer each query.
    const missing = await until('the workers to export every metric the dashboard names', async () => {
      const left = unexportedMetrics(queries.map((q) => q.expr), await scrape());
      return left.length === 0 ? [] : null;
    }, 120_000).catch(async (err: Error) => unexportedMetrics(queries.map((q) => q.expr), await scrape()).concat(err.message));
    expect(missing).toEqual([]);
    for (const q of queries) {
      const expr = q.expr.replaceAll('$__rate_interval', '10s');
      await until(`data for "${q.panel}": ${expr}`, async () => (await prom.query(expr)).length > 0, 60_000);
    }
  });

  it('kill -9 one worker: the host-silent alert reaches firing in Prometheus', async () => {
    const silentB = async () => (await prom.alerts()).find((a) => a.labels.alertname === 'MemoryWardenHostSilent' && a.labels.fleet_host === 'b');
    await until('Prometheus to scrape both workers', async () => (await prom.query('memory_warden_fleet_host_silent{fleet_host="b"} == 0')).length === 2, 60_000);
    expect(await silentB()).toBeUndefined();
    workers.b!.proc.kill('SIGKILL');
    await workers.b!.exited;
    // heartbeat lapses (silentAfterMs 1.5 s), a scrape, an evaluation, `for: 2s`: a generous bound on the state, never a timing assertion
    const alert = await until('MemoryWardenHostSilent{fleet_host="b"} to fire', async () => ((await silentB())?.state === 'firing' ? await silentB() : null), 60_000);
    expect(alert.labels).toMatchObject({ fleet_host: 'b', severity: 'page' });
    // host a, still answering, is not silent
    expect((await prom.alerts()).some((a) => a.labels.alertname === 'MemoryWardenHostSilent' && a.labels.fleet_host === 'a')).toBe(false);
  });
});
