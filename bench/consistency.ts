/**
 * `npm run bench:consistency`: the cross-store consistency check on a 1,000,000-row warden store and its Qdrant
 * collection, served by the Qdrant test server (test/helpers/qdrant-server.ts, compiled for the benchmark by
 * bench/consistency.tsconfig.json, OpenAPI validation off) on loopback. Planted: orphan points, live rows
 * without a point, payload text differing from the fact (1,000 each), plus expired rows without points (not
 * findings). Each measured run is its own process (the server's memory is not counted):
 *   - floor: scroll every point (id + the payload keys the check reads) and read every live row id;
 *   - lookup: the floor's scroll plus each point's row looked up by id (what any checker comparing texts adds);
 *   - check: checkConsistency, as `check` and `run integrity` call it;
 *   - CLI:   `memory-warden check --json` end to end (adds the SQLite checks: integrity_check, foreign keys, …).
 * Prints durations, the check/floor ratio, the findings' counts (MISMATCH and exit 1 if not the planted
 * numbers), and each process's max RSS and peak JS heap.
 *
 *   npm run bench:consistency [-- --rows 1000000 --planted 1000 --page 1000 --point-id payload|uuid5|id --no-cli --keep]
 */
import Database from 'better-sqlite3';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import YAML from 'yaml';
import { initSchema } from '../src/layouts/warden/schema.js';
import { uuid5 } from '../src/vectors/qdrant/index.js';
import { toCanonical } from '../src/time/instants.js';

const args = process.argv.slice(2);
const opt = (name: string, fallback: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1]! : fallback;
};
const ROWS = Number(opt('rows', '1000000'));
const PLANTED = Number(opt('planted', '1000'));
const PAGE = Number(opt('page', '1000'));
const POINT_ID = opt('point-id', 'payload') as 'payload' | 'uuid5' | 'id';
const root = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const SERVER = join(root, 'dist/bench-helpers/qdrant-server.js');
const PROBE = join(root, 'dist/bench/consistency-probe.js');
const CHILD = join(root, 'dist/bench/consistency-child.js');
const CLI = join(root, 'dist/src/cli.js');
const NS = '6ba7b811-9dad-11d1-80b4-00c04fd430c8';
const COLLECTION = 'bench';
const UPSERT_BATCH = 5000;
const DAY = 86_400_000;
const NOW = Date.now();

interface TestServer { url: string; violations: string[]; close(): Promise<void> }
type StartServer = (opts?: { validate?: boolean }) => Promise<TestServer>;

/**
 * Which rows and points exist, by row number: every 100th row (from 50) expired and without a point; `PLANTED`
 * live rows without a point, `PLANTED` whose point's text differs, and `PLANTED` orphan points naming no row.
 * Planted rows are spread evenly over the id range so they fall on many pages.
 */
const step = Math.floor(ROWS / PLANTED);
const missing = (i: number) => i % step === 7 && i / step < PLANTED;
const mismatched = (i: number) => i % step === 13 && i / step < PLANTED;
const expired = (i: number) => i % 100 === 50 && !missing(i) && !mismatched(i);
const rowId = (i: number) => (POINT_ID === 'id' ? String(i + 1) : `m_${String(i).padStart(7, '0')}`);
const fact = (i: number) => `fact number ${i}: the agent learned something worth keeping for a while`;
function pointId(i: number): string | number {
  if (POINT_ID === 'id') return i + 1;
  if (POINT_ID === 'uuid5') return uuid5(rowId(i), NS);
  return uuid5(`point ${i}`, NS); // payload mode: ids unrelated to rows, in an order unrelated to theirs
}
function orphan(k: number): { id: string | number; memory_id: string } {
  const memoryId = POINT_ID === 'id' ? String(ROWS + 1 + k) : `gone_${k}`;
  const id = POINT_ID === 'id' ? ROWS + 1 + k : POINT_ID === 'uuid5' ? uuid5(memoryId, NS) : uuid5(`orphan ${k}`, NS);
  return { id, memory_id: memoryId };
}

