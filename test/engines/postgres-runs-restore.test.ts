import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/pg.js';
import { assertBuilt } from '../queue/fixtures.js';
import { fillPgStore, ids, initPgStore, pgStoreConfig } from './pg-fixture.js';

/**
 * `<schema>.warden_runs` is memory-warden's record of which scheduled runs the fleet has done, not the store's memory:
 * a snapshot leaves it out and a restore leaves it as it is, so a run done since the snapshot never reads as unclaimed
 * (native PostgreSQL 15).
 */
let db: TestDatabase;
beforeAll(async () => {
  assertBuilt();
  db = await createTestDatabase('pg_runs_restore');
});
afterAll(async () => {
  await db?.drop();
});

it('run snapshot leaves warden_runs out; restore rewinds the memory table and leaves warden_runs as it is', { timeout: 180_000 }, async () => {
  const store = pgStoreConfig(db);
  await initPgStore(store);
  await fillPgStore(db, 'fleet', { live: 4 });
  await db.client.query(`CREATE TABLE fleet.warden_runs (id bigint GENERATED ALWAYS AS IDENTITY UNIQUE, scheduled_run text PRIMARY KEY, job text NOT NULL,
    outcome text NOT NULL, host text NOT NULL, pid integer NOT NULL, started_at timestamptz NOT NULL, finished_at timestamptz, attempts integer NOT NULL DEFAULT 1)`);
  await db.client.query(`INSERT INTO fleet.warden_runs (scheduled_run, job, outcome, host, pid, started_at) VALUES ('prune:1', 'prune', 'ok', 'a', 1, now())`);
  const snap = await store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
  expect(snap.code, snap.stderr).toBe(0);
  const dir = (JSON.parse(snap.stdout) as { dir: string }).dir;
  const manifest = JSON.parse(readFileSync(join(dir, 'tables', 'manifest.json'), 'utf8')) as { tables: { name: string }[] };
  expect(manifest.tables.map((t) => t.name)).toEqual(['memory']);

  const before = await ids(db, 'fleet');
  await fillPgStore(db, 'fleet', { live: 2, tag: 'later' });
  await db.client.query(`INSERT INTO fleet.warden_runs (scheduled_run, job, outcome, host, pid, started_at) VALUES ('prune:2', 'prune', 'ok', 'b', 2, now())`);
  const restored = await store.run(['restore', dir, '--store', 'fleet', '--json']);
  expect(restored.code, restored.stdout + restored.stderr).toBe(0);
  expect(await ids(db, 'fleet')).toEqual(before);
  const runs = await db.client.query<{ scheduled_run: string }>(`SELECT scheduled_run FROM fleet.warden_runs ORDER BY scheduled_run`);
  expect(runs.rows.map((r) => r.scheduled_run)).toEqual(['prune:1', 'prune:2']);
});
