/**
 * Prune of a PostgreSQL warden store beside live agents, against `psql` running the same DELETE on the same data,
 * alternated: whole processes, each round on a freshly loaded store, with four agents (dist/bench/pg-agent.js)
 * inserting and superseding over their own connections throughout. Prints each run's wall time and the agents' max and
 * p99 write time, then the medians. Needs the native server (PG_BENCH_URL, default postgres://postgres@127.0.0.1:5432)
 * and `npm run build`.
 *
 *   node dist/bench/pg-prune.js [rows=200000] [rounds=3]
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

const rows = Number(process.argv[2] ?? 200_000);
const rounds = Number(process.argv[3] ?? 3);
const server = process.env.PG_BENCH_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const name = `mw_bench_${process.pid}`;
const url = server.replace(/\/[^/]*$/, `/${name}`);
const CLI = fileURLToPath(new URL('../src/cli.js', import.meta.url));
const AGENT = fileURLToPath(new URL('./pg-agent.js', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'mw-pg-bench-'));
const config = join(dir, 'config.yaml');
writeFileSync(config, JSON.stringify({ stateDb: join(dir, 'state.db'), stores: { fleet: { engine: 'postgres', postgres: { url: '${BENCH_PG_URL}', schema: 'fleet' } } } }));
const env = { ...process.env, BENCH_PG_URL: url, LOG_LEVEL: 'silent' };
/** What prune deletes, as one statement: the rows the two rules select (the cascade takes their older versions). */
const SAME_SQL = `DELETE FROM fleet.memory WHERE expires_at <= now() OR (superseded_by IS NOT NULL AND created_at < now() - interval '180 days')`;

const admin = new pg.Client({ connectionString: server });
await admin.connect();
await admin.query(`CREATE DATABASE ${name}`);
const db = new pg.Client({ connectionString: url });
await db.connect();

async function load(): Promise<void> {
  await db.query('DROP SCHEMA IF EXISTS fleet CASCADE');
  const init = spawnSync(process.execPath, [CLI, 'init', '--store', 'fleet', '--config', config], { env, encoding: 'utf8' });
  if (init.status !== 0) throw new Error(init.stderr);
  const half = Math.floor(rows / 2);
  await db.query(`INSERT INTO fleet.memory (id, subject, fact, source) SELECT 'live-' || g, 'user', 'likes tea ' || g, 'message' FROM generate_series(1, $1) g`, [half]);
  await db.query(`INSERT INTO fleet.memory (id, subject, fact, source, expires_at) SELECT 'exp-' || g, 'user', 'meeting ' || g, 'message', now() - interval '1 day' FROM generate_series(1, $1) g`, [rows - half]);
  await db.query('ANALYZE fleet.memory');
  await db.query('CHECKPOINT');
}

function run(cmd: string, args: string[]): Promise<number> {
  const t0 = performance.now();
  const child = spawn(cmd, args, { env, stdio: ['ignore', 'ignore', 'inherit'] });
  return new Promise((resolve, reject) => child.once('close', (code) => (code === 0 ? resolve(performance.now() - t0) : reject(new Error(`${cmd} exit ${code}`)))));
}

async function withAgents(fn: () => Promise<number>): Promise<{ ms: number; maxMs: number; p99Ms: number; errors: number }> {
  const agents = [1, 2, 3, 4].map((n) => spawn(process.execPath, [AGENT, url, 'fleet', `a${n}-${Date.now()}`, '2'], { stdio: ['ignore', 'pipe', 'inherit'] }));
  const outs = agents.map((a) => new Promise<string>((resolve) => {
    let out = '';
    a.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
    a.once('close', () => resolve(out));
  }));
  await Promise.all(agents.map((a) => new Promise((resolve) => a.stdout.once('data', resolve))));
  await new Promise((r) => setTimeout(r, 300)); // the agents' steady state before the delete starts
  const ms = await fn();
  for (const a of agents) a.kill('SIGTERM');
  const reports = (await Promise.all(outs)).map((o) => JSON.parse(o.trim().split('\n').at(-1)!) as { maxMs: number; p99Ms: number; errors: string[] });
  return { ms, maxMs: Math.max(...reports.map((r) => r.maxMs)), p99Ms: Math.max(...reports.map((r) => r.p99Ms)), errors: reports.reduce((n, r) => n + r.errors.length, 0) };
}

const results: Record<'warden' | 'psql', { ms: number; maxMs: number; p99Ms: number; errors: number }[]> = { warden: [], psql: [] };
try {
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? (['warden', 'psql'] as const) : (['psql', 'warden'] as const);
    for (const tool of order) {
      await load();
      const r = await withAgents(() => (tool === 'warden' ? run(process.execPath, [CLI, 'run', 'prune', '--config', config]) : run('psql', [url, '-qc', SAME_SQL])));
      results[tool].push(r);
      process.stdout.write(`round ${round + 1} ${tool.padEnd(6)} ${r.ms.toFixed(0).padStart(6)} ms  agents max ${r.maxMs.toFixed(1)} ms  p99 ${r.p99Ms.toFixed(1)} ms  errors ${r.errors}\n`);
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const ratios = results.warden.map((w, i) => w.ms / results.psql[i]!.ms);
  process.stdout.write(`${rows} rows, ${rounds} rounds: prune/psql time ratio min ${Math.min(...ratios).toFixed(2)} median ${median(ratios).toFixed(2)} max ${Math.max(...ratios).toFixed(2)}\n`);
  for (const tool of ['warden', 'psql'] as const) {
    const r = results[tool];
    process.stdout.write(`${tool}: agents' max wait median ${median(r.map((x) => x.maxMs)).toFixed(1)} ms (worst ${Math.max(...r.map((x) => x.maxMs)).toFixed(1)}), p99 median ${median(r.map((x) => x.p99Ms)).toFixed(1)} ms\n`);
  }
} finally {
  await db.end();
  await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin.end();
}
