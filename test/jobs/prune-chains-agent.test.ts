import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { makeStore, ids, tempDir } from '../helpers/store.js';
import { addChain } from '../helpers/chains.js';
import { CLI } from '../helpers/cli.js';

const NOW = '2026-11-29T12:00:00Z';

describe('prune of a deep chain while the agent keeps writing to it', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it('deletes what is the expired head\'s chain when it goes, keeps what the agent moved out of it, leaves a valid store', async () => {
    const db = makeStore(join(dir, 'm.db'), [{ id: 'L' }, { id: 'live' }]);
    const length = 20_000;
    addChain(db, { prefix: 'c', length, newestFirst: true, headExpiresAt: '2026-11-20 00:00:00' });
    const cfg = join(dir, 'c.yaml');
    // Short batches throughout (quietBatchMs = batchMs): the agent below meets the chain half deleted, not gone in
    // one long quiet batch before its first write.
    writeFileSync(cfg, `stateDb: ${join(dir, 'state.db')}\nprune:\n  batchMs: 5\n  quietBatchMs: 5\n  pauseMs: 5\nstores:\n  t:\n    db: ${db}\n`);

    const agent = new Database(db);
    agent.pragma('foreign_keys = ON');
    agent.pragma('busy_timeout = 5000');
    const count = agent.prepare('SELECT count(*) FROM memory').pluck();
    const correct = agent.prepare(`INSERT INTO memory (id, subject, fact, source, superseded_by) VALUES (?, 's', 'a correction', 'message:1', ?)`);
    const move = agent.prepare(`UPDATE memory SET superseded_by = 'L' WHERE id = ?`);
    const child = spawn(process.execPath, [CLI, 'run', 'prune', '--config', cfg, '--now', NOW], { stdio: 'ignore', env: { ...process.env, LOG_LEVEL: 'silent' } });
    const exited = new Promise<number | null>((r) => child.once('exit', r));
    let added = 0;
    let moved = 0;
    // Once the prune has started on the chain: new versions hung off it, and versions moved to another fact.
    while (child.exitCode === null && (count.get() as number) > length + 2 - 500) await new Promise((r) => setTimeout(r, 2));
    for (let i = 0; child.exitCode === null && i < 400; i++) {
      // Never the head c0: it is expired, so moving it under L does not save it (nor what hangs off it).
      const at = `c${1 + ((i * 7919) % 12_000)}`;
      try {
        if (i % 40 === 0) moved += move.run(at).changes;
        else if (correct.run(`n${i}`, at).changes === 1) added += 1;
      } catch (err) {
        // The version was deleted already: the agent's foreign key refuses it, as it should.
        expect(String(err)).toMatch(/FOREIGN KEY constraint failed/);
      }
      await new Promise((r) => setTimeout(r, 3));
    }
    expect(await exited).toBe(0);
    agent.close();
    expect(added).toBeGreaterThan(0);
    expect(moved).toBeGreaterThan(0); // c1 goes last: the first move always finds it

    // Left: L with whatever the agent moved under it (and their older versions), and the untouched live row.
    const d = new Database(db, { readonly: true });
    const underL = d.prepare(`WITH RECURSIVE s(id) AS (SELECT 'L' UNION SELECT m.id FROM memory m JOIN s ON m.superseded_by = s.id) SELECT id FROM s`).pluck().all() as string[];
    expect(d.pragma('foreign_key_check')).toEqual([]);
    d.close();
    expect(new Set(ids(db))).toEqual(new Set([...underL, 'live']));
    expect(underL.length).toBeGreaterThan(moved); // L, each version moved under it, and what hangs off them
  }, 180_000);
});
