import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { appendFileSync, copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { initSchema } from '../src/layouts/warden/schema.js';
import { progressLine, terminalProgress } from '../src/progress/terminal.js';
import { CLI } from './helpers/cli.js';
import { tempDir } from './helpers/store.js';

/**
 * The real CLI on a pseudo-terminal: `script` (util-linux) gives the command a tty for stdin, stdout and stderr and
 * copies everything written to it to its own stdout. Inside, stdout or stderr is redirected to a file where a case
 * needs the two apart. Nothing here depends on how fast anything runs: the first line of each phase is drawn at
 * once, whatever the throttle does afterwards.
 */
const ROWS = 50_000;
const CLEAR = '\x1b[K';
const sh = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

function onTty(args: string[], redirect: string, env: Record<string, string> = {}, exits = [0, 1]): string {
  const cmd = [process.execPath, CLI, ...args].map(sh).join(' ') + ' ' + redirect;
  const r = spawnSync('script', ['-qfec', cmd, '/dev/null'], {
    encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 120_000, env: { ...process.env, LOG_LEVEL: 'info', ...env },
  });
  if (!exits.includes(r.status ?? -1)) throw new Error(`script ${args.join(' ')}: exit ${r.status}: ${r.stdout}${r.stderr}`);
  return r.stdout;
}

/** 50,000 rows, every other one expired: one INSERT … SELECT. */
function bigStore(path: string): string {
  const db = new Database(path);
  initSchema(db, path);
  db.exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${ROWS})
    INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at, expires_at)
    SELECT printf('m_%06d', i), CASE WHEN i % 10 = 0 THEN 'ada' ELSE 'user' END, 'fact number ' || i, 'message:1',
      '2026-01-01 00:00:00', '2026-01-01 00:00:00', CASE WHEN i % 2 = 0 THEN '2026-02-01 00:00:00' END FROM n`);
  db.close();
  return path;
}

/** The progress line was drawn (its first state, exactly) and taken away again at the end. */
function expectDrawnAndCleared(tty: string, first: string): void {
  expect(tty).toContain(`\r${CLEAR}${first}`);
  const label = first.split('  ')[0]!;
  expect(tty.lastIndexOf(CLEAR)).toBeGreaterThan(tty.lastIndexOf(`${CLEAR}${label}  `));
}

function expectNoProgress(text: string): void {
  expect(text).not.toContain(CLEAR);
  expect(text).not.toMatch(/\b(prune|check|erase|snapshot|verify|recover) {2}\d/);
}

describe('progress on a terminal (the real CLI under script)', { timeout: 180_000 }, () => {
  const { dir, cleanup } = tempDir('mw-progress-');
  const master = bigStore(join(dir, 'master.db'));
  let n = 0;
  /** A fresh copy of the big store with a config of its own (state db, snapshot folder). */
  const fresh = () => {
    const name = `s${++n}`;
    const db = join(dir, `${name}.db`);
    copyFileSync(master, db);
    const config = join(dir, `${name}.yaml`);
    writeFileSync(config, JSON.stringify({ stateDb: join(dir, `${name}-state.db`), snapshot: { root: join(dir, `${name}-snaps`) }, stores: { [name]: { db } } }));
    return { name, db, config, out: join(dir, `${name}.out`), err: join(dir, `${name}.err`) };
  };

  beforeAll(() => {
    if (spawnSync('script', ['--version']).status !== 0) throw new Error('these tests need script(1) from util-linux');
  });
  afterAll(cleanup);

  it('prune shows rows done of its candidates on stderr, the result stays alone on stdout', () => {
    const s = fresh();
    const tty = onTty(['run', 'prune', '--config', s.config], `> ${sh(s.out)}`);
    expectDrawnAndCleared(tty, `prune  0/25,000 rows  0%`);
    expect(readFileSync(s.out, 'utf8')).toMatch(/^s\d+: deleted 25000 row\(s\)/);
    expectNoProgress(readFileSync(s.out, 'utf8'));
  });

  it('check shows its steps; erase its rows; run snapshot its bytes; restore the bytes it verifies', () => {
    const s = fresh();
    expectDrawnAndCleared(onTty(['check', '--config', s.config], `> ${sh(s.out)}`), 'check  0/4 steps  0%');
    expect(readFileSync(s.out, 'utf8')).toContain('rows 50000, live 25000');

    expectDrawnAndCleared(onTty(['run', 'snapshot', '--config', s.config], `> ${sh(s.out)}`), 'snapshot  0 B');
    // Its line for a person (JSON only with --json, which draws no progress): `agent: snapshot NAME in DIR: rows …, N bytes, …`.
    const [, snapDir, snapBytes] = / in (\S+): rows [^,]*(?:, points [^,]*)?, (\d+) bytes/.exec(readFileSync(s.out, 'utf8'))!;
    const snap = { dir: snapDir!, bytes: Number(snapBytes) };
    expect(snap.bytes).toBeGreaterThan(0);

    expectDrawnAndCleared(onTty(['erase', '--subject', 'ada', '--config', s.config], `> ${sh(s.out)}`), 'erase  0/5,000 rows  0%');
    expect(readFileSync(s.out, 'utf8')).toContain('erased 5000 memory(ies)');

    const tty = onTty(['restore', snap.dir, '--force', '--config', s.config], `> ${sh(s.out)}`);
    expect(tty).toMatch(new RegExp(`\\r\\x1b\\[Kverify  0 B/${snap.bytes >= 1024 * 1024 ? '[\\d.]+ MB' : '[\\d.]+ KB'}  0%`));
    expect(tty.lastIndexOf(CLEAR)).toBeGreaterThan(tty.lastIndexOf(`${CLEAR}verify  `));
    expect(readFileSync(s.out, 'utf8')).toContain('restored from');
    // Nothing to upload (no Qdrant side): no "recover" line at all, not even an empty one.
    expect(tty).not.toContain(`${CLEAR}recover`);
  });

  it('--json: stdout is exactly the JSON, and nothing of the progress reaches the terminal', () => {
    for (const args of [['run', 'prune'], ['check'], ['erase', '--subject', 'ada'], ['run', 'snapshot']]) {
      const s = fresh();
      const tty = onTty([...args, '--config', s.config, '--json'], `> ${sh(s.out)}`);
      const stdout = readFileSync(s.out, 'utf8');
      expect(() => JSON.parse(stdout), args.join(' ')).not.toThrow();
      expect(stdout.endsWith('}\n')).toBe(true);
      expectNoProgress(stdout);
      expectNoProgress(tty);
    }
  });

  it('stderr to a file (not a terminal): no progress in it, only JSON log lines; none on the terminal either', () => {
    for (const args of [['run', 'prune'], ['check'], ['erase', '--subject', 'ada'], ['run', 'snapshot']]) {
      const s = fresh();
      const tty = onTty([...args, '--config', s.config], `2> ${sh(s.err)}`);
      const err = readFileSync(s.err, 'utf8');
      expectNoProgress(err);
      expectNoProgress(tty);
      const lines = err.split('\n').filter(Boolean);
      expect(lines.length, args.join(' ')).toBeGreaterThan(0);
      for (const l of lines) expect(() => JSON.parse(l), l).not.toThrow();
    }
  });

  it('at debug level, whose log lines come during the loops, there is no progress line to cut them up', () => {
    const s = fresh();
    const tty = onTty(['run', 'prune', '--config', s.config], `> ${sh(s.out)}`, { LOG_LEVEL: 'debug' });
    expectNoProgress(tty);
    expect(readFileSync(s.out, 'utf8')).toContain('deleted 25000 row(s)');
  });

  it('a failing command takes its progress line away before its error message', () => {
    const s = fresh();
    onTty(['run', 'snapshot', '--config', s.config, '--json'], `> ${sh(s.out)}`);
    const snap = JSON.parse(readFileSync(s.out, 'utf8')) as { dir: string };
    appendFileSync(join(snap.dir, 'store.db'), 'damage'); // the checksum fails after the verify line is drawn
    const tty = onTty(['restore', snap.dir, '--force', '--config', s.config], `> ${sh(s.out)}`, {}, [2]);
    expect(tty).toContain(`${CLEAR}verify  0 B/`);
    expect(tty).toContain(`\r${CLEAR}memory-warden: ${snap.dir}: store.db does not match its checksum`);
  });
});

describe('the terminal reporter', () => {
  const sink = () => {
    const writes: string[] = [];
    return { writes, out: { write: (s: string) => writes.push(s) } as unknown as NodeJS.WritableStream };
  };

  it('draws the start at once, then at most one redraw per 100 ms of its clock, and clears at the end', () => {
    let t = 0;
    const { writes, out } = sink();
    const p = terminalProgress(out, { now: () => t });
    p.start('prune', 1000, 'rows');
    expect(writes).toEqual([`\r${CLEAR}prune  0/1,000 rows  0%\r`]);
    for (let i = 1; i <= 50; i++) {
      t += 1;
      p.tick(10);
    }
    expect(writes).toHaveLength(1); // 50 ticks within 50 ms: no redraw
    t = 1000;
    p.set(600);
    expect(writes.at(-1)).toBe(`\r${CLEAR}prune  600/1,000 rows  60%  600 rows/s  ~1s left\r`);
    p.done();
    expect(writes.at(-1)).toBe(`\r${CLEAR}`);
    p.done(); // twice: nothing more
    p.tick(5); // after the end: nothing
    expect(writes.filter((w) => w === `\r${CLEAR}`)).toHaveLength(1);
    expect(writes).toHaveLength(3);
  });

  it('a new phase ends the one before; a phase with nothing to do shows nothing', () => {
    const { writes, out } = sink();
    const p = terminalProgress(out, { now: () => 0 });
    p.start('verify', 2048, 'bytes');
    p.start('recover', 0, 'bytes');
    p.done();
    expect(writes).toEqual([`\r${CLEAR}verify  0 B/2.0 KB  0%\r`, `\r${CLEAR}`]);
  });

  it('the line: unknown totals, bytes, rates and times left in readable units', () => {
    expect(progressLine({ label: 'snapshot', total: undefined, unit: 'bytes', done: 3 * 1024 * 1024 }, 2000)).toBe('snapshot  3.0 MB  1.5 MB/s');
    expect(progressLine({ label: 'check', total: 7, unit: 'steps', done: 0 }, 0)).toBe('check  0/7 steps  0%');
    expect(progressLine({ label: 'erase', total: 100_000, unit: 'rows', done: 1000 }, 1000)).toBe('erase  1,000/100,000 rows  1%  1,000 rows/s  ~1m39s left');
    expect(progressLine({ label: 'prune', total: 10, unit: 'rows', done: 10 }, 1000)).toBe('prune  10/10 rows  100%  10 rows/s');
  });
});
