import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createTestDatabase, startPgvectorServer, type PgvectorServer, type TestDatabase } from '../helpers/pg.js';
import { assertBuilt } from '../queue/fixtures.js';
import { CLI } from '../helpers/cli.js';
import { qdrantTarget } from '../helpers/qdrant-server.js';
import { fillPgStore, ids, initPgStore, pgStoreConfig, URL_VAR, type PgStore } from './pg-fixture.js';
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

  it('review delete takes the row, the older versions behind it and all their vectors; review supersede leaves the old version its vector (a row still), and check names the new one as without a vector', async () => {
    const p = await pglite({ tables: ['memories'], pointId: 'payload' });
    await initPgStore(p.store);
    await fillPgStore(fake(p), 'fleet', { live: 5, chains: 2, depth: 3 });
    await embedAll(p, 'memories', 'mem0');

    const del = await p.store.run(['review', 'delete', 'ch-1-3', '--store', 'fleet', '--json']);
    expect(del.code, del.stderr).toBe(0);
    const gone = ['ch-1-1', 'ch-1-2', 'ch-1-3'];
    const left = await memoryIds(p);
    for (const id of gone) expect(left).not.toContain(id);
    expect(left).toEqual(['ch-2-1', 'ch-2-2', 'ch-2-3', 'live-1', 'live-2', 'live-3', 'live-4', 'live-5']);
    expect(await vectorRows(p, 'memories', 'mem0')).toEqual(left);

    const sup = await p.store.run(['review', 'supersede', 'live-2', '--fact', 'likes green tea', '--source', 'message:today', '--store', 'fleet', '--json']);
    expect(sup.code, sup.stderr).toBe(0);
    // The old version keeps its vector (it is a row still); the new one has none until the agent embeds it.
    expect(await vectorRows(p, 'memories', 'mem0')).toEqual(left);
    const check = await p.store.run(['check', '--store', 'fleet', '--json']);
    expect(check.json().vectors.collections[0]).toMatchObject({ orphanPoints: 0, missingPoints: 1 });
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

const AGENT = fileURLToPath(new URL('../../dist/bench/pg-agent.js', import.meta.url));

/**
 * Concurrency needs the native server (PGlite runs one backend: its clients queue), and Debian's PostgreSQL 15 has no
 * pgvector. memory-warden reads a vector table's ids and payloads only, never its vectors, and knows one by a column
 * whose type is named `vector`: here that is a domain over real[] in the store's schema, so the same code runs.
 */
describe('prune and erase with vectors in the same database, beside agents writing rows and vectors (native PostgreSQL 15)', { timeout: 300_000 }, () => {
  let db: TestDatabase | undefined;
  const children: ChildProcess[] = [];
  beforeAll(() => assertBuilt());
  afterEach(async () => {
    for (const c of children.splice(0)) if (c.exitCode === null) c.kill('SIGKILL');
    await db?.drop();
  });

  it('kill -9 mid-prune, then erase, agents writing throughout: at every instant each row has its vector and each vector its row; nothing live goes, no agent fails, the bytes are gone', async () => {
    db = await createTestDatabase('pg_pgvector');
    const d = db;
    await d.client.query(`CREATE SCHEMA fleet; CREATE DOMAIN fleet.vector AS real[];
      CREATE TABLE fleet.memory_vectors (id text PRIMARY KEY, vector fleet.vector, payload jsonb)`);
    const store = pgStoreConfig(d, { postgres: { batchSize: 50, vectors: { tables: ['memory_vectors'], textKey: 'data' } } });
    await initPgStore(store);
    await fillPgStore(d, 'fleet', { live: 50, expired: 1500, old: 200 });
    await fillPgStore(d, 'fleet', { chains: 20, depth: 20, expiredHead: true, tag: 'x' });
    await d.client.query(`INSERT INTO fleet.memory_vectors (id, payload) SELECT id, jsonb_build_object('data', fact) FROM fleet.memory`);
    const keep = await ids(d, 'fleet', `id LIKE 'live-%' OR id LIKE 'new-%'`);
    const inStep = async () => {
      const r = await d.client.query<{ rows: string; vectors: string }>(`SELECT
        (SELECT count(*) FROM fleet.memory m WHERE NOT EXISTS (SELECT 1 FROM fleet.memory_vectors v WHERE v.id = m.id)) AS rows,
        (SELECT count(*) FROM fleet.memory_vectors v WHERE NOT EXISTS (SELECT 1 FROM fleet.memory m WHERE m.id = v.id)) AS vectors`);
      expect(r.rows[0]).toEqual({ rows: '0', vectors: '0' });
    };

    const agents = Array.from({ length: 4 }, (_, i) => {
      const child = spawn(process.execPath, [AGENT, d.url, 'fleet', `agent${i + 1}`, '1'], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, PG_AGENT_VECTORS: 'memory_vectors' } });
      children.push(child);
      let out = '';
      child.stdout!.setEncoding('utf8').on('data', (c: string) => (out += c));
      const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
      return { child, ready: new Promise((resolve) => child.stdout!.once('data', resolve)), report: closed.then(() => JSON.parse(out.trim().split('\n').at(-1)!) as { writes: number; errors: string[]; live: string[] }) };
    });
    await Promise.all(agents.map((a) => a.ready));

    // A prune killed once it has deleted a few hundred rows: what it committed is whole, rows with their vectors.
    const total = async () => Number((await d.client.query<{ n: string }>(`SELECT count(*) AS n FROM fleet.memory WHERE id NOT LIKE 'agent%'`)).rows[0]!.n);
    const before = await total();
    const child = spawn(process.execPath, [CLI, 'run', 'prune', '--config', store.config], { env: { ...process.env, ...store.env, LOG_LEVEL: 'silent' }, stdio: 'ignore' });
    children.push(child);
    const exited = new Promise((resolve) => child.once('exit', resolve));
    let done = false;
    void exited.then(() => (done = true));
    while (!done && before - (await total()) < 300) await inStep().then(() => new Promise((r) => setTimeout(r, 5)));
    child.kill('SIGKILL');
    await exited;
    await inStep();

    const r = await store.run(['run', 'prune', '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json().deleted).toBeGreaterThan(0); // the killed prune had not finished
    await inStep();

    // erase of a person beside the same agents: the rows and their vectors in the same transactions, then VACUUM FULL
    // of both tables (waiting for the agents' locks) and the byte check of both, here on the native server.
    await d.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) SELECT 'ann-' || g, 'ann', 'Ann keeps the spare key under pot ' || g, 'message' FROM generate_series(1, 40) g`);
    await d.client.query(`INSERT INTO fleet.memory_vectors (id, payload) SELECT id, jsonb_build_object('data', fact) FROM fleet.memory WHERE subject = 'ann'`);
    const erase = spawn(process.execPath, [CLI, 'erase', '--user', 'ann', '--store', 'fleet', '--json', '--config', store.config], { env: { ...process.env, ...store.env, LOG_LEVEL: 'silent' }, stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(erase);
    let receipt = '';
    erase.stdout!.setEncoding('utf8').on('data', (c: string) => (receipt += c));
    const erased = new Promise<number | null>((resolve) => erase.once('close', (code) => resolve(code)));
    let finished = false;
    void erased.then(() => (finished = true));
    while (!finished) await inStep().then(() => new Promise((r) => setTimeout(r, 5)));
    expect(await erased, receipt).toBe(0);
    expect(JSON.parse(receipt).bytes.verdict).toBe('clean');
    expect(JSON.parse(receipt).bytes.found).toEqual([]);
    expect(await ids(d, 'fleet', `subject = 'ann'`)).toEqual([]);
    await inStep();
    for (const a of agents) a.child.kill('SIGTERM');
    const reports = await Promise.all(agents.map((a) => a.report));
    for (const rep of reports) {
      expect(rep.errors).toEqual([]);
      expect(rep.writes).toBeGreaterThan(0);
    }
    expect(await ids(d, 'fleet', `id NOT LIKE 'agent%'`)).toEqual(keep);
    const agentLive = reports.flatMap((rep) => rep.live).sort();
    expect(await ids(d, 'fleet', `id LIKE 'agent%' AND superseded_by IS NULL`)).toEqual(agentLive);
    await inStep();
    const check = await store.run(['check', '--store', 'fleet', '--json']);
    expect(check.code, check.stderr).toBe(0);
    expect(check.json().vectors.collections[0]).toMatchObject({ orphanPoints: 0, missingPoints: 0, payloadMismatch: 0 });
  });

  it('with its vectors in Qdrant instead, prune deletes the pruned rows\' points first (before each batch\'s transaction), as on SQLite', async () => {
    const q = await qdrantTarget();
    try {
      db = await createTestDatabase('pg_prune_qdrant');
      const coll = q.name('memories');
      const store = pgStoreConfig(db, { extra: { stores: { fleet: { engine: 'postgres', postgres: { url: `\${${URL_VAR}}`, schema: 'fleet' }, qdrant: { url: q.url, ...(q.apiKey ? { apiKey: q.apiKey } : {}), collections: [coll] } } } } });
      await initPgStore(store);
      await fillPgStore(db, 'fleet', { live: 5, expired: 4, old: 3, chains: 2, depth: 3, expiredHead: true });
      const all = await ids(db, 'fleet');
      await q.createCollection(coll);
      await q.upsert(coll, [...all, 'stranger'].map((id, i) => ({ id: i + 1, payload: { memory_id: id } })));
      const r = await store.run(['run', 'prune', '--json']);
      expect(r.code, r.stderr).toBe(0);
      expect(r.json().deleted).toBe(4 + 3 + 2 * 3);
      const left = await ids(db, 'fleet');
      expect((await q.points(coll)).map((p) => String(p.payload.memory_id)).sort()).toEqual([...left, 'stranger'].sort());
      q.assertConforms();
    } finally {
      await q.close();
    }
  });
});
