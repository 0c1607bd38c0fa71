/**
 * `npm run bench`: every operation as a user runs it — the whole `memory-warden …` process — side by side with
 * its baseline in the same run, at the same fixed `--now`, on a fresh copy of a generated store for every run
 * (the copy not timed). A and B alternate (A first on even runs, B first on odd), each wrapped in
 * `/usr/bin/time -v` for its peak RSS. Prints, per operation, each side's median time and peak RSS, and the
 * median and min–max of the paired ratios A/B.
 *
 *   npm run bench [-- --rows 1000000[,3000000] --runs 3 --only prune,check,digest,digest-model,digest-db,digest-cold,erase,erase-many,snapshot,agent,agent-fsync,start,start-check,start-check-config --split-agent --out DIR --templates DIR]
 *
 * `agent`, `agent-fsync`: the prune beside an agent inserting every 5 ms (with `synchronous = NORMAL`, the WAL
 * default, or FULL: an fsync per commit), against the CLI beside the same agent; each pair also runs the agent alone
 * on a fresh copy for as long as that pair's prune took, so that the row shows its worst write with no prune running.
 *
 * `--split-agent`: the agent plays SQLite's busy handler itself (bench/agent-writer.ts) and the agent row also shows
 * its own commits apart from its waits for the lock: p99 and max of the try that got in, and how many took over 5 ms.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildStore, freshCopy } from './store.js';

const args = process.argv.slice(2);
if (args.includes('--help') || args.includes('-h')) {
  console.log('npm run bench [-- --rows 1000000[,3000000] --runs 3 --only prune,agent,agent-fsync,check,digest,digest-model,digest-db,digest-cold,erase,erase-many,snapshot,start,start-check,start-check-config --split-agent --keep --out DIR --templates DIR]');
  process.exit(0);
}
const arg = (name: string): string | undefined => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
};
const SIZES = (arg('rows') ?? '1000000').split(',').map(Number);
const RUNS = Number(arg('runs') ?? 3);
const ONLY = arg('only')?.split(',');
const SPLIT_AGENT = args.includes('--split-agent');
/**
 * `--templates DIR`: the generated stores are kept there and used again by the next run with the same --rows
 * (a 10M-row store takes minutes to generate). Generation is deterministic: the same rows, the same bytes.
 */
const TEMPLATES = arg('templates');
const root = resolve(fileURLToPath(new URL('../..', import.meta.url)));
/** Where the generated stores and copies go (`--out DIR`; bench-out/ in the checkout by default): emptied first. */
const dir = resolve(arg('out') ?? join(root, 'bench-out'));
const CLI = join(root, 'dist/src/cli.js');
const WRITER = join(root, 'dist/bench/agent-writer.js');
/** The fixed instant both sides run at: the store is generated around it. */
const NOW_ISO = '2026-12-01T00:00:00Z';
const NOW_SQL = '2026-12-01 00:00:00';
/** That night's integrity run, hours before the digest. */
const NIGHT_ISO = '2026-11-30T18:00:00Z';

/** The brief's prune, as the systemd timer ran it, at the same instant memory-warden is given. */
const PRUNE_SQL = `PRAGMA foreign_keys = ON;
DELETE FROM memory WHERE expires_at IS NOT NULL AND expires_at <= datetime('${NOW_SQL}');
DELETE FROM memory WHERE superseded_by IS NOT NULL AND created_at < datetime('${NOW_SQL}', '-180 days');`;
const CHECK_SQL = `PRAGMA integrity_check; PRAGMA foreign_key_check;`;
const eraseSql = (where: string) => `PRAGMA foreign_keys = ON; PRAGMA secure_delete = ON;
DELETE FROM memory WHERE ${where};
VACUUM;
PRAGMA wal_checkpoint(TRUNCATE);`;
const ERASE_SQL = eraseSql(`subject = 'user7'`);
/** `erase --subject user1`: the subjects user1, user10 … user19, 11% of the store with their cascade. */
const ERASE_MANY_SQL = eraseSql(`instr(lower(subject), 'user1') > 0 OR instr(lower(fact), 'user1') > 0`);

