/**
 * `npm run bench:prune`: prune of a 1,000,000-row store (25% expired, 10% long superseded, dangling chains) by
 * the sqlite3 CLI running the seed's SQL, and by memory-warden's batched prune, each with an agent-like writer in
 * a second process writing every 2 ms. Prints both times, their ratio, and the writer's latency and errors.
 *
 *   npm run bench:prune [-- --rows 1000000 --batch 10000 --batch-ms 40 --pause-ms 30 --writers 1 --full-windows --runs 3 --no-one --keep]
 */
import Database from 'better-sqlite3';
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { prune } from '../jobs/prune.js';
import { loadConfig } from '../src/config/config.js';
import { silentLogger } from '../src/log/logger.js';
import { buildStore, freshCopy } from './store.js';

const args = process.argv.slice(2);
const opt = (name: string, fallback: number) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const ROWS = opt('rows', 1_000_000);
const BATCH = opt('batch', 0); // 0: the configured default
const RUNS = opt('runs', 3);
const BATCH_MS = opt('batch-ms', 0); // 0: the configured default
const PAUSE_MS = opt('pause-ms', -1); // -1: the configured default
const WRITERS = opt('writers', 1);
const FULL_WINDOWS = args.includes('--full-windows'); // prune.windowEndsOnCommit: false
const root = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const dir = join(root, 'bench-out');
const WRITER = join(root, 'dist/bench/agent-writer.js');
const NOW = Date.now();

const SEED_SQL = `PRAGMA foreign_keys = ON;
DELETE FROM memory WHERE expires_at IS NOT NULL AND expires_at <= datetime('now');
DELETE FROM memory WHERE superseded_by IS NOT NULL AND created_at < datetime('now', '-180 days');`;

interface Run { ms: number; writer: WriterSummary; left: number; deleted: number }

interface WriterSummary { writes: number; errors: number; firstError: string | null; p50: number; p99: number; max: number }

