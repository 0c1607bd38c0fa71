import { describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { CLI, countRows, makeStore, spawnWorker, tempDir, until, useWorkerProcesses, writeConfig } from './fixtures.js';

const exec = promisify(execFile);

/**
 * When a job last succeeded has one record, the host's state db: /healthz says it, the metric is set from it, and
 * `fleet` (from any machine) reads what each worker publishes of it. A dry run is no run of the job: it is recorded
 * nowhere, so a what-if prune never hides an overdue one. Real worker, real CLI processes, the real Redis.
 */
describe('the last success of a job', { timeout: 120_000 }, () => {
  const { redis, workers, prefix: prefixFor, queue } = useWorkerProcesses();

  async function setUp(name: string) {
    const dir = tempDir(name);
    const prefix = prefixFor(name);
    const store = makeStore(join(dir, 'agent.db'), { expired: 2, live: 1 });
    const file = writeConfig({ dir, redisUrl: redis().url, prefix, stores: { agent: store }, worker: { heartbeatMs: 200, schedules: { prune: { enabled: true, pattern: '0 3 1 1 *' } } } });
    const w = spawnWorker(file);
    workers.push(w);
    await w.ready;
    const url = String((await w.waitFor('http listening', (l) => l.msg.startsWith('http listening'))).url);
    const cli = async (args: string[]) => {
      const r = await exec(process.execPath, [CLI, ...args, '--config', file], { env: { ...process.env, LOG_LEVEL: 'silent', REDIS_URL: '', MEMORY_WARDEN_CONFIG: '' } })
        .then((o) => ({ code: 0, ...o }), (e: { code: number; stdout: string; stderr: string }) => e);
      return { code: r.code, stdout: r.stdout, stderr: r.stderr };
    };
    const healthPrune = async () => ((await (await fetch(`${url}/healthz`)).json()) as { lastSuccess: Record<string, Record<string, string>> }).lastSuccess.agent?.prune ?? null;
    const metricPrune = async () => {
      const text = await (await fetch(`${url}/metrics`)).text();
      const m = /^memory_warden_last_success_timestamp_seconds\{[^}]*job="prune"[^}]*store="agent"[^}]*\} (\d+)$/m.exec(text);
      return m ? Number(m[1]) : null;
    };
    const fleetPrune = async () => {
      const r = await cli(['fleet', '--json']);
      const status = JSON.parse(r.stdout) as { hosts: { stores: { store: string; jobs: { job: string; lastSuccess: string | null }[] }[] }[] };
      return status.hosts.flatMap((h) => h.stores).find((s) => s.store === 'agent')!.jobs.find((j) => j.job === 'prune')!.lastSuccess;
    };
    return { dir, prefix, store, file, w, cli, healthPrune, metricPrune, fleetPrune };
  }

  it('a dry-run prune, from the CLI or through the worker, is no last success: not on /healthz, the metric or fleet', async () => {
    const s = await setUp('dry-run');
    const dry = await s.cli(['run', 'prune', '--store', 'agent', '--dry-run', '--json']);
    expect(dry.code, dry.stderr).toBe(0);
    expect(JSON.parse(dry.stdout)).toMatchObject({ deleted: 2, dryRun: true });
    // Through the worker, as a queued job with dryRun in its payload.
    await queue('maintenance.solo', s.prefix).add('prune', { store: 'agent', dryRun: true });
    await s.w.waitFor('the queued dry run', (l) => l.msg.startsWith('job done') && l.job === 'prune');
    // A heartbeat after it: the worker has published its last successes since (it does with every heartbeat).
    const after = Date.now();
    await until('a heartbeat after the dry run', async () => {
      const beat = await redis().client.hget(`${s.prefix}:fleet:hosts`, 'solo');
      return beat !== null && Date.parse((JSON.parse(beat) as { lastSeen: string }).lastSeen) > after;
    });
    expect(countRows(s.store)).toBe(3);
    expect(await s.healthPrune()).toBeNull();
    expect(await s.metricPrune()).toBeNull();
    expect(await s.fleetPrune()).toBeNull();
    expect(await s.fleetPrune()).toBeNull();
  });

  it('a prune run by hand on the host is what /healthz, the metric and fleet all say, the same instant', async () => {
    const s = await setUp('one-truth');
    const run = await s.cli(['run', 'prune', '--store', 'agent']);
    expect(run.code, run.stderr).toBe(0);
    expect(countRows(s.store)).toBe(1);
    const health = await s.healthPrune();
    expect(health).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
    const t = Date.parse(health!);
    expect(await s.metricPrune()).toBe(t / 1000);
    // fleet reads what the worker published with its next heartbeat: never "never" for a run /healthz lists.
    const seen = await until('fleet to show the prune', async () => await s.fleetPrune());
    expect(Date.parse(seen)).toBe(t);
    const text = await s.cli(['fleet']);
    expect(text.stdout).toContain(`prune      last success ${new Date(t).toISOString()}`);
  });
});