interface Cmd {
  argv: string[];
  input?: string;
  /** Added to the environment. */
  env?: Record<string, string>;
  /** Exit codes that mean it ran (check exits 1 when it finds problems, which the generated store has). */
  ok?: number[];
}
/** `writtenMb`: what the process wrote to the disk (rusage's block outputs, /usr/bin/time's "File system outputs"). */
interface Measure { ms: number; rssKb: number; writtenMb?: number; writer?: WriterSummary }
interface WriterSummary { writes: number; errors: number; p99: number; max: number; ownP99?: number; ownMax?: number; ownOver5?: number }
interface Case {
  name: string;
  target: string;
  /** Each side is built from the path of the fresh copy it runs on. */
  a: (db: string) => Cmd;
  b: (db: string) => Cmd;
  /** The store both run on: the generated one, or a 10-row one for start-up. */
  small?: boolean;
  /** The generated store with the day's new rows written as a model writes them (bench/store.ts modelText). */
  model?: boolean;
  /** An agent inserting every 5 ms during both runs, committing with synchronous NORMAL or FULL. */
  agent?: 'normal' | 'full';
  /** Run (untimed) on side A's fresh copy before it is timed. */
  prepare?: (db: string) => Cmd;
}

const warden = (...rest: string[]): string[] => [process.execPath, CLI, ...rest];
const sqlite = (db: string, sql: string): Cmd => ({ argv: ['sqlite3', '-cmd', '.timeout 5000', db], input: sql });

function cases(config: string): Case[] {
  const mw = (db: string, ...rest: string[]): Cmd => ({ argv: warden(...rest, '--config', config, '--db', db), ok: [0, 1] });
  const bare = (db: string, ...rest: string[]): Cmd => ({ argv: warden(...rest, '--db', db), env: { MEMORY_WARDEN_CONFIG: '', MEMORY_WARDEN_STATE: join(dir, 'state.db') }, ok: [0, 1] });
  const freshState = (): Cmd => ({ argv: ['sh', '-c', 'rm -f "$0" "$0-wal" "$0-shm"', join(dir, 'state.db')] });
  const all: Case[] = [
    { name: 'prune', target: '≤1.3x', a: (db) => mw(db, 'run', 'prune', '--now', NOW_ISO, '--json'), b: (db) => sqlite(db, PRUNE_SQL) },
    { name: 'agent', target: '≤1.3x; agent max ≤ its max alone', agent: 'normal', a: (db) => mw(db, 'run', 'prune', '--now', NOW_ISO, '--json'), b: (db) => sqlite(db, PRUNE_SQL) },
    { name: 'agent-fsync', target: '≤1.3x; agent max ≤ its max alone', agent: 'full', a: (db) => mw(db, 'run', 'prune', '--now', NOW_ISO, '--json'), b: (db) => sqlite(db, PRUNE_SQL) },
    { name: 'check', target: '≤1.3x', a: (db) => mw(db, 'check', '--json', '--now', NOW_ISO), b: (db) => sqlite(db, CHECK_SQL) },
    // As deployed: the daily integrity job ran a few hours before (its report is what the digest shows).
    { name: 'digest', target: '≤0.5x check', prepare: (db) => mw(db, 'run', 'integrity', '--now', NOW_ISO, '--json'), a: (db) => mw(db, 'digest', '--preview', '--now', NOW_ISO), b: (db) => mw(db, 'check', '--json', '--now', NOW_ISO) },
    // As measured from outside: the integrity job ran that night, hours before the digest, and the day's ~51,000 new
    // rows read as a model writes them (dashes, curly quotes, tools' output, some instructions and credentials).
    { name: 'digest-model', target: '≤0.5x check', model: true, prepare: (db) => mw(db, 'run', 'integrity', '--now', NIGHT_ISO, '--json'), a: (db) => mw(db, 'digest', '--preview', '--now', NOW_ISO), b: (db) => mw(db, 'check', '--json', '--now', NOW_ISO) },
    // The same, as a person runs it with `--db` alone: no config file (the state db named by the environment), so no
    // YAML or schemas on either side; a digest that loaded what check --db does not paid for it only here.
    { name: 'digest-db', target: '≤0.5x check', model: true, prepare: (db) => bare(db, 'run', 'integrity', '--now', NIGHT_ISO, '--json'), a: (db) => bare(db, 'digest', '--preview', '--now', NOW_ISO), b: (db) => bare(db, 'check', '--json', '--now', NOW_ISO) },
    // No integrity run on record (the first day, or the job failing): the digest checks the store itself.
    { name: 'digest-cold', target: '(≤0.5x check)', a: (db) => mw(db, 'digest', '--preview', '--now', NOW_ISO), b: (db) => mw(db, 'check', '--json', '--now', NOW_ISO) },
    // A person's first erase, as a user runs it: the state db of the runs before (which records the ids erased for
    // that selector, searched for again by a second erase of it) is removed first (untimed).
    { name: 'erase', target: '≤1.2x, RSS flat', prepare: freshState, a: (db) => mw(db, 'erase', '--user', 'user7', '--now', NOW_ISO, '--json'), b: (db) => sqlite(db, ERASE_SQL) },
    { name: 'erase-many', target: '(RSS ≤1.2x erase)', prepare: freshState, a: (db) => mw(db, 'erase', '--subject', 'user1', '--now', NOW_ISO, '--json'), b: (db) => sqlite(db, ERASE_MANY_SQL) },
    // A local snapshot folder (run snapshot: the copy, its check, the manifest) against SQLite's own online backup
    // of the same file, synced; the folder of the run before is removed first (untimed).
    { name: 'snapshot', target: '(≤10x its 1M figure at 10M)', prepare: () => ({ argv: ['rm', '-rf', join(dir, 'snapshots')] }), a: (db) => mw(db, 'run', 'snapshot', '--now', NOW_ISO, '--json'), b: (db) => ({ argv: ['sh', '-c', 'sqlite3 "$0" ".backup $1" && sync', db, join(dir, 'backup.db')] }) },
    { name: 'start', target: '≤2.5x', small: true, a: () => ({ argv: warden('--help') }), b: () => ({ argv: [process.execPath, '-e', '0'] }) },
    // `check --db small.db --json` as the issue and BENCHMARKS.md name it: no config file (the state db by the
    // environment, as a config-less user would set it); then the same with the bench's config file (YAML + zod).
    { name: 'start-check', target: '≤2.5x', small: true, a: (db) => ({ argv: warden('check', '--db', db, '--json'), env: { MEMORY_WARDEN_CONFIG: '', MEMORY_WARDEN_STATE: join(dir, 'state.db') }, ok: [0, 1] }), b: () => ({ argv: [process.execPath, '-e', '0'] }) },
    { name: 'start-check-config', target: '(≤2.5x)', small: true, a: (db) => mw(db, 'check', '--json'), b: () => ({ argv: [process.execPath, '-e', '0'] }) },
  ];
  return all.filter((c) => !ONLY || ONLY.includes(c.name));
}

