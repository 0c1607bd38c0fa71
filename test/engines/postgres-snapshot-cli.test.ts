/**
 * `run snapshot` and `restore` of a PostgreSQL store (the warden layout), as whole CLI processes on the native
 * PostgreSQL 15 server: the snapshot folder is a proven snapshot holding the store's tables and their holds, pushed to
 * a local target (plain and age-encrypted), restored from that target into a changed store with the undo snapshot
 * taken first; refusals (another store's snapshot, a changed artifact, an erase ledger the layout cannot re-apply on
 * PostgreSQL yet) change nothing; a `run snapshot` killed -9 mid-copy leaves no folder that counts as a snapshot.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateX25519Identity, identityToRecipient } from 'age-encryption';
import pg from 'pg';
import { createTestDatabase, startPgvectorServer, type TestDatabase } from '../helpers/pg.js';
import { assertBuilt, tempDir } from '../queue/fixtures.js';
import { fillPgStore, ids, initPgStore, pgStoreConfig, URL_VAR, type PgStore } from './pg-fixture.js';
import { CLI } from '../helpers/cli.js';
import { verifyBytesGone } from '../../src/engines/postgres/bytes.js';
import { readManifest, HOLDS_FILE } from '../../src/snapshot/manifest.js';
import { loadConfig } from '../../src/config/config.js';
import { snapshotFolders } from '../../src/snapshot/folders.js';
import { eraseKey } from '../../src/erase/key.js';
import { copyHolds, holdsContain, idMac, snapshotHolds, userMac } from '../../src/snapshot/targets/holds.js';
import { gunzipSync } from 'node:zlib';

const dbs: TestDatabase[] = [];
afterAll(async () => {
  for (const db of dbs) await db.drop();
});

async function database(label: string): Promise<TestDatabase> {
  const db = await createTestDatabase(label);
  dbs.push(db);
  return db;
}

/** Every row of the memory table as text, in id order: equal fingerprints, equal tables. */
async function rows(db: TestDatabase, schema = 'fleet'): Promise<string[]> {
  return (await db.client.query<{ r: string }>(`SELECT m::text AS r FROM "${schema}".memory m ORDER BY id`)).rows.map((x) => x.r);
}

function snapshotsOf(store: PgStore): string[] {
  const root = join(store.dir, 'snapshots', 'fleet');
  return existsSync(root) ? readdirSync(root).sort() : [];
}

const config = (store: PgStore) => loadConfig({ file: store.config, env: { ...process.env, ...store.env } });