function buildStore(path: string): { live: number } {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  initSchema(db, path);
  const insert = db.prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at, expires_at) VALUES (?, 'user', ?, 'message:bench', ?, ?, ?)`);
  const created = toCanonical(NOW - 10 * DAY);
  const gone = toCanonical(NOW - DAY);
  let live = 0;
  db.transaction(() => {
    for (let i = 0; i < ROWS; i++) {
      insert.run(rowId(i), fact(i), created, created, expired(i) ? gone : null);
      if (!expired(i)) live += 1;
    }
  })();
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.close();
  return { live };
}

async function call(url: string, method: string, path: string, body?: unknown): Promise<void> {
  const res = await fetch(`${url}${path}`, { method, headers: { 'content-type': 'application/json' }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status} ${await res.text()}`);
  await res.arrayBuffer();
}

/** The collection, through the REST API the client uses (PUT collection, PUT points in batches). */
async function buildCollection(url: string): Promise<number> {
  await call(url, 'PUT', `/collections/${COLLECTION}`, { vectors: { size: 4, distance: 'Cosine' } });
  const vector = [0.1, 0.2, 0.3, 0.4];
  let batch: { id: string | number; vector: number[]; payload: Record<string, unknown> }[] = [];
  let points = 0;
  const flush = async () => {
    if (batch.length === 0) return;
    await call(url, 'PUT', `/collections/${COLLECTION}/points?wait=true`, { points: batch });
    points += batch.length;
    batch = [];
  };
  for (let i = 0; i < ROWS; i++) {
    if (expired(i) || missing(i)) continue;
    const data = mismatched(i) ? `${fact(i)} (an older wording)` : fact(i);
    batch.push({ id: pointId(i), vector, payload: { memory_id: rowId(i), data } });
    if (batch.length === UPSERT_BATCH) await flush();
  }
  for (let k = 0; k < PLANTED; k++) {
    const o = orphan(k);
    batch.push({ id: o.id, vector, payload: { memory_id: o.memory_id, data: 'a memory deleted from SQLite' } });
    if (batch.length === UPSERT_BATCH) await flush();
  }
  await flush();
  return points;
}

interface Measured { ms: number; stdout: string; exitCode: number | null; maxRssBytes: number; peakHeapUsed: number; peakHeapTotal: number }

/** Run a node script in its own process with the memory probe preloaded. */
async function measure(dir: string, label: string, script: string, scriptArgs: string[]): Promise<Measured> {
  const probeOut = join(dir, `probe-${label}.json`);
  const t0 = performance.now();
  const nodeFlags = (process.env.MW_BENCH_NODE_FLAGS ?? '').split(' ').filter(Boolean); // e.g. --cpu-prof
  const child = spawn(process.execPath, [...nodeFlags, '--import', pathToFileURL(PROBE).href, script, ...scriptArgs], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, MW_BENCH_PROBE: probeOut, LOG_LEVEL: 'warn' },
  });
  let stdout = '';
  child.stdout.on('data', (d) => (stdout += d));
  const exitCode = await new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const ms = performance.now() - t0;
  const probe = JSON.parse(readFileSync(probeOut, 'utf8')) as { maxRssBytes: number; peakHeapUsed: number; peakHeapTotal: number };
  return { ms, stdout, exitCode, ...probe };
}

