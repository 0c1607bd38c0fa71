import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { makeStore, ids, tempDir, type Row } from '../helpers/store.js';
import { addChain } from '../helpers/chains.js';
import { CLI } from '../helpers/cli.js';

const NOW = '2026-11-29T12:00:00Z';
const LENGTH = 30_000;

describe('prune killed with SIGKILL in the middle of a deep chain', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it('leaves a shorter valid chain each time, and the next run deletes exactly what was doomed', async () => {
    const rows: Row[] = [
      ...Array.from({ length: 50 }, (_, i) => ({ id: `live${i}` })),
      ...Array.from({ length: 50 }, (_, i) => ({ id: `exp${i}`, expires_at: '2026-11-01 00:00:00' })),
    ];
    const db = makeStore(join(dir, 'm.db'), rows);
    // The head first in rowid order, so the prune meets the head (and its whole chain) before anything else.
    const chain = addChain(db, { prefix: 'c', length: LENGTH, newestFirst: true, headExpiresAt: '2026-11-20 00:00:00' });
    const keep = rows.filter((r) => r.id.startsWith('live')).map((r) => r.id);
    const cfg = join(dir, 'c.yaml');
    writeFileSync(cfg, `stateDb: ${join(dir, 'state.db')}\nprune:\n  batchMs: 5\n  pauseMs: 3\nstores:\n  t:\n    db: ${db}\n`);

    const watcher = new Database(db, { readonly: true });
    const count = watcher.prepare('SELECT count(*) AS n FROM memory').pluck();
    const total = rows.length + LENGTH;
    const progress: number[] = [];
    for (const share of [0.2, 0.6]) {
      const target = total - Math.floor(LENGTH * share);
      const child = spawn(process.execPath, [CLI, 'run', 'prune', '--config', cfg, '--now', NOW], { stdio: 'ignore', env: { ...process.env, LOG_LEVEL: 'silent' } });
      const exited = new Promise((r) => child.once('exit', r));
      for (let i = 0; i < 30_000 && (count.get() as number) > target && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 2));
      child.kill('SIGKILL');
      await exited;
      progress.push(total - (count.get() as number));

      // What is left of the chain is its newest versions, each still pointing at the next: c0 … ck.
      const left = new Set(ids(db, `SELECT id FROM memory WHERE id LIKE 'c%'`));
      expect(left).toEqual(new Set(chain.slice(0, left.size)));
      expect(ids(db, `SELECT id FROM memory WHERE id LIKE 'live%'`)).toHaveLength(keep.length);
      const d = new Database(db, { readonly: true });
      expect(d.pragma('integrity_check', { simple: true })).toBe('ok');
      expect(d.pragma('foreign_key_check')).toEqual([]);
      d.close();
    }
    watcher.close();
    // The kills landed inside the chain's delete: part of it gone, not all.
    expect(progress[0]).toBeGreaterThan(0);
    expect(progress.at(-1)).toBeLessThan(LENGTH);

    const done = spawn(process.execPath, [CLI, 'run', 'prune', '--config', cfg, '--now', NOW], { stdio: 'ignore', env: { ...process.env, LOG_LEVEL: 'silent' } });
    expect(await new Promise((r) => done.once('exit', r))).toBe(0);
    expect(ids(db)).toEqual([...keep].sort());
  }, 180_000);
});
