import { afterAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { createTestDatabase, startPgvectorServer } from '../helpers/pg.js';

// The two PostgreSQL servers the engine's tests run against are what they say they are.
describe('test PostgreSQL servers', () => {
  const stops: (() => Promise<void>)[] = [];
  afterAll(async () => {
    for (const s of stops) await s();
  });

  it('the native server gives a test a database of its own, and drops it', async () => {
    const db = await createTestDatabase('servers');
    const { rows } = await db.client.query<{ v: string; d: string }>('SELECT current_setting($1) AS v, current_database() AS d', ['server_version_num']);
    expect(Number(rows[0]!.v)).toBeGreaterThanOrEqual(150000);
    expect(rows[0]!.d).toBe(db.name);
    await db.drop();
    const admin = new pg.Client({ connectionString: db.url.replace(/\/[^/]*$/, '/postgres') });
    await admin.connect();
    const left = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [db.name]);
    await admin.end();
    expect(left.rowCount).toBe(0);
  });

  it('PGlite serves pgvector to the pg client', async () => {
    const server = await startPgvectorServer();
    stops.push(() => server.stop());
    const c = new pg.Client({ connectionString: server.url });
    await c.connect();
    await c.query('CREATE TABLE v (id int PRIMARY KEY, e vector(3))');
    await c.query("INSERT INTO v VALUES (1, '[1,0,0]'), (2, '[0,1,0]')");
    const { rows } = await c.query<{ id: number }>("SELECT id FROM v ORDER BY e <-> '[0.9,0.1,0]' LIMIT 1");
    expect(rows[0]!.id).toBe(1);
    const ver = await c.query<{ v: string }>("SELECT extversion AS v FROM pg_extension WHERE extname = 'vector'");
    expect(ver.rows[0]!.v).toMatch(/^0\.\d+\.\d+$/);
    await c.end();
  });
});
