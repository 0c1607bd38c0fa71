/**
 * `npm run demo`: the main jobs on a bundled demo store, no services needed. Builds demo-out/memory.db with
 * stale, expired, superseded, dangling and tool-sourced facts, then runs the real CLI on it and shows what changed.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildDemoStore } from './demo-store.js';

const root = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const out = join(root, 'demo-out');
const cli = join(root, 'dist/src/cli.js');
const db = join(out, 'memory.db');
const env = { ...process.env, MEMORY_WARDEN_STATE: join(out, 'state.db'), LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn' };

function step(title: string, args: string[]): number {
  process.stdout.write(`\n\x1b[1m== ${title}\x1b[0m\n$ memory-warden ${args.map((a) => (a.startsWith(root) ? relative(process.cwd(), a) || '.' : a)).join(' ')}\n`);
  const r = spawnSync(process.execPath, [cli, ...args], { stdio: 'inherit', env });
  return r.status ?? 1;
}

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
buildDemoStore(db);
process.stdout.write(`Built a demo store at ${relative(process.cwd(), db)}: 14 facts, some stale, expired, superseded, one broken supersede chain, one from a fetched web page.\n`);

step('init: the schema is there, WAL is on (idempotent)', ['init', '--db', db]);
step('check: what is wrong with this store (exit 1: problems found)', ['check', '--db', db]);
step('prune, dry run: what would go', ['run', 'prune', '--db', db, '--dry-run']);
step('prune: expired rows and long-superseded ones, with their cascade, in short transactions', ['run', 'prune', '--db', db]);
step('repair dangling: a row whose correction was deleted with foreign keys off (never reset to NULL)', ['repair', 'dangling', '--db', db]);
step('repair timestamps: one fact was written with an ISO-8601 offset timestamp', ['repair', 'timestamps', '--db', db]);
const code = step('check again', ['check', '--db', db]);
step('digest preview: what the daily email says (text here, HTML in demo-out/digest.html)', ['digest', '--preview', '--db', db, '--out', join(out, 'digest.html')]);
process.stdout.write(`\nDone (the second check exits ${code}: the row without a source is for a person to trace or delete). The store is ${relative(process.cwd(), db)}; run the CLI on it yourself: npx memory-warden check --db ${relative(process.cwd(), db)} (npx memory-warden --help for the rest)\n`);
