/**
 * `npm run bench:prune`: prune of a 1,000,000-row store (25% expired, 10% long superseded, dangling chains) by
 * the sqlite3 CLI running the seed's SQL, and by memory-warden's batched prune, each with an agent-like writer in
 * a second process writing every 2 ms. Prints both times, their ratio, and the writer's latency and errors.
 *
 *   npm run bench:prune [-- --rows 1000000 --batch 2000]
 */
import Database from 'better-sqlite3';
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { initSchema } from '../src/store/schema.js';
import { prune } from '../jobs/prune.js';
import { loadConfig } from '../src/config.js';
import { silentLogger } from '../src/logger.js';
import { toCanonical } from '../src/time.js';

const args = process.argv.slice(2);
const opt = (name: string, fallback: number) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const ROWS = opt('rows', 1_000_000);
const BATCH = opt('batch', 2000);
const root = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const dir = join(root, 'bench-out');
const WRITER = join(root, 'dist/bench/agent-writer.js');
const DAY = 86_400_000;
const NOW = Date.now();

const SEED_SQL = `PRAGMA foreign_keys = ON;
DELETE FROM memory WHERE expires_at IS NOT NULL AND expires_at <= datetime('now');
DELETE FROM memory WHERE superseded_by IS NOT NULL AND created_at < datetime('now', '-180 days');`;

function build(path: string): void {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  initSchema(db, path);
  db.pragma('foreign_keys = OFF');
  const insert = db.prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at, expires_at, superseded_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`);
  let seed = 7;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  db.transaction(() => {
    for (let i = 0; i < ROWS; i++) {
      const r = rand();
      const created = toCanonical(NOW - Math.floor(rand() * 400) * DAY);
      let expires: string | null = null;
      let superseded: string | null = null;
      let createdAt = created;
      if (r < 0.25) expires = toCanonical(NOW - Math.floor(rand() * 30 + 1) * DAY);
      else if (r < 0.35) {
        createdAt = toCanonical(NOW - Math.floor(200 + rand() * 200) * DAY);
        superseded = `m${Math.floor(rand() * ROWS)}`;
      } else if (r < 0.36) superseded = `gone${i}`; // dangling chain
      else if (r < 0.40) expires = toCanonical(NOW + Math.floor(rand() * 30 + 1) * DAY);
      insert.run(`m${i}`, 'user', `fact number ${i}: the agent learned something worth keeping for a while`, 'message:bench', createdAt, createdAt, expires, superseded);
    }
  })();
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.close();
}

interface WriterSummary { writes: number; errors: number; firstError: string | null; p50: number; p99: number; max: number }

async function withWriter(path: string, fn: () => Promise<void> | void): Promise<WriterSummary> {
  const writer = spawn(process.execPath, [WRITER, path, '2'], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  writer.stdout.on('data', (d) => (out += d));
  await new Promise<void>((r) => writer.stdout.once('data', () => r()));
  await new Promise((r) => setTimeout(r, 200)); // the writer settles into its rhythm
  await fn();
  await new Promise((r) => setTimeout(r, 200));
  writer.kill('SIGTERM');
  await new Promise((r) => writer.once('exit', r));
  return JSON.parse(out.trim().split('\n').at(-1)!) as WriterSummary;
}

async function main(): Promise<void> {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const template = join(dir, 'template.db');
  let t = performance.now();
  build(template);
  console.log(`built ${ROWS.toLocaleString('en')} rows in ${((performance.now() - t) / 1000).toFixed(1)} s`);

  // 1. The reference: the sqlite3 CLI running the seed's SQL, as the systemd timer did.
  const cliDb = join(dir, 'cli.db');
  copyFileSync(template, cliDb);
  let cliMs = 0;
  let cliCount = 0;
  const cliWriter = await withWriter(cliDb, () => {
    t = performance.now();
    const r = spawnSync('sqlite3', ['-cmd', '.timeout 5000', cliDb], { input: SEED_SQL, encoding: 'utf8' });
    cliMs = performance.now() - t;
    if (r.status !== 0) throw new Error(`sqlite3 failed: ${r.stderr}`);
  });
  cliCount = (new Database(cliDb, { readonly: true }).prepare(`SELECT count(*) AS n FROM memory WHERE id NOT LIKE 'agent_%'`).get() as { n: number }).n;

  // 2. memory-warden's prune on an identical copy.
  const mwDb = join(dir, 'warden.db');
  copyFileSync(template, mwDb);
  const config = loadConfig({ overrides: { stateDb: join(dir, 'state.db'), stores: { bench: { db: mwDb } }, prune: { batchSize: BATCH } } });
  let mwMs = 0;
  let deleted = 0;
  const mwWriter = await withWriter(mwDb, async () => {
    t = performance.now();
    const r = await prune({ store: 'bench', dryRun: false }, { config, log: silentLogger, now: () => Date.now(), signal: new AbortController().signal });
    mwMs = performance.now() - t;
    deleted = r.deleted;
  });
  const mwCount = (new Database(mwDb, { readonly: true }).prepare(`SELECT count(*) AS n FROM memory WHERE id NOT LIKE 'agent_%'`).get() as { n: number }).n;

  const fmt = (w: WriterSummary) => `${w.writes} writes, p50 ${w.p50} ms, p99 ${w.p99} ms, max ${w.max} ms, errors ${w.errors}${w.firstError ? ` (${w.firstError})` : ''}`;
  console.log(`\nrows ${ROWS.toLocaleString('en')}, batch ${BATCH}, node ${process.version}, sqlite ${(new Database(':memory:').prepare('select sqlite_version() v').get() as { v: string }).v}`);
  console.log(`sqlite3 CLI (seed SQL, one DELETE each): ${(cliMs / 1000).toFixed(2)} s; rows left ${cliCount.toLocaleString('en')}`);
  console.log(`  agent writer meanwhile: ${fmt(cliWriter)}`);
  console.log(`memory-warden prune (batched):            ${(mwMs / 1000).toFixed(2)} s; rows left ${mwCount.toLocaleString('en')}; deleted ${deleted.toLocaleString('en')}`);
  console.log(`  agent writer meanwhile: ${fmt(mwWriter)}`);
  console.log(`ratio memory-warden / sqlite3 CLI: ${(mwMs / cliMs).toFixed(2)}x`);
  if (cliCount !== mwCount) console.log(`NOTE: rows left differ (${cliCount} vs ${mwCount}): the seed SQL compares text, memory-warden instants`);
  if (!args.includes('--keep')) rmSync(dir, { recursive: true, force: true });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