const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(0)} MB`;
const sec = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
const mem = (m: Measured) => `max RSS ${mb(m.maxRssBytes)}, peak JS heap ${mb(m.peakHeapUsed)} used / ${mb(m.peakHeapTotal)} total`;

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'mw-bench-consistency-'));
  const { startQdrantTestServer } = (await import(pathToFileURL(SERVER).href)) as { startQdrantTestServer: StartServer };
  const server = await startQdrantTestServer({ validate: false });
  try {
    let t = performance.now();
    const dbPath = join(dir, 'memory.db');
    const { live } = buildStore(dbPath);
    console.log(`built ${ROWS.toLocaleString('en')} rows (${live.toLocaleString('en')} live) in ${sec(performance.now() - t)}`);
    t = performance.now();
    const points = await buildCollection(server.url);
    console.log(`upserted ${points.toLocaleString('en')} points in ${sec(performance.now() - t)} (test server, OpenAPI validation off)`);

    const configFile = join(dir, 'config.yaml');
    writeFileSync(configFile, YAML.stringify({
      stateDb: join(dir, 'state.db'),
      stores: { bench: { db: dbPath, qdrant: { url: server.url, collections: [COLLECTION], pointId: POINT_ID, textKey: 'data', uuidNamespace: NS } } },
    }));

    const floor = await measure(dir, 'floor', CHILD, ['floor', configFile, 'bench', String(PAGE)]);
    const lookup = await measure(dir, 'lookup', CHILD, ['lookup', configFile, 'bench', String(PAGE)]);
    const check = await measure(dir, 'check', CHILD, ['check', configFile, 'bench', String(PAGE)]);
    const cli = args.includes('--no-cli') ? undefined : await measure(dir, 'cli', CLI, ['check', '--config', configFile, '--store', 'bench', '--json']);
    for (const [label, m] of [['floor', floor], ['lookup', lookup], ['check', check]] as const) {
      if (m.exitCode !== 0) throw new Error(`${label} run failed (exit ${m.exitCode})`);
    }
    const f = JSON.parse(floor.stdout) as { ms: number; points: number; liveRows: number; scrollMs: number };
    const l = JSON.parse(lookup.stdout) as { ms: number; points: number; orphans: number };
    const c = JSON.parse(check.stdout) as { ms: number; liveRows: number; findings: Record<string, number> };

    const expected = { orphan_points: PLANTED, missing_points: PLANTED, payload_mismatch: PLANTED };
    const problems: string[] = [];
    for (const [code, n] of Object.entries(expected)) if ((c.findings[code] ?? 0) !== n) problems.push(`${code} ${c.findings[code] ?? 0}, planted ${n}`);
    for (const code of Object.keys(c.findings)) if (!(code in expected)) problems.push(`unexpected finding ${code} (${c.findings[code]})`);
    if (c.liveRows !== live) problems.push(`liveRows ${c.liveRows}, expected ${live}`);
    if (f.points !== points || f.liveRows !== live) problems.push(`floor counted ${f.points} points / ${f.liveRows} rows, expected ${points} / ${live}`);
    if (l.points !== points || l.orphans !== PLANTED) problems.push(`lookup counted ${l.points} points / ${l.orphans} orphans, expected ${points} / ${PLANTED}`);
    let cliCounts = '';
    if (cli) {
      // exit 1: problems found (the orphans), as planted
      const report = JSON.parse(cli.stdout) as { problems: { code: string; count?: number }[]; notes: { code: string; count?: number }[] };
      const counts = Object.fromEntries([...report.problems, ...report.notes].map((x) => [x.code, x.count ?? 0]));
      cliCounts = Object.entries(expected).map(([code]) => `${code} ${counts[code] ?? 0}`).join(', ');
      for (const [code, n] of Object.entries(expected)) if (counts[code] !== n) problems.push(`CLI ${code} ${counts[code] ?? 0}, planted ${n}`);
      if (cli.exitCode !== 1) problems.push(`CLI check exit ${cli.exitCode}, expected 1 (problems found)`);
    }

    const sqliteVersion = (new Database(':memory:').prepare('select sqlite_version() v').get() as { v: string }).v;
    console.log(`\nrows ${ROWS.toLocaleString('en')} (${live.toLocaleString('en')} live), points ${points.toLocaleString('en')}, pointId ${POINT_ID}, page ${PAGE}, node ${process.version}, sqlite ${sqliteVersion}`);
    console.log(`floor (scroll every point id + payload keys, read every live row id): ${sec(f.ms)} (scroll ${sec(f.scrollMs)}); ${mem(floor)}`);
    console.log(`scroll + each point's row looked up by id (nothing compared):      ${sec(l.ms)}; ${mem(lookup)}`);
    console.log(`consistency check:                                                  ${sec(c.ms)}; ${mem(check)}`);
    console.log(`  findings: ${Object.entries(c.findings).map(([k, n]) => `${k} ${n}`).join(', ')} (planted ${PLANTED} each)`);
    console.log(`ratio check / floor: ${(c.ms / f.ms).toFixed(2)}x; check / (scroll + lookups): ${(c.ms / l.ms).toFixed(2)}x`);
    if (cli) console.log(`memory-warden check --json (CLI, all SQLite checks too):              ${sec(cli.ms)} incl. process start; ${mem(cli)}\n  findings: ${cliCounts}`);
    console.log(`(the test server itself, not counted above: bench process max RSS ${mb(process.resourceUsage().maxRSS * 1024)})`);
    if (server.violations.length > 0) problems.push(`test server: ${server.violations[0]}`);
    if (problems.length > 0) {
      console.log(`\nMISMATCH: ${problems.join('; ')}`);
      process.exitCode = 1;
    } else {
      console.log('\nfindings match the planted numbers');
    }
  } finally {
    await server.close();
    if (!args.includes('--keep')) rmSync(dir, { recursive: true, force: true });
    else console.log(`kept ${dir}`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
