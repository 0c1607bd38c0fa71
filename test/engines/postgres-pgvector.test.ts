import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { readFileSync, writeFileSync } from 'node:fs';
import { startPgvectorServer, type PgvectorServer } from '../helpers/pg.js';
import { assertBuilt } from '../queue/fixtures.js';
import { fillPgStore, initPgStore, pgStoreConfig, type PgStore } from './pg-fixture.js';
import { verifyBytesGone } from '../../src/engines/postgres/bytes.js';

/**
 * A warden store on PostgreSQL with its vectors in pgvector tables of its own schema (`postgres.vectors`), through the
 * CLI as a user runs it, on PGlite (PostgreSQL 18 with pgvector 0.8; Debian's PostgreSQL 15 has no pgvector): one
 * PGlite server per store. Two table shapes: mem0ai 3.3.1's (`id uuid`, the row named by `payload.memory_id`) and a
 * table keyed by the memory id itself (`id text`).
 */

interface Pglite {
  server: PgvectorServer;
  client: pg.Client;
  store: PgStore;
}

const open: Pglite[] = [];
afterEach(async () => {
  for (const p of open.splice(0)) {
    await p.client.end().catch(() => {});
    await p.server.stop();
  }
});

type Vectors = Record<string, unknown>;

async function pglite(vectors: Vectors, opts: { table?: 'mem0' | 'text'; skipTable?: boolean } = {}): Promise<Pglite> {
  const server = await startPgvectorServer();
  const client = new pg.Client({ connectionString: server.url });
  await client.connect();
  const fake = { url: server.url, name: 'pglite', client, drop: async () => {} };
  const store = pgStoreConfig(fake, { postgres: { vectors } });
  const p = { server, client, store };
  open.push(p);
  if (!opts.skipTable) {
    await client.query('CREATE SCHEMA IF NOT EXISTS fleet');
    const id = opts.table === 'text' ? 'text' : 'uuid';
    for (const t of (vectors.tables as string[])) await client.query(`CREATE TABLE fleet.${t} (id ${id} PRIMARY KEY, vector vector(3), payload jsonb)`);
  }
  return p;
}

const fake = (p: Pglite) => ({ url: p.server.url, name: 'pglite', client: p.client, drop: async () => {} });

/** A vector for every row: mem0's shape (random uuid, payload naming the row) or keyed by the row's id. */
async function embedAll(p: Pglite, table: string, shape: 'mem0' | 'text', where = 'true'): Promise<void> {
  const id = shape === 'mem0' ? 'gen_random_uuid()' : 'id';
  await p.client.query(`INSERT INTO fleet.${table} (id, vector, payload)
    SELECT ${id}, '[1,2,3]', jsonb_build_object('memory_id', id, 'data', fact, 'user_id', subject, 'textLemmatized', lower(fact)) FROM fleet.memory WHERE ${where}`);
}

const vectorRows = async (p: Pglite, table: string, shape: 'mem0' | 'text') =>
  (await p.client.query<{ r: string }>(`SELECT ${shape === 'mem0' ? "payload->>'memory_id'" : 'id'} AS r FROM fleet.${table} ORDER BY 1`)).rows.map((x) => x.r);
const memoryIds = async (p: Pglite) => (await p.client.query<{ id: string }>(`SELECT id FROM fleet.memory ORDER BY id`)).rows.map((r) => r.id);

