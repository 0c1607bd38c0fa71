/** Retention in the order snapshots were taken, whatever the clock says, and deletes that kill -9 cannot leave half done. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { CLI, cli } from '../helpers/cli.js';
import { insertRows, makeStore, tempDir } from '../helpers/store.js';

/**
 * Retention by the order snapshots were taken in, not by their clock-made names: a clock stepped back or forward
 * (NTP, a VM restored, a skewed host) never makes the newest snapshot the one deleted, locally or on a target. And
 * a snapshot being deleted is never left looking like one. The CLI as a real process, `--now` as the stepped clock.
 */

const DAY = 86_400_000;
const T0 = Date.parse('2026-11-20T06:00:00Z');
/** Days from T0 at which each snapshot is taken: on, stepped back three days, on, forward, back again. */
const CLOCK = [0, 1, 2, -3, -3 + 1 / 24, 5, -1, -1 + 2 / 24, 9];

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = tempDir('mw-retention-')));
afterEach(() => cleanup());

const env = () => ({ MEMORY_WARDEN_STATE: join(dir, 'state.db') });

function setup(keep: number, extra: Record<string, unknown> = {}) {
  const db = makeStore(join(dir, 'm.db'));
  const config = join(dir, 'c.yaml');
  writeFileSync(config, JSON.stringify({ snapshot: { root: join(dir, 'backups'), keep, ...extra }, stores: { m: { db } } }) + '\n');
  return { db, config };
}

function addRow(db: string, id: string): void {
  const h = new Database(db);
  insertRows(h, [{ id }]);
  h.close();
}

const snapshotAt = (config: string, t: number) => cli(['run', 'snapshot', '--config', config, '--now', new Date(t).toISOString(), '--json'], env());

/** The store's snapshots as `snapshots list` gives them: oldest first, each with its row count. */
function listed(config: string): { name: string; rows: number | null; problem: string | null; reason: string | null }[] {
  const r = cli(['snapshots', 'list', '--config', config, '--json'], env());
  return r.json().snapshots;
}

describe.each([1, 2, 3])('keep %i', (keep) => {
  it('clock stepped back and forward: the newest snapshots stay, the one just taken always, oldest first by when taken', () => {
    const { db, config } = setup(keep);
    for (const [i, day] of CLOCK.entries()) {
      addRow(db, `r${i}`);
      const r = snapshotAt(config, T0 + day * DAY);
      expect(r.code, r.stderr).toBe(0);
      const out = r.json();
      expect(existsSync(out.dir), `snapshot ${i} at day ${day}: its dir`).toBe(true);
      expect(out.pruned).not.toContain(out.name);
      // Snapshot i holds i+1 rows: the kept ones are the last `keep` taken, in the order taken.
      const want = Array.from({ length: Math.min(keep, i + 1) }, (_, k) => i + 2 - Math.min(keep, i + 1) + k);
      expect(listed(config).map((s) => s.rows), `after snapshot ${i} at day ${day}`).toEqual(want);
    }
  });

  it('a target keeps its newest by the same order, and never deletes what it just received', () => {
    const off = join(dir, 'off');
    mkdirSync(off); // a target's folder is made by a person (a mount), never by memory-warden
    const { db, config } = setup(3, { targets: [{ name: 'disk', type: 'local', path: off, keep }] });
    for (const [i, day] of CLOCK.entries()) {
      addRow(db, `r${i}`);
      const r = snapshotAt(config, T0 + day * DAY);
      expect(r.code, r.stderr).toBe(0);
      const out = r.json();
      expect(out.targets[0].pruned).not.toContain(out.name);
      const names = readdirSync(join(off, 'm')).filter((n) => !n.startsWith('.'));
      expect(names, `after snapshot ${i} at day ${day}`).toContain(out.name);
      const rows = names.map((n) => readManifestRows(join(off, 'm', n))).sort((a, b) => a - b);
      const want = Array.from({ length: Math.min(keep, i + 1) }, (_, k) => i + 2 - Math.min(keep, i + 1) + k);
      expect(rows, `after snapshot ${i} at day ${day}`).toEqual(want);
    }
  });
});

function readManifestRows(folder: string): number {
  return (JSON.parse(readFileSync(join(folder, 'manifest.json'), 'utf8')) as { sqlite: { rows: number } }).sqlite.rows;
}

