import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { makeStore, ids, tempDir, type Row } from '../helpers/store.js';
import { CLI } from '../helpers/cli.js';

const NOW = '2026-11-29T12:00:00Z';

/** Chains of three versions, some ending in an expired head, plus plain expired and live rows. */
function fixture(): { rows: Row[]; doomed: Set<string> } {
  const rows: Row[] = [];
  const doomed = new Set<string>();
  for (let i = 0; i < 4000; i++) {
    const expired = i % 2 === 0;
    rows.push({ id: `h${i}`, expires_at: expired ? '2026-11-01 00:00:00' : null, created_at: '2026-11-01 00:00:00' });
    rows.push({ id: `v${i}`, superseded_by: `h${i}`, created_at: '2026-10-01 00:00:00' });
    rows.push({ id: `o${i}`, superseded_by: `v${i}`, created_at: '2026-09-01 00:00:00' });
    if (expired) ['h', 'v', 'o'].forEach((p) => doomed.add(`${p}${i}`));
  }
  return { rows, doomed };
}

describe('prune killed with SIGKILL', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it('leaves a consistent store at any point, and the next run finishes the job exactly', async () => {
    const { rows, doomed } = fixture();
    const db = makeStore(join(dir, 'm.db'), rows);
    const cfg = join(dir, 'c.yaml');
    writeFileSync(cfg, `stateDb: ${join(dir, 'state.db')}\nprune:\n  batchSize: 50\n  batchMs: 5\n  pauseMs: 3\nstores:\n  t:\n    db: ${db}\n`);
    const all = new Set(rows.map((r) => r.id));

    const watcher = new Database(db, { readonly: true });
    const count = watcher.prepare('SELECT count(*) AS n FROM memory').pluck();
    const progress: number[] = [];
    for (const share of [0.1, 0.4, 0.7]) {
      // Kill once the prune has deleted this share of the doomed rows: mid-run, between or inside batches.
      const target = all.size - Math.floor(doomed.size * share);
      const child = spawn(process.execPath, [CLI, 'run', 'prune', '--config', cfg, '--now', NOW], { stdio: 'ignore', env: { ...process.env, LOG_LEVEL: 'silent' } });
      const exited = new Promise((r) => child.once('exit', r));
      for (let i = 0; i < 3000 && (count.get() as number) > target && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 2));
      child.kill('SIGKILL');
      await exited;
      progress.push(all.size - (count.get() as number));

      const left = new Set(ids(db));
      const gone = [...all].filter((id) => !left.has(id));
      // Only doomed rows went, and only whole chains: a surviving old version always has its newer version.
      for (const id of gone) expect(doomed.has(id), id).toBe(true);
      for (let i = 0; i < 4000; i++) {
        if (left.has(`o${i}`)) expect(left.has(`v${i}`)).toBe(true);
        if (left.has(`v${i}`)) expect(left.has(`h${i}`)).toBe(true);
      }
      const d = new Database(db, { readonly: true });
      expect(d.pragma('integrity_check', { simple: true })).toBe('ok');
      expect(d.pragma('foreign_key_check')).toEqual([]);
      d.close();
    }

    watcher.close();
    // The kills really landed mid-prune: some rows gone, not all.
    expect(progress[0]).toBeGreaterThan(0);
    expect(progress.at(-1)).toBeLessThan(doomed.size);
    const done = spawn(process.execPath, [CLI, 'run', 'prune', '--config', cfg, '--now', NOW], { stdio: 'ignore', env: { ...process.env, LOG_LEVEL: 'silent' } });
    const code = await new Promise((r) => done.once('exit', r));
    expect(code).toBe(0);
    expect(new Set(ids(db))).toEqual(new Set([...all].filter((id) => !doomed.has(id))));
  });
});