/** `--writers N` agent processes (default 1) write during `fn`; the summary is their sum, and the worst p50/p99/max. */
async function withWriter(path: string, fn: () => Promise<void> | void): Promise<WriterSummary> {
  const writers = await Promise.all(
    Array.from({ length: WRITERS }, async () => {
      const writer = spawn(process.execPath, [WRITER, path, '2'], { stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      writer.stdout.on('data', (d) => (out += d));
      await new Promise<void>((r) => writer.stdout.once('data', () => r()));
      return { writer, summary: () => JSON.parse(out.trim().split('\n').at(-1)!) as WriterSummary };
    }),
  );
  await new Promise((r) => setTimeout(r, 200)); // the writers settle into their rhythm
  await fn();
  await new Promise((r) => setTimeout(r, 200));
  for (const { writer } of writers) {
    writer.kill('SIGTERM');
    await new Promise((r) => writer.once('exit', r));
  }
  const all = writers.map((w) => w.summary());
  return {
    writes: all.reduce((n, w) => n + w.writes, 0),
    errors: all.reduce((n, w) => n + w.errors, 0),
    firstError: all.find((w) => w.firstError)?.firstError ?? null,
    p50: Math.max(...all.map((w) => w.p50)),
    p99: Math.max(...all.map((w) => w.p99)),
    max: Math.max(...all.map((w) => w.max)),
  };
}

async function main(): Promise<void> {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const template = join(dir, 'template.db');
  let t = performance.now();
  buildStore(template, ROWS, NOW);
  console.log(`built ${ROWS.toLocaleString('en')} rows in ${((performance.now() - t) / 1000).toFixed(1)} s`);

  const countLeft = (db: string) =>
    (new Database(db, { readonly: true }).prepare(`SELECT count(*) AS n FROM memory WHERE id NOT LIKE 'agent_%'`).get() as { n: number }).n;

  // 1. The reference: the sqlite3 CLI running the seed's SQL, as the systemd timer did.
  const cliRun = async (): Promise<Run> => {
    const db = join(dir, 'cli.db');
    freshCopy(template, db);
    let ms = 0;
    const writer = await withWriter(db, () => {
      const t0 = performance.now();
      const r = spawnSync('sqlite3', ['-cmd', '.timeout 5000', db], { input: SEED_SQL, encoding: 'utf8' });
      ms = performance.now() - t0;
      if (r.status !== 0) throw new Error(`sqlite3 failed: ${r.stderr}`);
    });
    return { ms, writer, left: countLeft(db), deleted: 0 };
  };

  // 2. memory-warden's prune on an identical copy, with the default batch settings.
  const batched = { ...(BATCH > 0 ? { batchSize: BATCH } : {}), ...(FULL_WINDOWS ? { windowEndsOnCommit: false } : {}), ...(BATCH_MS > 0 ? { batchMs: BATCH_MS } : {}), ...(PAUSE_MS >= 0 ? { pauseMs: PAUSE_MS } : {}) };
  // 3. For scale: the same code in one transaction, which is what the agent must never be made to wait for.
  const oneTransaction = { batchSize: 10 * ROWS, batchMs: 3_600_000, pauseMs: 0 };
  const wardenRun = async (pruneOpts: object): Promise<Run> => {
    const db = join(dir, 'warden.db');
    freshCopy(template, db);
    const config = loadConfig({ overrides: { stateDb: join(dir, 'state.db'), stores: { bench: { db } }, prune: pruneOpts } });
    let ms = 0;
    let deleted = 0;
    const writer = await withWriter(db, async () => {
      const t0 = performance.now();
      const r = await prune({ store: 'bench', dryRun: false }, { config, log: silentLogger, now: () => Date.now(), signal: new AbortController().signal });
      ms = performance.now() - t0;
      deleted = r.deleted;
    });
    return { ms, writer, left: countLeft(db), deleted };
  };

  // Alternate the two, RUNS times each, and compare medians: one run on a shared 2-core machine is noise.
  const cli: Run[] = [];
  const mw: Run[] = [];
  const one: Run[] = [];
  for (let i = 0; i < RUNS; i++) {
    cli.push(await cliRun());
    mw.push(await wardenRun(batched));
    if (!args.includes('--no-one')) one.push(await wardenRun(oneTransaction));
  }
  const median = (runs: Run[]) => [...runs].sort((a, b) => a.ms - b.ms)[Math.floor(runs.length / 2)]!;
  const c = median(cli);
  const m = median(mw);
  const o = one.length > 0 ? median(one) : undefined;
  const worst = (runs: Run[]) => Math.max(...runs.map((r) => r.writer.max));
  const errors = (runs: Run[]) => runs.reduce((n, r) => n + r.writer.errors, 0);

  const fmt = (w: WriterSummary) => `${w.writes} writes, p50 ${w.p50} ms, p99 ${w.p99} ms, max ${w.max} ms, errors ${w.errors}${w.firstError ? ` (${w.firstError})` : ''}`;
  const writerLabel = WRITERS > 1 ? `agent writers (${WRITERS}, summed; worst p50/p99/max)` : 'agent writer';
  const secs = (runs: Run[]) => runs.map((r) => (r.ms / 1000).toFixed(2)).join(' / ');
  console.log(`\nrows ${ROWS.toLocaleString('en')}, ${BATCH ? `batch ${BATCH}, ` : ''}prune settings ${JSON.stringify(loadConfig({ overrides: { prune: batched } }).prune)}${BATCH_MS ? `, batchMs ${BATCH_MS}` : ''}${PAUSE_MS >= 0 ? `, pauseMs ${PAUSE_MS}` : ''}, writers ${WRITERS}, runs ${RUNS}, node ${process.version}, sqlite ${(new Database(':memory:').prepare('select sqlite_version() v').get() as { v: string }).v}`);
  console.log(`sqlite3 CLI (seed SQL, one DELETE each): median ${(c.ms / 1000).toFixed(2)} s (runs ${secs(cli)}); rows left ${c.left.toLocaleString('en')}`);
  console.log(`  ${writerLabel}, median run: ${fmt(c.writer)}; worst max over runs ${worst(cli)} ms, errors ${errors(cli)}`);
  console.log(`memory-warden prune (batched):            median ${(m.ms / 1000).toFixed(2)} s (runs ${secs(mw)}); rows left ${m.left.toLocaleString('en')}; deleted ${m.deleted.toLocaleString('en')}`);
  console.log(`  ${writerLabel}, median run: ${fmt(m.writer)}; worst max over runs ${worst(mw)} ms, errors ${errors(mw)}`);
  if (o) {
    console.log(`memory-warden, one transaction (no batches): median ${(o.ms / 1000).toFixed(2)} s (runs ${secs(one)})`);
    console.log(`  ${writerLabel}, median run: ${fmt(o.writer)}; worst max over runs ${worst(one)} ms, errors ${errors(one)}`);
  }
  console.log(`ratio memory-warden batched / sqlite3 CLI (medians): ${(m.ms / c.ms).toFixed(2)}x`);
  if (o) console.log(`ratio memory-warden one transaction / sqlite3 CLI (medians): ${(o.ms / c.ms).toFixed(2)}x`);
  if (c.left !== m.left) console.log(`NOTE: rows left differ (${c.left} vs ${m.left}): the seed SQL compares text, memory-warden instants`);
  if (!args.includes('--keep')) rmSync(dir, { recursive: true, force: true });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