describe('retention under kill -9', () => {
  it('killed while deleting the oldest snapshot (a real process, SIGKILL mid-delete): no half snapshot is left, the next run finishes', () => {
    const { db, config } = setup(1);
    addRow(db, 'r0');
    const a = snapshotAt(config, T0).json();
    addRow(db, 'r1');
    const hook = fileURLToPath(new URL('../helpers/kill-in-rm.cjs', import.meta.url));
    const killed = spawnSync(process.execPath, ['--require', hook, CLI, 'run', 'snapshot', '--config', config, '--now', new Date(T0 + DAY).toISOString(), '--json'], {
      encoding: 'utf8', env: { ...process.env, LOG_LEVEL: 'silent', ...env(), MW_KILL_IN_RM: a.name },
    });
    expect(killed.signal).toBe('SIGKILL');
    // Every folder named like a snapshot is a whole one: the new one, and the old one unless its deletion began.
    const list = cli(['snapshots', 'list', '--config', config, '--verify', '--json'], env()).json().snapshots as { rows: number; problem: string | null; verified: string | null }[];
    expect(list.filter((s) => s.problem !== null || s.verified !== 'ok')).toEqual([]);
    expect(list.map((s) => s.rows)).toContain(2);
    addRow(db, 'r2');
    const next = snapshotAt(config, T0 + 2 * DAY).json();
    expect(listed(config).map((s) => s.rows)).toEqual([3]);
    expect(readdirSync(join(dir, 'backups', 'm')).filter((n) => n.startsWith('.partial-'))).toEqual([]);
    expect(existsSync(a.dir)).toBe(false);
    expect(next.pruned.length + next.removedPartials.length).toBeGreaterThan(0);
  });

  it('erase --snapshots killed mid-delete: no half snapshot is left, and the next erase removes what the first began', () => {
    const { db, config } = setup(3);
    const h = new Database(db);
    insertRows(h, [{ id: 'e1', subject: 'eve', fact: 'Eve Park lives at 9 Birch Lane' }]);
    h.close();
    const a = snapshotAt(config, T0).json();
    const hook = fileURLToPath(new URL('../helpers/kill-in-rm.cjs', import.meta.url));
    const killed = spawnSync(process.execPath, ['--require', hook, CLI, 'erase', '--config', config, '--store', 'm', '--subject', 'Eve Park', '--snapshots', '--json'], {
      encoding: 'utf8', env: { ...process.env, LOG_LEVEL: 'silent', ...env(), MW_KILL_IN_RM: a.name },
    });
    expect(killed.signal).toBe('SIGKILL');
    const list = cli(['snapshots', 'list', '--config', config, '--verify', '--json'], env()).json().snapshots as { problem: string | null; verified: string | null }[];
    expect(list.filter((s) => s.problem !== null || s.verified !== 'ok')).toEqual([]);
    const again = cli(['erase', '--config', config, '--store', 'm', '--subject', 'Eve Park', '--snapshots', '--json'], env());
    expect(again.code, again.stderr).toBe(0);
    // No snapshot left, and no byte of the text in what the killed delete left (a leftover the next snapshot removes).
    expect(readdirSync(join(dir, 'backups', 'm')).filter((n) => !n.startsWith('.'))).toEqual([]);
    expect(spawnSync('grep', ['-rl', 'Eve Park', join(dir, 'backups')], { encoding: 'utf8' }).stdout).toBe('');
    snapshotAt(config, T0 + DAY);
    expect(readdirSync(join(dir, 'backups', 'm')).filter((n) => n.startsWith('.partial-'))).toEqual([]);
  });

  it('a snapshot whose deletion was cut short is a .partial- leftover: not listed, removed by the next run', () => {
    const { db, config } = setup(3);
    addRow(db, 'r0');
    const a = snapshotAt(config, T0).json();
    addRow(db, 'r1');
    snapshotAt(config, T0 + DAY);
    // What retire() leaves when killed after its rename: a folder named .partial-…-retired, half of it removed.
    const gone = join(dir, 'backups', 'm', `.partial-${a.name}-retired`);
    renameSync(a.dir, gone);
    rmSync(join(gone, 'manifest.json'));
    expect(listed(config).map((s) => s.rows)).toEqual([2]);
    addRow(db, 'r2');
    const next = snapshotAt(config, T0 + 2 * DAY).json();
    expect(next.removedPartials).toEqual([`.partial-${a.name}-retired`]);
    expect(existsSync(gone)).toBe(false);
    expect(listed(config).map((s) => s.rows)).toEqual([2, 3]);
  });

  it('a folder half deleted some other way is not a snapshot: listed as not usable, never counted or deleted by retention', () => {
    const { db, config } = setup(1);
    addRow(db, 'r0');
    const a = snapshotAt(config, T0).json();
    rmSync(join(a.dir, 'store.db')); // manifest left, its file gone
    addRow(db, 'r1');
    const b = snapshotAt(config, T0 + DAY).json();
    expect(b.pruned).toEqual([]);
    const list = listed(config);
    expect(list.map((s) => [s.name, s.problem !== null])).toEqual([[a.name, true], [b.name, false]]);
    expect(list[0]!.problem).toMatch(/store\.db is missing/);
    expect(cli(['snapshots', 'list', '--config', config], env()).code).toBe(1);
    addRow(db, 'r2');
    const c = snapshotAt(config, T0 + 2 * DAY).json();
    expect(c.pruned).toEqual([b.name]);
    expect(existsSync(a.dir)).toBe(true);
  });

  it('a snapshot whose files no longer match their checksums is left to a person, not deleted', () => {
    const { db, config } = setup(1);
    addRow(db, 'r0');
    const a = snapshotAt(config, T0).json();
    const h = new Database(join(a.dir, 'store.db'));
    h.pragma('journal_mode = DELETE');
    h.exec("UPDATE memory SET fact = 'fact of r9' WHERE id = 'r0'"); // same size, other bytes
    h.close();
    addRow(db, 'r1');
    const b = snapshotAt(config, T0 + DAY).json();
    expect(b.pruned).toEqual([]);
    expect(existsSync(join(a.dir, 'store.db'))).toBe(true);
  });
});
