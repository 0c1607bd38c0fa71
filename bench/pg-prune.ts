/**
 * A PostgreSQL warden store's jobs as whole processes, each beside the platform's own tools doing the same work on the
 * same data, alternated round by round (medians of the paired ratios). Needs the native server (PG_BENCH_URL, default
 * postgres://postgres@127.0.0.1:5432), its client programs (psql, pg_dump, pg_amcheck: on PATH or in PG_BINDIR, default
 * Debian's /usr/lib/postgresql/15/bin) and `npm run build`.
 * - prune beside live agents: four agents (dist/bench/pg-agent.js) inserting and superseding over their own connections
 *   throughout, each round on a freshly loaded store, against `psql` running the same DELETE; prints the agents' max
 *   and p99 write time too; with BENCH_PG_BEFORE=path/to/another/build/src/cli.js, that build's prune runs in each
 *   round too (a change measured beside the code before it, under the same load);
 * - check: `memory-warden check` against `pg_amcheck` of the same indexes (bt_index_check with heapallindexed, as
 *   check runs it) plus `psql` running check's own queries;
 * - snapshot: `run snapshot` (the schema's tables at one instant into a snapshot folder, verified, holds made) against
 *   `pg_dump -n` of the same schema into a file;
 * - with BENCH_PG_BEFORE, the other build runs beside check, snapshot and erase too;
 * - erase: `erase --user` of one person in ten (DELETE, VACUUM FULL, the byte check of the relation files) against
 *   `psql` running the same DELETE and VACUUM FULL, each round on a freshly loaded store.
 *
 *   node dist/bench/pg-prune.js [rows=200000] [rounds=3] [jobs=prune,check,snapshot,erase]
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

const rows = Number(process.argv[2] ?? 200_000);
const rounds = Number(process.argv[3] ?? 3);
const jobs = new Set((process.argv[4] ?? 'prune,check,snapshot,erase').split(','));
const server = process.env.PG_BENCH_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const name = `mw_bench_${process.pid}`;
const url = server.replace(/\/[^/]*$/, `/${name}`);
const CLI = fileURLToPath(new URL('../src/cli.js', import.meta.url));
const AGENT = fileURLToPath(new URL('./pg-agent.js', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'mw-pg-bench-'));
const config = join(dir, 'config.yaml');
writeFileSync(config, JSON.stringify({ stateDb: join(dir, 'state.db'), snapshot: { root: join(dir, 'snapshots') }, stores: { fleet: { engine: 'postgres', postgres: { url: '${BENCH_PG_URL}', schema: 'fleet' } } } }));
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

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** A PostgreSQL client program: on PATH, else in PG_BINDIR (Debian keeps pg_amcheck only there). */
function pgProgram(name: string): string {
  const bindir = process.env.PG_BINDIR ?? '/usr/lib/postgresql/15/bin';
  const onPath = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).stdout.trim();
  if (onPath) return onPath;
  if (existsSync(join(bindir, name))) return join(bindir, name);
  throw new Error(`${name}: not on PATH nor in ${bindir} (PG_BINDIR)`);
}

