/**
 * A real Prometheus (Debian's /usr/bin/prometheus) on a free loopback port, scraping given targets every second
 * with a rules file, its data in a temp folder; stop() kills it and removes the folder. And the rules' test copy.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../helpers/redis.js';

export interface TestPrometheus {
  url: string;
  /** An instant query; the result vector (throws when Prometheus reports an error: a bad expression). */
  query(expr: string): Promise<{ metric: Record<string, string>; value: [number, string] }[]>;
  alerts(): Promise<{ labels: Record<string, string>; state: string }[]>;
  logs(): string;
  stop(): Promise<void>;
}

/**
 * The shipped rules with short waits, for a test that cannot wait minutes: every `for:` becomes `forValue`, every
 * range `[…]` and `offset` becomes `rangeValue`. Nothing else changes, so the expressions tested are the shipped ones.
 */
export function shortenRules(yaml: string, forValue = '2s', rangeValue = '10s'): string {
  return yaml
    .replace(/^(\s*for:\s*)\S+/gm, `$1${forValue}`)
    .replace(/\[(\d+[smhdwy])+\]/g, `[${rangeValue}]`)
    .replace(/offset (\d+[smhdwy])+/g, `offset ${rangeValue}`);
}

export async function startPrometheus(opts: { targets: string[]; rules: string }): Promise<TestPrometheus> {
  const dir = mkdtempSync(join(tmpdir(), 'mw-prometheus-'));
  const port = await freePort();
  writeFileSync(join(dir, 'rules.yml'), opts.rules);
  // honor_labels: the worker's own `job` label (prune, snapshot, …) is kept, as docs/worker.md tells operators.
  const config = {
    global: { scrape_interval: '1s', evaluation_interval: '1s', scrape_timeout: '1s' },
    rule_files: [join(dir, 'rules.yml')],
    scrape_configs: [{ job_name: 'memory-warden', honor_labels: true, static_configs: [{ targets: opts.targets }] }],
  };
  writeFileSync(join(dir, 'prometheus.yml'), JSON.stringify(config));
  const proc: ChildProcess = spawn(
    'prometheus',
    [`--config.file=${join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let log = '';
  proc.stderr!.setEncoding('utf8').on('data', (c: string) => (log += c));
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const failed = new Promise<never>((_, reject) => proc.once('error', (err) => reject(new Error(`cannot start prometheus (${err.message}): install Debian's prometheus package`))));
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  const ready = async () => (await fetch(`${url}/-/ready`).catch(() => null))?.ok === true;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (await Promise.race([ready(), failed])) break;
    if (proc.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(`prometheus on port ${port} did not become ready: ${log.slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const api = async <T>(path: string): Promise<T> => {
    const res = await fetch(`${url}${path}`);
    const body = (await res.json()) as { status: string; data: T; error?: string };
    if (body.status !== 'success') throw new Error(`prometheus ${path}: ${body.error ?? res.status}`);
    return body.data;
  };
  return {
    url,
    query: async (expr) => (await api<{ result: { metric: Record<string, string>; value: [number, string] }[] }>(`/api/v1/query?query=${encodeURIComponent(expr)}`)).result,
    alerts: async () => (await api<{ alerts: { labels: Record<string, string>; state: string }[] }>('/api/v1/alerts')).alerts,
    logs: () => log,
    stop,
  };
}
