import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import pg from 'pg';
import { CLI, cliAsync } from '../helpers/cli.js';
import { createTestDatabase, serverUrl, type TestDatabase } from '../helpers/pg.js';
import { assertBuilt } from '../queue/fixtures.js';
import { chainedPgStore, fillPgStore, ids, initPgStore, pgStoreConfig, URL_VAR } from './pg-fixture.js';
import { nextSize, prunePg } from '../../src/layouts/warden/postgres/prune.js';
import { openPgSession } from '../../src/engines/postgres/session.js';
import type { PostgresStoreHandle } from '../../src/engines/contract.js';
import { silentLogger } from '../../src/log/logger.js';

/**
 * The warden layout on the native PostgreSQL server, through the CLI as a user runs it: init, check, prune exact on
 * expiry and on cascades at any chain depth, and kill -9 of a prune at several points leaving the store correct.
 */
describe('the warden layout on PostgreSQL', { timeout: 180_000 }, () => {
  let db: TestDatabase;
  beforeAll(() => assertBuilt());
  afterEach(async () => {
    await db?.drop();
  });

  it('init creates the schema, table, indexes and view, the text columns uncompressed; a second init changes nothing', async () => {
    db = await createTestDatabase('pg_init');
    const store = pgStoreConfig(db);
    const first = await store.run(['init', '--store', 'fleet', '--json']);
    expect(first.code, first.stderr).toBe(0);
    expect(first.json().created).toEqual(['schema fleet', 'table memory', 'index memory_expires', 'index memory_superseded', 'view live_memory', 'extension amcheck']);
    const storage = await db.client.query<{ attname: string; attstorage: string }>(
      `SELECT attname, attstorage FROM pg_attribute WHERE attrelid = 'fleet.memory'::regclass AND attname IN ('fact', 'subject', 'source') ORDER BY attname`);
    expect(storage.rows).toEqual([{ attname: 'fact', attstorage: 'e' }, { attname: 'source', attstorage: 'e' }, { attname: 'subject', attstorage: 'e' }]);
    const fk = await db.client.query<{ def: string }>(`SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = 'fleet.memory'::regclass AND contype = 'f'`);
    expect(fk.rows[0]!.def).toBe('FOREIGN KEY (superseded_by) REFERENCES fleet.memory(id) ON DELETE CASCADE');
    const second = await store.run(['init', '--store', 'fleet']);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stdout).toContain('schema up to date');
  });

  it('check counts rows, live and the gap, notes what prune will take, and fails on a row superseded by one that is gone', async () => {
    db = await createTestDatabase('pg_check');
    const store = pgStoreConfig(db);
    await initPgStore(store);
    await fillPgStore(db, 'fleet', { live: 5, expired: 3, old: 2 });
    const ok = await store.run(['check', '--json']);
    expect(ok.code, ok.stderr).toBe(0);
    const report = ok.json();
    expect(report).toMatchObject({ ok: true, rows: 12, live: 7, gap: 5, integrity: 'ok', dangling: 0, path: 'postgres schema fleet' });
    expect(report.notes.map((n: { code: string }) => n.code)).toEqual(['prune_pending']);
    // The text line has no journal mode: a PostgreSQL store has none of its own.
    const text = await store.run(['check']);
    expect(text.stdout).toContain('rows 12, live 7 (gap 5), integrity ok, dangling 0');
    // The foreign key switched off (as a superuser can), a row's newer version deleted: dangling.
    await db.client.query(`ALTER TABLE fleet.memory DISABLE TRIGGER ALL`);
    await db.client.query(`DELETE FROM fleet.memory WHERE id = 'new-1'`);
    await db.client.query(`ALTER TABLE fleet.memory ENABLE TRIGGER ALL`);
    const bad = await store.run(['check', '--json']);
    expect(bad.code, bad.stderr).toBe(1);
    expect(bad.json().problems).toMatchObject([{ code: 'dangling', count: 1, ids: ['old-1'] }]);
  });

  it('prune deletes exactly what expired and what was superseded long ago, and whole chains of any depth by cascade', async () => {
    db = await createTestDatabase('pg_prune');
    const store = pgStoreConfig(db);
    await initPgStore(store);
    await fillPgStore(db, 'fleet', { live: 20, expired: 30, old: 10 });
    await fillPgStore(db, 'fleet', { chains: 2, depth: 2500, expiredHead: true, tag: 'x' });
    await fillPgStore(db, 'fleet', { chains: 2, depth: 300, tag: 'k' });
    const keep = await ids(db, 'fleet', `id LIKE 'live-%' OR id LIKE 'new-%' OR id LIKE 'chk-%'`);
    expect(keep).toHaveLength(20 + 10 + 600);
    const dry = await store.run(['run', 'prune', '--dry-run', '--json']);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.json()).toMatchObject({ deleted: 30 + 10 + 5000, expired: 32, superseded: 10, cascaded: 4998 });
    expect(await ids(db, 'fleet')).toHaveLength(20 + 30 + 20 + 5000 + 600);
    const r = await store.run(['run', 'prune', '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json()).toMatchObject({ deleted: 5040, expired: 32, superseded: 10, cascaded: 4998, dryRun: false });
    expect(await ids(db, 'fleet')).toEqual(keep);
    const again = await store.run(['run', 'prune', '--json']);
    expect(again.json()).toMatchObject({ deleted: 0 });
  });

  it('a server that counts no deletes (track_counts off): prune takes the list of candidates and stays exact on chains', async () => {
    db = await createTestDatabase('pg_nocounts');
    const { store, keep } = await chainedPgStore(db, { batchSize: 10 }, { live: 20, expired: 300, old: 40 }, { chains: 5, depth: 40 });
    // Every new session of the database, prune's included, without the counts the walk tells a cascade by.
    await db.client.query(`ALTER DATABASE "${db.name}" SET track_counts = off`);
    const r = await store.run(['run', 'prune', '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json()).toMatchObject({ deleted: 300 + 40 + 5 * 40, expired: 305, superseded: 40, cascaded: 5 * 39 });
    expect(await ids(db, 'fleet')).toEqual(keep);
  });

  it('the walk deletes a batch whose rows have older versions (shallow chains, a deep one) by the chain way, counted exactly', async () => {
    db = await createTestDatabase('pg_walkchain');
    const store = pgStoreConfig(db, { postgres: { batchSize: 50 } });
    await initPgStore(store);
    // Heads before their versions in the table (the versions rewritten at its end by the update that chains them), so
    // a batch's delete meets them only through the foreign key's cascade: two levels deep, and 1,499.
    await fillPgStore(db, 'fleet', { chains: 30, depth: 3, expiredHead: true, tag: 'x' });
    await fillPgStore(db, 'fleet', { chains: 1, depth: 1500, expiredHead: true, tag: 'y' });
    await fillPgStore(db, 'fleet', { live: 20, expired: 200, old: 30 });
    const keep = await ids(db, 'fleet', `id LIKE 'live-%' OR id LIKE 'new-%'`);
    const r = await store.run(['run', 'prune', '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json()).toMatchObject({ deleted: 30 * 3 + 1500 + 200 + 30, expired: 231, superseded: 30, cascaded: 30 * 2 + 1499 });
    expect(await ids(db, 'fleet')).toEqual(keep);
  });

  it('batches grow from batchSize while they take less than batchMs, and prune stays exact on expiry and chains', async () => {
    db = await createTestDatabase('pg_grow');
    const fill = async () => {
      await fillPgStore(db, 'fleet', { live: 20, expired: 3000, old: 500 });
      await fillPgStore(db, 'fleet', { chains: 20, depth: 50, expiredHead: true, tag: 'x' });
    };
    // A budget no batch reaches: from 10 roots, each batch twice the last (10, 20, 40, ...), whatever the load.
    const roomy = pgStoreConfig(db, { postgres: { batchSize: 10, batchMs: 10_000 } });
    await initPgStore(roomy);
    await fill();
    const keep = await ids(db, 'fleet', `id LIKE 'live-%' OR id LIKE 'new-%'`);
    const r = await roomy.run(['run', 'prune', '--json']);
    expect(r.code, r.stderr).toBe(0);
    // 3520 roots: 10 + 20 + ... + 2560 = 5110 covers them in 9 full batches; a batch also ends where its range of
    // pages does (the next one then looks at twice as many pages), a few more. At 10 a batch it takes 352 or more.
    expect(r.json()).toMatchObject({ expired: 3020, superseded: 500, cascaded: 20 * 49 });
    expect(r.json().batches).toBeGreaterThanOrEqual(9);
    expect(r.json().batches).toBeLessThanOrEqual(20);
    expect(await ids(db, 'fleet')).toEqual(keep);
    // A budget every batch exceeds: each batch stays at the smallest size, and the result is the same.
    await db.client.query('DELETE FROM fleet.memory');
    await fill();
    const tight = pgStoreConfig(db, { postgres: { batchSize: 10, batchMs: 0.001 } });
    const t = await tight.run(['run', 'prune', '--json']);
    expect(t.code, t.stderr).toBe(0);
    expect(t.json()).toMatchObject({ expired: 3020, superseded: 500, cascaded: 20 * 49 });
    expect(t.json().batches).toBeGreaterThanOrEqual(352);
    expect(await ids(db, 'fleet')).toEqual(keep);
  });

  it('with a hook told each batch before its commit (erase\'s ledger), prune tells it exactly the rows it deletes, chains too', async () => {
    db = await createTestDatabase('pg_hook');
    const store = pgStoreConfig(db);
    await initPgStore(store);
    await fillPgStore(db, 'fleet', { live: 20, expired: 300, old: 40 });
    await fillPgStore(db, 'fleet', { chains: 5, depth: 4, expiredHead: true, tag: 'x' });
    const keep = await ids(db, 'fleet', `id LIKE 'live-%' OR id LIKE 'new-%'`);
    const doomed = await ids(db, 'fleet', `NOT (id LIKE 'live-%' OR id LIKE 'new-%')`);
    const postgres = { url: db.url, schema: 'fleet', lockTimeoutMs: 50, batchSize: 7, batchMs: 20 };
    const session = openPgSession('fleet', postgres);
    const handle = { engine: 'postgres', name: 'fleet', config: { engine: 'postgres', postgres } as never, path: 'postgres schema fleet', schema: '"fleet"', pg: session, close: () => session.end() } as PostgresStoreHandle;
    const told: string[] = [];
    try {
      const config = { prune: { expired: true, supersededAfterDays: 180 } } as never;
      const ctx = { config, log: silentLogger, now: () => Date.now(), signal: new AbortController().signal } as never;
      const r = await prunePg(handle, { ctx, dryRun: false, beforeDelete: (ms) => told.push(...ms.map((m) => m.id)) });
      expect(r).toMatchObject({ deleted: doomed.length, expired: 305, superseded: 40, cascaded: 15 });
    } finally {
      await session.end();
    }
    expect([...told].sort()).toEqual([...doomed].sort());
    expect(await ids(db, 'fleet')).toEqual(keep);
  });

  it('the next batch size: what fits batchMs at the last pace, at most doubled, halved after a lock wait, within bounds', () => {
    expect(nextSize(500, 10, 20, false)).toBe(1000);
    expect(nextSize(500, 2, 20, false)).toBe(1000);
    expect(nextSize(500, 40, 20, false)).toBe(250);
    expect(nextSize(500, 5, 20, true)).toBe(250);
    expect(nextSize(10, 1000, 20, false)).toBe(10);
    expect(nextSize(80_000, 1, 20, false)).toBe(100_000);
  });

  it('kill -9 of prune at several points leaves the store correct, and the next prune finishes it exactly', async () => {
    db = await createTestDatabase('pg_kill');
    const { store, keep } = await chainedPgStore(db, { batchSize: 10 }, { live: 200, expired: 3000, old: 500 }, { chains: 20, depth: 50 });
    const total = async () => Number((await db.client.query<{ n: string }>('SELECT count(*) AS n FROM fleet.memory')).rows[0]!.n);
    const start = await total();
    for (const after of [1, 400, 1500, 3000]) {
      const before = await total();
      if (before === keep.length) break;
      const child = spawn(process.execPath, [CLI, 'run', 'prune', '--config', store.config], { env: { ...process.env, ...store.env, LOG_LEVEL: 'silent' }, stdio: 'ignore' });
      const exited = new Promise((resolve) => child.once('exit', resolve));
      // Killed once it has deleted `after` rows more than the last one left (or when it finishes first).
      let done = false;
      void exited.then(() => (done = true));
      while (!done && before - (await total()) < after) await new Promise((r) => setTimeout(r, 2));
      child.kill('SIGKILL');
      await exited;
      // Whatever was committed is whole: no row superseded by a row that is gone, every kept row still there.
      const dangling = await db.client.query(`SELECT 1 FROM fleet.memory m WHERE superseded_by IS NOT NULL AND NOT EXISTS (SELECT 1 FROM fleet.memory p WHERE p.id = m.superseded_by)`);
      expect(dangling.rowCount).toBe(0);
      expect(await ids(db, 'fleet', `id LIKE 'live-%' OR id LIKE 'new-%'`)).toEqual(keep);
      // No lock left behind: the server releases the killed holder's advisory lock with its connection, once its
      // backend has read the closed socket (in this database: other tests' stores hold theirs in the same cluster).
      const held = async () => (await db.client.query(`SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)).rowCount;
      for (let i = 0; i < 500 && (await held()) !== 0; i++) await new Promise((r) => setTimeout(r, 10));
      expect(await held()).toBe(0);
    }
    expect(await total()).toBeLessThan(start);
    const r = await store.run(['run', 'prune', '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(await ids(db, 'fleet')).toEqual(keep);
  });

  it('a role without the TEMP privilege: prune says so in one line naming it, exit 2, and deletes nothing; a dry run still counts', async () => {
    db = await createTestDatabase('pg_notemp');
    const store = pgStoreConfig(db);
    await initPgStore(store);
    await fillPgStore(db, 'fleet', { live: 5, expired: 7, old: 3 });
    const role = `mw_notemp_${db.name.slice(-10)}`;
    await db.client.query(`CREATE ROLE ${role} LOGIN`);
    try {
      await db.client.query(`REVOKE TEMP ON DATABASE "${db.name}" FROM PUBLIC`);
      await db.client.query(`GRANT USAGE ON SCHEMA fleet TO ${role}`);
      await db.client.query(`GRANT SELECT, DELETE, UPDATE ON ALL TABLES IN SCHEMA fleet TO ${role}`);
      const before = await ids(db, 'fleet');
      const url = new URL(db.url);
      url.username = role;
      const run = (args: string[]) => cliAsync([...args, '--config', store.config], { [URL_VAR]: url.toString() });
      const dry = await run(['run', 'prune', '--dry-run', '--json']);
      expect(dry.code, dry.stderr).toBe(0);
      expect(dry.json()).toMatchObject({ deleted: 7 + 3, expired: 7, superseded: 3 });
      const r = await run(['run', 'prune', '--json']);
      expect(r.code).toBe(2);
      expect(r.stderr.trim().split('\n')).toEqual([expect.stringMatching(/^memory-warden: .*prune: create its walk in pg_temp \(the TEMP privilege on the database\)/)]);
      expect(await ids(db, 'fleet')).toEqual(before);
    } finally {
      await db.drop(); // its grants to the role go with it
      const admin = new pg.Client({ connectionString: serverUrl() });
      await admin.connect();
      await admin.query(`DROP ROLE IF EXISTS ${role}`).finally(() => admin.end());
    }
  });
});