/** Runs `cmd` under /usr/bin/time -v: wall time as the parent sees it, and the child's peak RSS. */
function measure(cmd: Cmd): Promise<Measure> {
  return new Promise((resolveRun, reject) => {
    const t0 = performance.now();
    const child = spawn('/usr/bin/time', ['-v', ...cmd.argv], { stdio: ['pipe', 'ignore', 'pipe'], env: { ...process.env, ...cmd.env } });
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    child.stdin.end(cmd.input ?? '');
    child.on('error', reject);
    child.on('exit', (code) => {
      const ms = performance.now() - t0;
      if (!(cmd.ok ?? [0]).includes(code ?? -1)) return reject(new Error(`${cmd.argv.join(' ')} exited ${code}: ${err.slice(-2000)}`));
      const rss = /Maximum resident set size \(kbytes\): (\d+)/.exec(err);
      const out = /File system outputs: (\d+)/.exec(err);
      resolveRun({ ms, rssKb: rss ? Number(rss[1]) : 0, writtenMb: out ? (Number(out[1]) * 512) / 1e6 : 0 });
    });
  });
}

/** An agent-like writer on `db` (an INSERT every 5 ms, 5 s busy timeout) for the duration of `fn`. */
async function withAgent(db: string, sync: 'normal' | 'full', fn: () => Promise<Measure>): Promise<Measure> {
  const modes = [...(SPLIT_AGENT ? ['split'] : []), ...(sync === 'full' ? ['full'] : [])];
  const writer = spawn(process.execPath, [WRITER, db, '5', ...modes], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  writer.stdout.on('data', (d) => (out += d));
  await new Promise<void>((r) => writer.stdout.once('data', () => r()));
  const m = await fn();
  writer.kill('SIGTERM');
  await new Promise((r) => writer.once('exit', r));
  return { ...m, writer: JSON.parse(out.trim().split('\n').at(-1)!) as WriterSummary };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

async function runCase(c: Case, template: string, small: string, model: () => string): Promise<string> {
  const copy = join(dir, `${c.name}.db`);
  const source = c.small ? small : c.model ? model() : template;
  const one = async (side: 'a' | 'b'): Promise<Measure> => {
    freshCopy(source, copy);
    if (side === 'a' && c.prepare) await measure(c.prepare(copy));
    const cmd = c[side](copy);
    return c.agent ? withAgent(copy, c.agent, () => measure(cmd)) : measure(cmd);
  };
  // The same agent on a fresh copy with nothing else running, for as long as side A took: its own worst write.
  const alone = async (ms: number): Promise<Measure> => {
    freshCopy(template, copy);
    return withAgent(copy, c.agent!, () => measure({ argv: ['sleep', (ms / 1000).toFixed(2)] }));
  };
  const as: Measure[] = [];
  const bs: Measure[] = [];
  const solo: Measure[] = [];
  for (let i = 0; i < RUNS; i++) {
    if (i % 2 === 0) {
      as.push(await one('a'));
      if (c.agent) solo.push(await alone(as.at(-1)!.ms));
      bs.push(await one('b'));
    } else {
      bs.push(await one('b'));
      if (c.agent) solo.push(await alone(as.at(-1)!.ms));
      as.push(await one('a'));
    }
  }
  const ratios = as.map((a, i) => a.ms / bs[i]!.ms);
  const secs = (ms: Measure[]) =>
    `${(median(ms.map((m) => m.ms)) / 1000).toFixed(2)} s, ${Math.round(Math.max(...ms.map((m) => m.rssKb)) / 1024)} MB` +
    (c.agent || c.name === 'prune' ? ` (wrote ${Math.round(median(ms.map((m) => m.writtenMb ?? 0)))} MB)` : '');
  // The agent's own commits (--split-agent): the worst, the median p99, and over 5 ms per run (median).
  const own = (ms: Measure[]) =>
    SPLIT_AGENT ? ` (own commits max ${Math.max(...ms.map((m) => m.writer!.ownMax!)).toFixed(0)} / p99 ${median(ms.map((m) => m.writer!.ownP99!)).toFixed(0)} ms, ${median(ms.map((m) => m.writer!.ownOver5!))} over 5 ms)` : '';
  const agent = (ms: Measure[]) =>
    c.agent ? `; agent max ${Math.max(...ms.map((m) => m.writer!.max)).toFixed(0)} / p99 ${median(ms.map((m) => m.writer!.p99)).toFixed(0)} ms, errors ${ms.reduce((n, m) => n + m.writer!.errors, 0)}${own(ms)}` : '';
  // Per pair: the agent's worst write beside the prune over its worst write alone.
  const worst = (ms: Measure[]) => ms.map((m) => m.writer!.max.toFixed(0)).join(', ');
  const aloneCol = c.agent
    ? `; agent alone max ${Math.max(...solo.map((m) => m.writer!.max)).toFixed(0)} / p99 ${median(solo.map((m) => m.writer!.p99)).toFixed(0)} ms${own(solo)}; worst write per pair, beside prune: ${worst(as)}; alone: ${worst(solo)}`
    : '';
  return `| ${c.name} | ${secs(as)}${agent(as)}${aloneCol} | ${secs(bs)}${agent(bs)} | ${median(ratios).toFixed(2)}x (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)}) | ${c.target} |`;
}

async function main(): Promise<void> {
  for (const bin of [CLI, WRITER, '/usr/bin/time']) if (!existsSync(bin)) throw new Error(`bench: ${bin} is missing (npm run build; apt-get install time)`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const config = join(dir, 'bench.yaml');
  writeFileSync(config, `stateDb: ${join(dir, 'state.db')}\nlog:\n  level: warn\nsnapshot:\n  root: ${join(dir, 'snapshots')}\n`);
  const small = join(dir, 'small.db');
  buildStore(small, 10, Date.parse(NOW_ISO));
  for (const rows of SIZES) {
    const template = join(TEMPLATES ? resolve(TEMPLATES) : dir, `template-${rows}.db`);
    const t = performance.now();
    if (!TEMPLATES || !existsSync(template)) buildStore(template, rows, Date.parse(NOW_ISO));
    console.log(`\n${rows.toLocaleString('en')} rows (built in ${((performance.now() - t) / 1000).toFixed(1)} s), ${RUNS} runs each, node ${process.version}, --now ${NOW_ISO}`);
    console.log('| operation | memory-warden (median, peak RSS) | baseline (median, peak RSS) | ratio: median (min–max) | target |');
    console.log('|---|---|---|---|---|');
    // The model-text store is built only when a case runs on it.
    const modelTemplate = join(dir, `template-${rows}-model.db`);
    const model = () => {
      if (!existsSync(modelTemplate)) buildStore(modelTemplate, rows, Date.parse(NOW_ISO), { modelText: true });
      return modelTemplate;
    };
    for (const c of cases(config)) console.log(await runCase(c, template, small, model));
    if (!TEMPLATES) rmSync(template, { force: true });
    rmSync(modelTemplate, { force: true });
  }
  console.log('\nbaselines: prune, agent: sqlite3 CLI running the brief\'s SQL at --now; check: PRAGMA integrity_check + foreign_key_check;');
  console.log('digest: memory-warden check on the same store; erase: DELETE + secure_delete + VACUUM + checkpoint; start: node -e 0');
  if (!args.includes('--keep')) rmSync(dir, { recursive: true, force: true });
}

main().catch((err) => {
  console.error(`bench: ${(err as Error).message}`);
  process.exit(1);
});
