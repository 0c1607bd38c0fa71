import { afterEach, expect, it } from 'vitest';
import pg from 'pg';
import { ENGINES } from '../../src/engines/registry.js';
import type { AnyStoreHandle, StoreEngine } from '../../src/engines/contract.js';
import { storeSchema } from '../../src/store/config.js';
import { createTestDatabase, type TestDatabase } from '../helpers/pg.js';

/**
 * VACUUM FULL copies a deleted row that a snapshot older than its delete may still see (RECENTLY_DEAD): erase's scrub
 * on PostgreSQL rewrites the table again while its read-back finds an erased text, so a snapshot that ends while it
 * retries leaves nothing of the rows (native server). A snapshot held throughout is reported, never hidden.
 */
let db: TestDatabase | undefined;
const clients: pg.Client[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) await c.end().catch(() => {});
  await db?.drop();
  db = undefined;
});

async function world() {
  db = await createTestDatabase('scrub_horizon');
  await db.client.query('CREATE SCHEMA fleet');
  await db.client.query(`CREATE TABLE fleet.memory (id text PRIMARY KEY, subject text NOT NULL, fact text NOT NULL, source text NOT NULL)`);
  await db.client.query(`ALTER TABLE fleet.memory ALTER COLUMN id SET STORAGE EXTERNAL, ALTER COLUMN subject SET STORAGE EXTERNAL, ALTER COLUMN fact SET STORAGE EXTERNAL, ALTER COLUMN source SET STORAGE EXTERNAL`);
  await db.client.query(`INSERT INTO fleet.memory SELECT 'm' || g, 'carol', 'Carol keeps the vault code ' || (4400 + g), 'message' FROM generate_series(1, 3) g`);
  await db.client.query(`INSERT INTO fleet.memory VALUES ('b1', 'bob', 'Bob grows chillies', 'message')`);
  const engine = (await ENGINES.postgres()) as StoreEngine<AnyStoreHandle>;
  const handle = await engine.open('fleet', storeSchema.parse({ engine: 'postgres', postgres: { url: db.url, schema: 'fleet' } }), {});
  // Another client's open snapshot, taken before the delete (an agent's long read, autovacuum's ANALYZE).
  const reader = new pg.Client({ connectionString: db.url });
  await reader.connect();
  clients.push(reader);
  await reader.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
  await reader.query('SELECT 1'); // its snapshot, no lock on the table
  if (handle.engine !== 'postgres') throw new Error('a PostgreSQL handle');
  const texts = (await handle.pg.query<{ fact: string }>(`DELETE FROM fleet.memory WHERE subject = 'carol' RETURNING fact`)).rows.map((r) => r.fact);
  const relfilenode = async () => (await db!.client.query<{ n: string }>(`SELECT relfilenode::text AS n FROM pg_class WHERE oid = 'fleet.memory'::regclass`)).rows[0]!.n;
  return { engine, handle, reader, texts, relfilenode };
}

it('a snapshot older than the delete, ended while the scrub runs: the table is rewritten again, and nothing of the rows is left', { timeout: 120_000 }, async () => {
  const { engine, handle, reader, texts, relfilenode } = await world();
  try {
    const before = await relfilenode();
    const scrubbing = engine.scrubErased(handle, { tables: ['memory'], needles: texts });
    // Once the first VACUUM FULL has rewritten the table (copying the rows the snapshot may still see), it ends.
    let done = false;
    void scrubbing.finally(() => (done = true));
    while (!done && (await relfilenode()) === before) await new Promise((r) => setTimeout(r, 5));
    await reader.query('COMMIT');
    const scrub = await scrubbing;
    expect(scrub.vacuumed).toBe(true);
    expect(scrub.bytes).toMatchObject({ verdict: 'clean', found: [], needles: 3 });
  } finally {
    await handle.close();
  }
});

it('a snapshot held throughout: the rows the database keeps for it are reported found, not hidden', { timeout: 120_000 }, async () => {
  const { engine, handle, texts } = await world();
  try {
    const scrub = await engine.scrubErased(handle, { tables: ['memory'], needles: texts });
    expect(scrub.vacuumed).toBe(true);
    expect(scrub.bytes?.verdict).toBe('found');
    expect(scrub.bytes?.found.length).toBe(3);
  } finally {
    await handle.close();
  }
});
