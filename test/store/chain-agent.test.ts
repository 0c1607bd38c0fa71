import { afterEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { ids, makeStore, tempDir, type Row } from '../helpers/store.js';
import { addChain, chainIds } from '../helpers/chains.js';
import { qdrantFixture, type QdrantFixture } from '../helpers/qdrant-store.js';
import { openDatabase, type Db } from '../../src/store/sqlite.js';
import { openStore } from '../../src/layouts/open.js';
import { deleteRoots } from '../../src/layouts/warden/delete.js';
import { prune } from '../../jobs/prune.js';
import { silentLogger } from '../../src/log/logger.js';

const NOW = Date.UTC(2026, 10, 29, 12, 0, 0);
/** The prune's own rule for these tests: the head expired. Re-checked in every transaction. */
const EXPIRED = { sql: `expires_at IS NOT NULL AND expires_at <= '2026-11-29 12:00:00'` };

function validIn(path: string): void {
  const d = new Database(path, { readonly: true });
  try {
    expect(d.pragma('foreign_key_check')).toEqual([]);
  } finally {
    d.close();
  }
}

/** The agent: its own connection, foreign keys on, writing between two of the delete's transactions. */
function agentWrites(path: string, sql: string): void {
  const agent = new Database(path);
  try {
    agent.pragma('foreign_keys = ON');
    agent.exec(sql);
  } finally {
    agent.close();
  }
}

describe('a deep chain the agent changes while it is being deleted', () => {
  const dirs: (() => void)[] = [];
  let db: Db | undefined;
  afterEach(() => {
    db?.close();
    db = undefined;
    dirs.splice(0).forEach((c) => c());
  });
  const store = (rows: Row[]) => {
    const { dir, cleanup } = tempDir();
    dirs.push(cleanup);
    return makeStore(join(dir, 'm.db'), rows);
  };
  const chain = chainIds({ prefix: 'c', length: 6000 });

  it('a version the agent moves to another fact leaves the chain: it and its older versions stay', async () => {
    const path = store([{ id: 'L' }]);
    addChain(path, { prefix: 'c', length: 6000, headExpiresAt: '2026-11-20 00:00:00' });
    db = openDatabase(path);
    let pauses = 0;
    const out = await deleteRoots(db, ['c0'], {
      recheck: EXPIRED, budget: { ms: 1, chunk: 10 },
      pause: async () => {
        if (++pauses === 1) agentWrites(path, `UPDATE memory SET superseded_by = 'L' WHERE id = 'c3000'`);
        return true;
      },
    });
    const left = new Set(ids(path));
    // c0 … c2999 went (the head's chain at the end); c3000 and what was still behind it stayed with L.
    for (const id of chain.slice(0, 3000)) expect(left.has(id), id).toBe(false);
    expect(left.has('c3000')).toBe(true);
    const kept = chain.filter((id) => left.has(id));
    expect(kept).toEqual(chain.slice(3000, 3000 + kept.length)); // a contiguous, shorter chain behind L
    expect(out.rowids).toHaveLength(6000 - kept.length);
    validIn(path);
  });

  it('a head the agent renews mid-way stops the delete; what is left is a valid shorter chain', async () => {
    const path = store([]);
    addChain(path, { prefix: 'c', length: 6000, headExpiresAt: '2026-11-20 00:00:00' });
    db = openDatabase(path);
    let pauses = 0;
    const out = await deleteRoots(db, ['c0'], {
      recheck: EXPIRED, budget: { ms: 1, chunk: 10 },
      pause: async () => {
        if (++pauses === 2) agentWrites(path, `UPDATE memory SET expires_at = NULL WHERE id = 'c0'`);
        return true;
      },
    });
    const left = ids(path, 'SELECT id FROM memory');
    expect(left.length).toBeGreaterThan(0);
    expect(new Set(left)).toEqual(new Set(chain.slice(0, left.length))); // c0 … ck: the oldest versions went
    expect(out.rowids).toHaveLength(6000 - left.length);
    validIn(path);
  });

  it('versions the agent adds to the chain meanwhile go with it, and the count says so', async () => {
    const path = store([{ id: 'other' }]);
    addChain(path, { prefix: 'c', length: 6000, headExpiresAt: '2026-11-20 00:00:00' });
    db = openDatabase(path);
    let pauses = 0;
    const out = await deleteRoots(db, ['c0'], {
      recheck: EXPIRED, budget: { ms: 1, chunk: 10 },
      pause: async () => {
        if (++pauses === 1) {
          // A correction of c10 (now older than it), and a whole chain of 1,500 hung off c20 in one transaction.
          agentWrites(path, `INSERT INTO memory (id, subject, fact, source, superseded_by) VALUES ('n1', 's', 'f', 'message:1', 'c10')`);
          addChain(path, { prefix: 'g', length: 1500, headSupersededBy: 'c20' });
        }
        return true;
      },
    });
    expect(ids(path)).toEqual(['other']);
    expect(out.rowids).toHaveLength(6000 + 1 + 1500);
    validIn(path);
  });

  it('an agent that commits before every transaction does not stop the delete (the chain is then read inside the lock)', async () => {
    const path = store([{ id: 'other' }]);
    addChain(path, { prefix: 'c', length: 3000, headExpiresAt: '2026-11-20 00:00:00' });
    db = openDatabase(path);
    const agent = new Database(path);
    let writes = 0;
    try {
      const touch = agent.prepare(`UPDATE memory SET confirmed_at = ? WHERE id = 'other'`);
      const out = await deleteRoots(db, ['c0'], {
        recheck: EXPIRED, budget: { ms: 1, chunk: 10 },
        pause: async () => {
          touch.run(`2026-11-${String(10 + (++writes % 18)).padStart(2, '0')} 00:00:00`);
          return true;
        },
      });
      expect(out.rowids).toHaveLength(3000);
    } finally {
      agent.close();
    }
    expect(writes).toBeGreaterThan(3);
    expect(ids(path)).toEqual(['other']);
    validIn(path);
  });
});

describe('a deep chain with a vector store', () => {
  let fx: QdrantFixture;
  afterEach(async () => fx?.close());

  it('deletes the vectors of each version before the version, so no point is ever left without its row', async () => {
    const live = Array.from({ length: 20 }, (_, i) => ({ id: `live${i}` }));
    const expired = Array.from({ length: 20 }, (_, i) => ({ id: `exp${i}`, expires_at: '2026-11-01 00:00:00' }));
    fx = await qdrantFixture([...live, ...expired]);
    const chain = addChain(fx.dbPath, { prefix: 'c', length: 3000, newestFirst: true, headExpiresAt: '2026-11-20 00:00:00' });
    await fx.seedPoints([...live, ...expired, ...chain.map((id) => ({ id, fact: `version ${id}` }))]);
    const s = openStore(fx.config(), 'agent');
    let checks = 0;
    try {
      const rowsNow = () => new Set(ids(fx.dbPath));
      const out = await deleteRoots(s.db, ['c0', 'exp0'], {
        vectors: s.vectors, budget: { ms: 1, chunk: 10 },
        pause: async () => {
          const rows = rowsNow();
          for (const id of await fx.pointRows()) expect(rows.has(id), `point of ${id} without its row`).toBe(true);
          checks += 1;
          // The agent adds a correction with its point to the chain being deleted: both must go.
          if (checks === 1) {
            agentWrites(fx.dbPath, `INSERT INTO memory (id, subject, fact, source, superseded_by) VALUES ('n1', 's', 'f', 'message:1', 'c5')`);
            await fx.seedPoints([{ id: 'n1', fact: 'new correction' }]);
          }
          return true;
        },
      });
      expect(checks).toBeGreaterThan(2);
      expect(out.rowids).toHaveLength(3000 + 1 + 1);
    } finally {
      s.close();
    }
    const left = [...live.map((r) => r.id), ...expired.slice(1).map((r) => r.id)].sort();
    expect(ids(fx.dbPath)).toEqual(left);
    expect(await fx.pointRows()).toEqual(left);
  });

  it('prune through both stores: a 1,001-version chain and the unrelated expired rows, nothing orphaned', async () => {
    const live = Array.from({ length: 20 }, (_, i) => ({ id: `live${i}` }));
    const expired = Array.from({ length: 20 }, (_, i) => ({ id: `exp${i}`, expires_at: '2026-11-01 00:00:00' }));
    fx = await qdrantFixture([...live, ...expired]);
    const chain = addChain(fx.dbPath, { prefix: 'c', length: 1001, newestFirst: true, headExpiresAt: '2026-11-20 00:00:00' });
    await fx.seedPoints([...live, ...expired, ...chain.map((id) => ({ id }))]);
    const ctx = { config: fx.config(), log: silentLogger, now: () => NOW, signal: new AbortController().signal };
    const r = await prune({ store: 'agent', dryRun: false }, ctx);
    expect(r).toMatchObject({ deleted: 1021, expired: 21, cascaded: 1000 });
    const left = live.map((x) => x.id).sort();
    expect(ids(fx.dbPath)).toEqual(left);
    expect(await fx.pointRows()).toEqual(left);
  });
});