async function benchPrune(): Promise<void> {
  type Tool = 'warden' | 'psql' | 'before';
  const before = process.env.BENCH_PG_BEFORE;
  const results: Record<Tool, { ms: number; maxMs: number; p99Ms: number; errors: number }[]> = { warden: [], psql: [], before: [] };
  const tools: Tool[] = before ? ['warden', 'psql', 'before'] : ['warden', 'psql'];
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? tools : [...tools].reverse();
    for (const tool of order) {
      await load();
      const cli = tool === 'before' ? before! : CLI;
      const r = await withAgents(() => (tool === 'psql' ? run('psql', [url, '-qc', SAME_SQL]) : run(process.execPath, [cli, 'run', 'prune', '--config', config])));
      results[tool].push(r);
      process.stdout.write(`prune round ${round + 1} ${tool.padEnd(6)} ${r.ms.toFixed(0).padStart(6)} ms  agents max ${r.maxMs.toFixed(1)} ms  p99 ${r.p99Ms.toFixed(1)} ms  errors ${r.errors}\n`);
    }
  }
  const ratios = results.warden.map((w, i) => w.ms / results.psql[i]!.ms);
  process.stdout.write(`${rows} rows, ${rounds} rounds: prune/psql time ratio min ${Math.min(...ratios).toFixed(2)} median ${median(ratios).toFixed(2)} max ${Math.max(...ratios).toFixed(2)}\n`);
  if (before) {
    const was = results.before.map((b, i) => b.ms / results.psql[i]!.ms);
    const gain = results.warden.map((w, i) => w.ms / results.before[i]!.ms);
    process.stdout.write(`before: prune/psql time ratio median ${median(was).toFixed(2)} (${Math.min(...was).toFixed(2)}-${Math.max(...was).toFixed(2)}); this build/before median ${median(gain).toFixed(2)} (${Math.min(...gain).toFixed(2)}-${Math.max(...gain).toFixed(2)})\n`);
  }
  for (const tool of tools) {
    const r = results[tool];
    process.stdout.write(`${tool}: agents' max wait median ${median(r.map((x) => x.maxMs)).toFixed(1)} ms (worst ${Math.max(...r.map((x) => x.maxMs)).toFixed(1)}), p99 median ${median(r.map((x) => x.p99Ms)).toFixed(1)} ms\n`);
  }
}

/**
 * memory-warden's command and the baseline, alternated round by round (`prepare` before each run: a fresh store where
 * the job changes it), the paired ratios' median and range printed; with BENCH_PG_BEFORE, that build's command
 * (`warden` given its cli.js) runs in each round too.
 */
async function paired(what: string, prepare: () => Promise<void>, warden: (cli: string) => Promise<number>, baseline: () => Promise<number>): Promise<void> {
  type Tool = 'warden' | 'baseline' | 'before';
  const before = process.env.BENCH_PG_BEFORE;
  const tools: Tool[] = before ? ['warden', 'baseline', 'before'] : ['warden', 'baseline'];
  const ms: Record<Tool, number[]> = { warden: [], baseline: [], before: [] };
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? tools : [...tools].reverse();
    for (const tool of order) {
      await prepare();
      const t = await (tool === 'baseline' ? baseline() : warden(tool === 'before' ? before! : CLI));
      ms[tool].push(t);
      process.stdout.write(`${what} round ${round + 1} ${tool.padEnd(8)} ${t.toFixed(0).padStart(6)} ms\n`);
    }
  }
  const range = (xs: number[]) => `${median(xs).toFixed(2)} (${Math.min(...xs).toFixed(2)}-${Math.max(...xs).toFixed(2)})`;
  const ratios = ms.warden.map((w, i) => w / ms.baseline[i]!);
  process.stdout.write(`${what}, ${rows} rows, ${rounds} rounds: memory-warden median ${median(ms.warden).toFixed(0)} ms, baseline median ${median(ms.baseline).toFixed(0)} ms, ratio median ${range(ratios)}\n`);
  if (before) {
    process.stdout.write(`${what} before: median ${median(ms.before).toFixed(0)} ms, ratio to the baseline ${range(ms.before.map((b, i) => b / ms.baseline[i]!))}; this build/before ${range(ms.warden.map((w, i) => w / ms.before[i]!))}\n`);
  }
}