describe('a PostgreSQL warden store with its vectors in pgvector (PGlite)', { timeout: 300_000 }, () => {
  beforeAll(() => assertBuilt());

  it('the config: pgvector tables or Qdrant, not both; memory-warden\'s own tables refused; a missing table is one line naming the field, exit 2', async () => {
    const both = pgStoreConfig({ url: 'postgres://x@127.0.0.1:1/x', name: 'x', client: undefined as never, drop: async () => {} }, {
      postgres: { vectors: { tables: ['memories'] } },
    });
    const cfg = JSON.parse(readFileSync(both.config, 'utf8'));
    cfg.stores.fleet.qdrant = { url: 'http://127.0.0.1:6333', collections: ['m'] };
    writeFileSync(both.config, JSON.stringify(cfg));
    const r = await both.run(['check', '--store', 'fleet']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('stores.fleet.postgres.vectors');
    expect(r.stderr).toContain('not both');

    cfg.stores.fleet.qdrant = undefined;
    cfg.stores.fleet.postgres.vectors = { tables: ['memory'] };
    writeFileSync(both.config, JSON.stringify(cfg));
    const own = await both.run(['check', '--store', 'fleet']);
    expect(own.code).toBe(2);
    expect(own.stderr).toContain('stores.fleet.postgres.vectors.tables');

    const p = await pglite({ tables: ['memories'] }, { skipTable: true });
    const init = await p.store.run(['init', '--store', 'fleet']);
    expect(init.code, init.stderr).toBe(0);
    expect(init.stdout + init.stderr).toContain('memories does not exist yet');
    const missing = await p.store.run(['check', '--store', 'fleet']);
    expect(missing.code).toBe(2);
    expect(missing.stderr.trim().split('\n')).toHaveLength(1);
    expect(missing.stderr).toContain('stores.fleet.postgres.vectors.tables: schema "fleet" has no vector table memories');
  });

  it('init stores the payload uncompressed and indexes the payload key; check finds vectors out of step as it does with Qdrant', async () => {
    const p = await pglite({ tables: ['memories'], pointId: 'payload', textKey: 'data' });
    await initPgStore(p.store);
    const storage = await p.client.query<{ attname: string; attstorage: string }>(
      `SELECT attname, attstorage FROM pg_attribute WHERE attrelid = 'fleet.memories'::regclass AND attname IN ('id', 'payload') ORDER BY attname`);
    expect(storage.rows).toEqual([{ attname: 'id', attstorage: 'p' }, { attname: 'payload', attstorage: 'e' }]);
    expect((await p.client.query(`SELECT 1 FROM pg_indexes WHERE schemaname = 'fleet' AND indexname = 'memories_mw_row'`)).rows).toHaveLength(1);

    await fillPgStore(fake(p), 'fleet', { live: 20 });
    await embedAll(p, 'memories', 'mem0');
    const clean = await p.store.run(['check', '--store', 'fleet', '--json']);
    expect(clean.code, clean.stderr).toBe(0);
    expect(clean.json().vectors.collections).toEqual([{ collection: 'memories', points: 20, orphanPoints: 0, missingPoints: 0, payloadMismatch: 0, unmappedPoints: 0 }]);

    // A vector whose row is gone, a live row with none, a payload that no longer says the fact, one naming no row.
    await p.client.query(`INSERT INTO fleet.memories VALUES (gen_random_uuid(), '[1,1,1]', '{"memory_id": "gone-1", "data": "x"}')`);
    await p.client.query(`DELETE FROM fleet.memories WHERE payload->>'memory_id' = 'live-2'`);
    await p.client.query(`UPDATE fleet.memories SET payload = payload || '{"data": "likes coffee"}' WHERE payload->>'memory_id' = 'live-3'`);
    await p.client.query(`INSERT INTO fleet.memories VALUES (gen_random_uuid(), '[1,1,1]', '{"data": "nobody"}')`);
    const r = await p.store.run(['check', '--store', 'fleet', '--json']);
    expect(r.code, r.stderr).toBe(1);
    const report = r.json();
    const byCode = Object.fromEntries([...report.problems, ...report.notes].map((f: { code: string; count?: number; ids?: string[] }) => [f.code, f]));
    expect(byCode.orphan_points!.count).toBe(1);
    expect(byCode.missing_points!.ids).toEqual(['live-2']);
    expect(byCode.payload_mismatch!.count).toBe(1);
    expect(byCode.payload_mismatch!.ids![0]).toContain('(row live-3)');
    expect(byCode.unmapped_points!.count).toBe(1);
    expect(report.problems.map((f: { code: string }) => f.code)).toContain('orphan_points');
  });

  it('prune deletes each pruned row\'s vectors in its batch\'s transaction: a batch that fails keeps both, the next prune takes both', async () => {
    const p = await pglite({ tables: ['memories'], pointId: 'payload' });
    await initPgStore(p.store);
    await fillPgStore(fake(p), 'fleet', { live: 15, expired: 10, old: 5, chains: 3, depth: 4, expiredHead: true });
    await embedAll(p, 'memories', 'mem0');
    // Someone else's vector whose row never existed: prune does not delete it (it did not make it), check reports it.
    await p.client.query(`INSERT INTO fleet.memories VALUES (gen_random_uuid(), '[1,1,1]', '{"memory_id": "stranger"}')`);
    const before = await vectorRows(p, 'memories', 'mem0');

    // A row that refuses to be deleted makes the batch fail: its vectors stay with its rows (one transaction).
    await p.client.query(`CREATE FUNCTION fleet.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'not now'; END $$`);
    await p.client.query(`CREATE TRIGGER refuse BEFORE DELETE ON fleet.memory FOR EACH ROW WHEN (OLD.id = 'exp-7') EXECUTE FUNCTION fleet.refuse()`);
    const failed = await p.store.run(['run', 'prune', '--store', 'fleet', '--json']);
    expect(failed.code).not.toBe(0);
    expect(await vectorRows(p, 'memories', 'mem0')).toEqual(before);

    await p.client.query(`DROP TRIGGER refuse ON fleet.memory`);
    const r = await p.store.run(['run', 'prune', '--store', 'fleet', '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json().deleted).toBe(10 + 5 + 3 * 4);
    const left = await memoryIds(p);
    expect(left.every((id) => id.startsWith('live-') || id.startsWith('new-'))).toBe(true);
    expect(await vectorRows(p, 'memories', 'mem0')).toEqual([...left, 'stranger'].sort());
  });

  it('erase takes the person\'s vectors with their rows, sweeps a stray vector holding their text, VACUUM FULLs the vector table and reads its files: clean', async () => {
    const p = await pglite({ tables: ['memory_vectors'] }, { table: 'text' });
    await initPgStore(p.store);
    await fillPgStore(fake(p), 'fleet', { live: 10 });
    await p.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) SELECT 'ann-' || g, 'ann', 'Ann keeps her spare key under the blue pot number ' || g, 'message' FROM generate_series(1, 6) g`);
    await p.client.query(`UPDATE fleet.memory SET superseded_by = 'ann-1' WHERE id = 'ann-2'`);
    await embedAll(p, 'memory_vectors', 'text');
    // A vector of no row that repeats one of Ann's texts (an agent's write that lost its row).
    await p.client.query(`INSERT INTO fleet.memory_vectors VALUES ('lost-1', '[1,1,1]', '{"data": "Ann keeps her spare key under the blue pot number 3"}')`);
    const texts = (await p.client.query<{ fact: string }>(`SELECT fact FROM fleet.memory WHERE subject = 'ann'`)).rows.map((r) => r.fact);

    const r = await p.store.run(['erase', '--user', 'ann', '--store', 'fleet', '--json']);
    expect(r.code, r.stderr + r.stdout).toBe(0);
    const receipt = r.json();
    expect(receipt.memories).toBe(6);
    expect(receipt.bytes.verdict).toBe('clean');
    expect((await memoryIds(p)).filter((id) => id.startsWith('ann-'))).toEqual([]);
    expect(await vectorRows(p, 'memory_vectors', 'text')).toEqual((await memoryIds(p)).sort());
    // Read by the test itself, the vector table's heap, TOAST and indexes: none of Ann's texts.
    const c = new pg.Client({ connectionString: p.server.url });
    await c.connect();
    try {
      const v = await verifyBytesGone(c, { schema: 'fleet', tables: ['memory_vectors'], needles: [...texts, ...texts.map((t) => t.toLowerCase())] });
      expect(v.read.some((x) => x.table === 'memory_vectors' && x.kind === 'heap')).toBe(true);
      expect(v.verdict).toBe('clean');
    } finally {
      await c.end();
    }
  });

  it('restore of a snapshot taken before an erase: the erase ledger is re-applied to the vector table too, no erased vector or byte comes back', async () => {
    const p = await pglite({ tables: ['memories'], pointId: 'payload' });
    await initPgStore(p.store);
    await fillPgStore(fake(p), 'fleet', { live: 8 });
    await p.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) SELECT 'bo-' || g, 'bo', 'Bo was diagnosed with condition ' || g, 'message' FROM generate_series(1, 4) g`);
    await embedAll(p, 'memories', 'mem0');
    const texts = (await p.client.query<{ fact: string }>(`SELECT fact FROM fleet.memory WHERE subject = 'bo'`)).rows.map((r) => r.fact);
    const snap = await p.store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
    expect(snap.code, snap.stderr).toBe(0);
    // Exit 1: the snapshot still holds Bo (kept here, to be restored); the store itself is clean.
    const erased = await p.store.run(['erase', '--user', 'bo', '--store', 'fleet', '--json']);
    expect(erased.code, erased.stderr + erased.stdout).toBe(1);
    expect(erased.json().bytes.verdict).toBe('clean');
    expect(JSON.stringify(erased.json().snapshots)).toContain("snapshots/fleet/");

    const restored = await p.store.run(['restore', 'latest', '--store', 'fleet', '--json']);
    expect(restored.code, restored.stderr).toBe(0);
    expect(restored.json().erasedKeptOut).toBe(4);
    expect((await memoryIds(p)).filter((id) => id.startsWith('bo-'))).toEqual([]);
    expect(await vectorRows(p, 'memories', 'mem0')).toEqual(await memoryIds(p));
    const c = new pg.Client({ connectionString: p.server.url });
    await c.connect();
    try {
      expect((await verifyBytesGone(c, { schema: 'fleet', tables: ['memory', 'memories'], needles: texts })).verdict).toBe('clean');
    } finally {
      await c.end();
    }
  });
});