describe('run snapshot of a PostgreSQL store, pushed to a local target, restored from it', { timeout: 300_000 }, () => {
  beforeAll(() => assertBuilt());

  it.each([false, true])('snapshot (encrypted target: %s) → push → change the store → restore --target → rows equal; undo snapshot first', async (encrypted) => {
    const db = await database('pg_snap_cli');
    const identity = await generateX25519Identity();
    const target = tempDir('pg-snap-target');
    const store = pgStoreConfig(db);
    const file = JSON.parse(readFileSync(store.config, 'utf8'));
    file.snapshot.targets = [{ name: 'nas', type: 'local', path: target, ...(encrypted ? { encrypt: { recipients: [await identityToRecipient(identity)] } } : {}) }];
    writeFileSync(store.config, JSON.stringify(file));
    if (encrypted) store.env.MEMORY_WARDEN_AGE_IDENTITY = identity;
    await initPgStore(store);
    await fillPgStore(db, 'fleet', { live: 40, expired: 5, old: 5, chains: 3, depth: 3 });
    await db.client.query(`UPDATE fleet.memory SET fact = fact || E' tab\\there \\\\N new\\nline' WHERE id LIKE 'live-1%'`);
    const at = await rows(db);

    const snap = await store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
    expect(snap.code, snap.stderr).toBe(0);
    const result = JSON.parse(snap.stdout) as { dir: string; rows: number; targets: { uploaded: string[] }[] };
    expect(result.rows).toBe(at.length);
    expect(result.targets[0]!.uploaded).toHaveLength(1);
    const manifest = readManifest(result.dir);
    expect(manifest.sqlite).toBeUndefined();
    expect(manifest.tables).toMatchObject({ engine: 'postgres', dir: 'tables', source: 'postgres schema fleet', tables: { memory: at.length }, rows: at.length });
    expect(Object.keys(manifest.files).sort()).toEqual(['tables/000.copy', 'tables/manifest.json']);
    expect(manifest.holds?.file).toBe(HOLDS_FILE);
    const cfg = config(store);
    expect(snapshotFolders(cfg, 'fleet').map((s) => s.problem)).toEqual([undefined]);
    // Its holds name the store's ids and its people, as erase asks them.
    const key = eraseKey(cfg);
    expect(await holdsContain(snapshotHolds(result.dir, manifest, key), { ids: new Set([idMac(key, 'live-1')]) }, 'test')).toBe(true);
    expect(await holdsContain(snapshotHolds(result.dir, manifest, key), { ids: new Set([idMac(key, 'nobody')]), user: userMac(key, 'user') }, 'test')).toBe(true);
    expect(await holdsContain(snapshotHolds(result.dir, manifest, key), { ids: new Set([idMac(key, 'nobody')]), user: userMac(key, 'someone else') }, 'test')).toBe(false);
    // Made from the rows as they streamed into the artifact: the same holds as made by reading the artifact back.
    const unzipped = async (source: AsyncIterable<Uint8Array>) => {
      const parts: Uint8Array[] = [];
      for await (const p of source) parts.push(p);
      return gunzipSync(Buffer.concat(parts)).toString('utf8');
    };
    expect(await unzipped(snapshotHolds(result.dir, manifest, key))).toBe(await unzipped(copyHolds(result.dir, manifest, key)));
    if (encrypted) {
      const stored = readdirSync(join(target, 'fleet', manifest.name!, 'tables'));
      expect(stored.every((f) => f.endsWith('.age')), stored.join(', ')).toBe(true);
      const plain = readFileSync(join(result.dir, 'tables', '000.copy'));
      expect(readFileSync(join(target, 'fleet', manifest.name!, 'tables', stored.find((f) => f.startsWith('000'))!)).includes(plain.subarray(0, 40))).toBe(false);
    }

    // The snapshots commands read files: they run on a PostgreSQL store's snapshots as on any.
    const listed = await store.run(['snapshots', 'list', '--store', 'fleet', '--json']);
    expect(listed.code, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout)).toMatchObject({ snapshots: [{ name: manifest.name, rows: at.length, problem: null }] });
    const pushed = await store.run(['snapshots', 'push', '--store', 'fleet', '--json']);
    expect(pushed.code, pushed.stderr).toBe(0);
    expect(JSON.parse(pushed.stdout)).toMatchObject({ targets: [{ uploaded: [] }] });
    const verified = await store.run(['snapshots', 'verify', '--target', 'nas', '--store', 'fleet']);
    expect(verified.code, verified.stdout + verified.stderr).toBe(0);

    // The store changes: rows gone, rows new, rows rewritten.
    await db.client.query(`DELETE FROM fleet.memory WHERE id LIKE 'live-2%'`);
    await fillPgStore(db, 'fleet', { live: 7, tag: 'later' });
    await db.client.query(`UPDATE fleet.memory SET fact = 'rewritten' WHERE id = 'live-1'`);
    const changed = await rows(db);
    expect(changed).not.toEqual(at);

    const restored = await store.run(['restore', 'latest', '--target', 'nas', '--store', 'fleet', '--now', '2030-01-01T00:00:00Z', '--json']);
    expect(restored.code, restored.stderr).toBe(0);
    const r = JSON.parse(restored.stdout) as { undo: string; rows: number; steps: string[]; eraseLedger: string };
    expect(await rows(db)).toEqual(at);
    expect(r.rows).toBe(at.length);
    expect(r.undo).toMatch(/-pre-restore$/);
    expect(readManifest(r.undo)).toMatchObject({ reason: 'pre-restore', tables: { rows: changed.length } });
    expect(r.steps.join('\n')).toMatch(/re-applied the erase ledger: nothing was ever erased/);
    // The view and the constraints came back with the table: the store checks healthy, and prune still cascades.
    const check = await store.run(['check', '--store', 'fleet', '--json']);
    expect(check.code, check.stdout + check.stderr).toBe(0);

    // The undo snapshot restores the state the restore replaced.
    const undone = await store.run(['run', 'restore', r.undo, '--store', 'fleet', '--now', '2030-01-01T00:01:00Z']);
    expect(undone.code, undone.stderr).toBe(0);
    expect(await rows(db)).toEqual(changed);
  });

  it('refused, exit 2, nothing changed: another store\'s snapshot; a changed artifact', async () => {
    const db = await database('pg_snap_refuse');
    const store = pgStoreConfig(db);
    const cfgFile = JSON.parse(readFileSync(store.config, 'utf8'));
    cfgFile.stores.other = { engine: 'postgres', postgres: { url: `\${${URL_VAR}}`, schema: 'other' } };
    writeFileSync(store.config, JSON.stringify(cfgFile));
    await initPgStore(store);
    expect((await store.run(['init', '--store', 'other'])).code).toBe(0);
    await fillPgStore(db, 'fleet', { live: 12, old: 3 });
    await fillPgStore(db, 'other', { live: 4, tag: 'o' });
    const snap = await store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
    expect(snap.code, snap.stderr).toBe(0);
    const dir = (JSON.parse(snap.stdout) as { dir: string }).dir;
    await db.client.query(`DELETE FROM fleet.memory WHERE id LIKE 'live-1%'`);
    const before = { fleet: await rows(db, 'fleet'), other: await rows(db, 'other'), snapshots: snapshotsOf(store) };
    const unchanged = async () => {
      expect(await rows(db, 'fleet')).toEqual(before.fleet);
      expect(await rows(db, 'other')).toEqual(before.other);
      expect(snapshotsOf(store)).toEqual(before.snapshots);
      expect((await db.client.query(`SELECT nspname FROM pg_namespace WHERE nspname LIKE '%mw_restore'`)).rows).toEqual([]);
    };
    const refused = async (args: string[], message: RegExp) => {
      const r = await store.run(args);
      const lines = r.stderr.split('\n').filter((l) => l.startsWith('memory-warden:'));
      expect(r.code, r.stderr).toBe(2);
      expect(lines, r.stderr).toHaveLength(1);
      expect(lines[0]).toMatch(message);
      await unchanged();
    };

    await refused(['restore', dir, '--store', 'other'], /is a snapshot of store "fleet", not "other"/);

    // A dry run says what it would do, and does nothing.
    const dry = await store.run(['restore', dir, '--store', 'fleet', '--dry-run', '--without-erase-ledger']);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(/would replace the tables of postgres schema fleet with the memory: 18 row\(s\)/);
    await unchanged();

    // A byte of the table's COPY file changed: the checksums refuse it before anything is touched.
    const file = join(dir, 'tables', '000.copy');
    const bytes = readFileSync(file);
    bytes[10] = bytes[10]! ^ 1;
    writeFileSync(file, bytes);
    await refused(['restore', dir, '--store', 'fleet', '--without-erase-ledger'], /tables\/000\.copy does not match its checksum/);
  });

  it.each(['the local snapshot', 'the copy on a target', 'a ledger entry only (the person erased by --ids)'])('an erased person stays erased whatever restores: erase after the snapshot, restore %s: her rows stay out, everyone else\'s come back', async (from) => {
    const db = await database('pg_snap_erased');
    const target = tempDir('pg-snap-erased-target');
    const store = pgStoreConfig(db);
    const file = JSON.parse(readFileSync(store.config, 'utf8'));
    file.snapshot.targets = [{ name: 'nas', type: 'local', path: target }];
    writeFileSync(store.config, JSON.stringify(file));
    await initPgStore(store);
    await fillPgStore(db, 'fleet', { live: 20, old: 3 });
    await db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) SELECT 'carol-' || g, 'carol', 'Carol lives at ' || g || ' Elm Street', 'message' FROM generate_series(1, 5) g`);
    await db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source, superseded_by) VALUES ('carol-old', 'carol', 'Carol lived at 9 Oak Road', 'message', 'carol-1')`);
    const snap = await store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
    expect(snap.code, snap.stderr).toBe(0);
    const dir = (JSON.parse(snap.stdout) as { dir: string }).dir;
    const everyoneElse = await rows(db, 'fleet').then((r) => r.filter((line) => !line.includes('carol')));

    const erase = from.startsWith('a ledger')
      ? await store.run(['erase', '--store', 'fleet', '--ids', 'carol-1', 'carol-2', 'carol-3', 'carol-4', 'carol-5', 'carol-old', '--json'])
      : await store.run(['erase', '--store', 'fleet', '--user', 'carol', '--json']);
    // The snapshot (and its copy on the target) still holds her: erase says so, exit 1, and leaves them.
    expect(erase.code, erase.stdout + erase.stderr).toBe(1);
    expect(JSON.parse(erase.stdout)).toMatchObject({ memories: 6, snapshots: { found: expect.arrayContaining([dir]) } });
    expect(await ids(db, 'fleet', `subject = 'carol'`)).toEqual([]);
    await fillPgStore(db, 'fleet', { live: 2, tag: 'after' });

    const restored = from === 'the copy on a target'
      ? await store.run(['restore', 'latest', '--target', 'nas', '--store', 'fleet', '--json'])
      : await store.run(['restore', dir, '--store', 'fleet', '--json']);
    expect(restored.code, restored.stdout + restored.stderr).toBe(0);
    const r = JSON.parse(restored.stdout) as { erasedKeptOut?: number; steps: string[] };
    expect(r.steps.join('\n')).toMatch(/erase ledger/);
    // Not one of her rows is back, whatever chain they were in; every other row of the snapshot is.
    expect(await ids(db, 'fleet', `subject = 'carol' OR id LIKE 'carol%' OR fact LIKE '%Elm Street%' OR fact LIKE '%Oak Road%'`)).toEqual([]);
    expect(await rows(db, 'fleet')).toEqual(everyoneElse);
    // Nor any byte of her texts in the restored tables' files: they were loaded and deleted in the restore's
    // transaction, and the tables rewritten after it.
    const needles = [...[1, 2, 3, 4, 5].map((g) => `Carol lives at ${g} Elm Street`), 'Carol lived at 9 Oak Road'];
    expect((await verifyBytesGone(db.client, { schema: 'fleet', tables: ['memory'], needles })).verdict).toBe('clean');
    const check = await store.run(['check', '--store', 'fleet', '--json']);
    expect(check.code, check.stdout + check.stderr).toBe(0);
  });

  it('a restore whose rewrite cannot clear the erased rows (another client\'s snapshot older than them, held throughout) says NOT DONE and exits 1, as erase does while a copy remains', async () => {
    const db = await database('pg_snap_erased_held');
    const store = pgStoreConfig(db);
    await initPgStore(store);
    await fillPgStore(db, 'fleet', { live: 5 });
    await db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) SELECT 'carol-' || g, 'carol', 'Carol lives at ' || g || ' Elm Street', 'message' FROM generate_series(1, 3) g`);
    const snap = await store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
    expect(snap.code, snap.stderr).toBe(0);
    const dir = (JSON.parse(snap.stdout) as { dir: string }).dir;
    expect((await store.run(['erase', '--store', 'fleet', '--user', 'carol'])).code).toBe(1);
    // A long read (an agent's report, a pg_dump) whose snapshot predates everything the restore deletes.
    const reader = new pg.Client({ connectionString: db.url });
    await reader.connect();
    try {
      await reader.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await reader.query('SELECT 1');
      const restored = await store.run(['restore', dir, '--store', 'fleet', '--json']);
      expect(restored.code, restored.stdout + restored.stderr).toBe(1);
      const r = JSON.parse(restored.stdout) as { erasedLeft?: string; steps: string[] };
      expect(r.erasedLeft).toMatch(/run erase again for the same person/);
      expect(r.steps.join('\n')).toMatch(/FOUND/);
      // Her rows are out of the table all the same; only the bytes the database keeps for the reader remain.
      expect(await ids(db, 'fleet', `subject = 'carol'`)).toEqual([]);
    } finally {
      await reader.query('ROLLBACK').catch(() => {});
      await reader.end();
    }
    // The reader gone, erase clears them: exit 0 would need the snapshot gone too; the store's bytes are clean.
    const again = await store.run(['erase', '--store', 'fleet', '--user', 'carol', '--json']);
    expect(JSON.parse(again.stdout)).toMatchObject({ bytes: { verdict: 'clean' } });
  });

  it('a restore that re-applies the erase ledger waits for an agent\'s lock at the swap as any restore does (the erase\'s short lock_timeout ends with it)', async () => {
    const db = await database('pg_snap_erased_wait');
    const store = pgStoreConfig(db, { postgres: { lockTimeoutMs: 50 } });
    await initPgStore(store);
    await fillPgStore(db, 'fleet', { live: 10 });
    await db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) VALUES ('dana-1', 'dana', 'Dana lives at 4 Birch Lane', 'message')`);
    const snap = await store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
    expect(snap.code, snap.stderr).toBe(0);
    const dir = (JSON.parse(snap.stdout) as { dir: string }).dir;
    expect((await store.run(['erase', '--store', 'fleet', '--user', 'dana'])).code).toBe(1); // the snapshot holds her
    // An agent's transaction holds the table: the swap's DROP must wait for it, well past the 50 ms erase allows.
    const agent = new pg.Client({ connectionString: db.url });
    await agent.connect();
    try {
      await agent.query('BEGIN');
      await agent.query('LOCK TABLE fleet.memory IN ACCESS SHARE MODE');
      let exited = false;
      const restoring = store.run(['restore', dir, '--store', 'fleet', '--json']).finally(() => (exited = true));
      // Released only once the restore is seen waiting on it (or has ended: without the wait it fails at once).
      while (!exited) {
        const waiting = await db.client.query(`SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'memory' AND NOT l.granted`);
        if (waiting.rowCount) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      if (!exited) await new Promise((r) => setTimeout(r, 300));
      await agent.query('COMMIT');
      const restored = await restoring;
      expect(restored.code, restored.stdout + restored.stderr).toBe(0);
    } finally {
      await agent.end();
    }
    expect(await ids(db, 'fleet', `subject = 'dana'`)).toEqual([]);
    expect(await ids(db, 'fleet')).toHaveLength(10);
  });

  it('kill -9 of run snapshot mid-copy leaves no folder that counts as a snapshot; the next run removes the partial and succeeds', async () => {
    const db = await database('pg_snap_kill');
    const store = pgStoreConfig(db);
    await initPgStore(store);
    await db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) SELECT 'big-' || g, 'user', repeat('fact ' || g || ' ', 40), 'message' FROM generate_series(1, 300000) g`);
    const root = join(store.dir, 'snapshots', 'fleet');
    const child = spawn(process.execPath, [CLI, 'run', 'snapshot', '--store', 'fleet', '--config', store.config], { env: { ...process.env, LOG_LEVEL: 'silent', ...store.env }, stdio: 'ignore' });
    // Killed once the COPY file is being written inside the partial folder.
    const deadline = Date.now() + 120_000;
    let copying = false;
    while (!copying && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
      const partial = existsSync(root) ? readdirSync(root).find((n) => n.startsWith('.partial-')) : undefined;
      copying = partial !== undefined && existsSync(join(root, partial, 'tables', '000.copy')) && readFileSync(join(root, partial, 'tables', '000.copy')).length > 0;
    }
    expect(copying).toBe(true);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    expect(readdirSync(root).filter((n) => n.startsWith('.partial-'))).toHaveLength(1);
    expect(snapshotFolders(config(store), 'fleet')).toEqual([]);
    const next = await store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
    expect(next.code, next.stderr).toBe(0);
    const r = JSON.parse(next.stdout) as { removedPartials: string[]; rows: number };
    expect(r.removedPartials).toHaveLength(1);
    expect(r.rows).toBe(300000);
    expect(readdirSync(root).filter((n) => n.startsWith('.partial-'))).toEqual([]);
    expect(snapshotFolders(config(store), 'fleet').map((s) => s.problem)).toEqual([undefined]);
  });

  it('agents writing during run snapshot: the artifact holds one instant (every pair an agent wrote or deleted in one transaction, whole or absent)', async () => {
    const db = await database('pg_snap_agents');
    const store = pgStoreConfig(db);
    await initPgStore(store);
    await db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) SELECT 'bulk-' || g, 'user', repeat('fact ' || g || ' ', 30), 'message' FROM generate_series(1, 80000) g`);
    const agent = new pg.Client({ connectionString: db.url });
    await agent.connect();
    let running = true;
    let pairs = 0;
    // The agent: each transaction adds a pair (the older superseded by the newer) and deletes the oldest pair left.
    const writes = (async () => {
      while (running) {
        await agent.query('BEGIN');
        await agent.query(`INSERT INTO fleet.memory (id, subject, fact, source) VALUES ($1, 'user', 'new', 'message')`, [`pair-${pairs}-b`]);
        await agent.query(`INSERT INTO fleet.memory (id, subject, fact, source, superseded_by) VALUES ($1, 'user', 'old', 'message', $2)`, [`pair-${pairs}-a`, `pair-${pairs}-b`]);
        if (pairs >= 5) await agent.query(`DELETE FROM fleet.memory WHERE id = $1`, [`pair-${pairs - 5}-b`]); // its -a goes by cascade
        await agent.query('COMMIT');
        pairs++;
      }
    })();
    try {
      while (pairs < 3) await new Promise((r) => setTimeout(r, 5));
      const snap = await store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
      expect(snap.code, snap.stderr).toBe(0);
      const during = pairs;
      running = false;
      await writes;
      const dir = (JSON.parse(snap.stdout) as { dir: string }).dir;
      const found = readFileSync(join(dir, 'tables', '000.copy'), 'utf8').split('\n').map((l) => l.split('\t')[0]!).filter((id) => id.startsWith('pair-'));
      const halves = new Map<string, string[]>();
      for (const id of found) {
        const [, n, half] = id.split('-');
        halves.set(n!, [...(halves.get(n!) ?? []), half!]);
      }
      expect(halves.size).toBeGreaterThan(0);
      for (const [n, h] of halves) expect(h.sort(), `pair ${n}`).toEqual(['a', 'b']);
      // Five pairs live at every commit: the artifact shows exactly the state after one of them.
      expect(halves.size).toBe(5);
      expect(during).toBeGreaterThan(3);
    } finally {
      running = false;
      await writes.catch(() => {});
      await agent.end();
    }
  });

  it('on PGlite (PostgreSQL 18 with pgvector): a vector table beside the memory table is snapshotted and restored with it', async () => {
    const server = await startPgvectorServer();
    const client = new pg.Client({ connectionString: server.url });
    await client.connect();
    try {
      const store = pgStoreConfig({ url: server.url, name: 'pglite', client, drop: async () => {} });
      await initPgStore(store);
      await fillPgStore({ url: server.url, name: 'pglite', client, drop: async () => {} }, 'fleet', { live: 30, old: 4 });
      await client.query(`CREATE TABLE fleet.memory_vec (id text PRIMARY KEY REFERENCES fleet.memory (id) ON DELETE CASCADE, embedding vector(3) NOT NULL)`);
      await client.query(`INSERT INTO fleet.memory_vec SELECT id, format('[%s,%s,1]', length(id), length(fact))::vector FROM fleet.memory`);
      const state = async () => ({
        memory: (await client.query<{ r: string }>(`SELECT m::text AS r FROM fleet.memory m ORDER BY id`)).rows.map((x) => x.r),
        vec: (await client.query<{ r: string }>(`SELECT v::text AS r FROM fleet.memory_vec v ORDER BY id`)).rows.map((x) => x.r),
      });
      const at = await state();
      const snap = await store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
      expect(snap.code, snap.stderr).toBe(0);
      expect(readManifest((JSON.parse(snap.stdout) as { dir: string }).dir).tables?.tables).toEqual({ memory: at.memory.length, memory_vec: at.vec.length });
      await client.query(`DELETE FROM fleet.memory WHERE id LIKE 'live-1%'`);
      await client.query(`UPDATE fleet.memory_vec SET embedding = '[0,0,0]'`);
      const restored = await store.run(['restore', 'latest', '--store', 'fleet', '--now', '2030-01-01T00:00:00Z']);
      expect(restored.code, restored.stderr).toBe(0);
      expect(await state()).toEqual(at);
      const nearest = await client.query<{ id: string }>(`SELECT id FROM fleet.memory_vec ORDER BY embedding <-> '[6,20,1]' LIMIT 1`);
      expect(nearest.rows).toHaveLength(1);
    } finally {
      await client.end();
      await server.stop();
    }
  });
});