/** What `check` asks of the table, as check.ts asks it (its cutoffs from the default config), for psql. */
const CHECK_SQL = `
SELECT count(*) AS rows, count(*) FILTER (WHERE superseded_by IS NULL AND (expires_at IS NULL OR expires_at > now())) AS live,
  count(*) FILTER (WHERE trim(source) = '') AS empty_source,
  count(*) FILTER (WHERE superseded_by IS NULL AND expires_at IS NULL AND confirmed_at < now() - interval '90 days') AS review_due,
  count(*) FILTER (WHERE expires_at <= now() OR (superseded_by IS NOT NULL AND created_at < now() - interval '180 days')) AS pending
FROM fleet.memory;
SELECT m.id, count(*) OVER () AS n FROM fleet.memory m WHERE m.superseded_by IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM fleet.memory p WHERE p.id = m.superseded_by) ORDER BY m.id LIMIT 50;
WITH RECURSIVE reached(id) AS (
  SELECT m.id FROM fleet.memory m WHERE m.superseded_by IS NULL OR NOT EXISTS (SELECT 1 FROM fleet.memory p WHERE p.id = m.superseded_by)
  UNION SELECT c.id FROM fleet.memory c JOIN reached r ON c.superseded_by = r.id)
SELECT m.id, count(*) OVER () AS n FROM fleet.memory m LEFT JOIN reached r ON r.id = m.id WHERE r.id IS NULL ORDER BY m.id LIMIT 50;
SELECT id FROM fleet.memory WHERE superseded_by IS NULL AND expires_at IS NULL AND confirmed_at < now() - interval '90 days' ORDER BY confirmed_at, id COLLATE "C" LIMIT 50;`;

/**
 * One person in ten (`p0` … `p9` as subjects, the per-user store's person), every text and id unique and of one width
 * (as UUIDs are): no erased id or text is the beginning of a remaining row's (`m-10` of `m-100`), which the byte check
 * would find in that row's bytes and have to tell apart (BENCH_PG_PREFIXES=1 loads them so: the slow case).
 */
async function loadPeople(): Promise<void> {
  await db.query('DROP SCHEMA IF EXISTS fleet CASCADE');
  const init = spawnSync(process.execPath, [CLI, 'init', '--store', 'fleet', '--config', config], { env, encoding: 'utf8' });
  if (init.status !== 0) throw new Error(init.stderr);
  const n = process.env.BENCH_PG_PREFIXES === '1' ? 'g::text' : `lpad(g::text, 9, '0')`;
  await db.query(`INSERT INTO fleet.memory (id, subject, fact, source) SELECT 'm-' || ${n}, 'p' || (g % 10), 'said thing number ' || ${n} || ' about the weather', 'message ' || ${n} FROM generate_series(1, $1) g`, [rows]);
  await db.query('ANALYZE fleet.memory');
  await db.query('CHECKPOINT');
}


try {
  if (jobs.has('prune')) await benchPrune();
  if (jobs.has('check') || jobs.has('snapshot')) await load();
  if (jobs.has('check')) {
    const amcheck = pgProgram('pg_amcheck');
    // The same verification check asks of amcheck: bt_index_check of every btree index of the schema, heapallindexed.
    await paired('check', async () => {}, (cli) => run(process.execPath, [cli, 'check', '--store', 'fleet', '--config', config]),
      async () => (await run(amcheck, ['-i', 'fleet.*', '--heapallindexed', url])) + (await run('psql', [url, '-qo', '/dev/null', '-c', CHECK_SQL])));
  }
  if (jobs.has('snapshot')) {
    const dump = join(dir, 'dump.sql');
    await paired('snapshot', async () => rmSync(join(dir, 'snapshots'), { recursive: true, force: true }),
      (cli) => run(process.execPath, [cli, 'run', 'snapshot', '--store', 'fleet', '--config', config]),
      () => run(pgProgram('pg_dump'), ['-n', 'fleet', '-f', dump, url]));
  }
  if (jobs.has('erase')) {
    await paired('erase', loadPeople, (cli) => run(process.execPath, [cli, 'erase', '--user', 'p0', '--store', 'fleet', '--config', config]),
      () => run('psql', [url, '-q', '-c', 'DELETE FROM fleet.memory WHERE subject = \'p0\'', '-c', 'VACUUM FULL fleet.memory']));
  }
} finally {
  await db.end();
  await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin.end();
  rmSync(dir, { recursive: true, force: true });
}
