/**
 * A PostgreSQL store with Qdrant collections beside it: `run snapshot` takes the tables at one instant and every
 * collection's snapshot into one folder, proven by one manifest, pushed (age-encrypted) and verified like any; `restore`
 * brings both back together (the undo snapshot of both first), the erase ledger re-applied to the restored tables and
 * the restored collections; erase finds a person in such a snapshot. Whole CLI processes on the native PostgreSQL 15
 * server and the Qdrant-compatible test server (or a real Qdrant under QDRANT_URL). kill -9 mid-snapshot leaves no
 * snapshot; kill -9 mid-restore (collections recovered, tables not yet swapped) leaves a journal that check reports,
 * writers respect, and the next restore finishes.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { generateX25519Identity, identityToRecipient } from 'age-encryption';
import pg from 'pg';
import { createTestDatabase, type TestDatabase } from '../helpers/pg.js';
import { assertBuilt, tempDir } from '../queue/fixtures.js';
import { qdrantTarget, startFaultProxy, type QdrantTarget } from '../helpers/qdrant-server.js';
import { CLI } from '../helpers/cli.js';
import { NOTES_DIR } from '../../src/snapshot/server-snapshots.js';
import { fillPgStore, ids, initPgStore, pgStoreConfig, URL_VAR, type PgStore } from './pg-fixture.js';
import { readManifest } from '../../src/snapshot/manifest.js';
import { loadConfig } from '../../src/config/config.js';
import { snapshotFolders } from '../../src/snapshot/folders.js';
import { journalPath } from '../../src/snapshot/journal.js';
import { finishInterruptedRestores, restoreSnapshot } from '../../src/snapshot/restore.js';
import { silentLogger } from '../../src/log/logger.js';

const dbs: TestDatabase[] = [];
const qs: QdrantTarget[] = [];
afterAll(async () => {
  for (const db of dbs) await db.drop();
});
afterEach(async () => {
  for (const q of qs.splice(0)) {
    try {
      q.assertConforms();
    } finally {
      await q.close();
    }
  }
});

interface Fixture {
  db: TestDatabase;
  q: QdrantTarget;
  coll: string;
  /** Every collection of the store, `coll` first. */
  colls: string[];
  store: PgStore;
}

/** A PostgreSQL store `fleet` with one Qdrant collection beside it (and a local target `nas`, encrypted when asked). */
async function fixture(label: string, opts: { encryptTo?: string; lockTimeoutMs?: number; collections?: number } = {}): Promise<Fixture> {
  const db = await createTestDatabase(label);
  dbs.push(db);
  const q = await qdrantTarget();
  qs.push(q);
  const colls = Array.from({ length: opts.collections ?? 1 }, (_, i) => q.name(`fleet_mem${i}`));
  for (const c of colls) await q.createCollection(c);
  const coll = colls[0]!;
  const store = pgStoreConfig(db, {
    extra: {
      stores: {
        fleet: {
          engine: 'postgres', postgres: { url: `\${${URL_VAR}}`, schema: 'fleet', ...(opts.lockTimeoutMs ? { lockTimeoutMs: opts.lockTimeoutMs } : {}) },
          qdrant: { url: q.url, ...(q.apiKey ? { apiKey: '${QDRANT_API_KEY}' } : {}), collections: colls },
        },
      },
    },
  });
  if (q.apiKey) store.env.QDRANT_API_KEY = q.apiKey;
  const file = JSON.parse(readFileSync(store.config, 'utf8'));
  file.snapshot.targets = [{ name: 'nas', type: 'local', path: tempDir('pg-q-target'), ...(opts.encryptTo ? { encrypt: { recipients: [opts.encryptTo] } } : {}) }];
  writeFileSync(store.config, JSON.stringify(file));
  await initPgStore(store);
  return { db, q, coll, colls, store };
}

let pointSeq = 1;

/** One point per row of the store that has none yet in each collection, payload memory_id + text, as an agent writes them. */
async function pointRows(f: Fixture, where = 'true'): Promise<void> {
  for (const coll of f.colls) {
    const have = new Set((await f.q.points(coll)).map((p) => String(p.payload.memory_id)));
    const rows = (await f.db.client.query<{ id: string; fact: string }>(`SELECT id, fact FROM fleet.memory WHERE ${where} ORDER BY id`)).rows.filter((r) => !have.has(r.id));
    for (let i = 0; i < rows.length; i += 200) {
      await f.q.upsert(coll, rows.slice(i, i + 200).map((r) => ({ id: pointSeq++, payload: { memory_id: r.id, text: r.fact } })));
    }
  }
}

/** Every row of the memory table as text, in id order. */
async function rows(f: Fixture): Promise<string[]> {
  return (await f.db.client.query<{ r: string }>(`SELECT m::text AS r FROM fleet.memory m ORDER BY id`)).rows.map((x) => x.r);
}

/** Every point as `memory_id text`, sorted: equal lists, equal collections (for what the store reads of them). */
async function points(f: Fixture, coll = f.coll): Promise<string[]> {
  return (await f.q.points(coll)).map((p) => `${String(p.payload.memory_id)} ${String(p.payload.text)}`).sort();
}

const config = (store: PgStore) => loadConfig({ file: store.config, env: { ...process.env, ...store.env } });

function snapshotRoot(store: PgStore): string {
  return join(store.dir, 'snapshots', 'fleet');
}

describe('a PostgreSQL store with Qdrant beside it: coordinated snapshots and restore', { timeout: 300_000 }, () => {
  beforeAll(() => assertBuilt());

  it('snapshot (tables and collection in one folder, one manifest) → encrypted push → verify → change both stores → restore --target: rows and points back; the undo snapshot holds both and undoes it', async () => {
    const identity = await generateX25519Identity();
    const f = await fixture('pg_q_snap', { encryptTo: await identityToRecipient(identity) });
    f.store.env.MEMORY_WARDEN_AGE_IDENTITY = identity;
    await fillPgStore(f.db, 'fleet', { live: 40, expired: 5, old: 5 });
    await pointRows(f);
    const at = { rows: await rows(f), points: await points(f) };

    const snap = await f.store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
    expect(snap.code, snap.stderr).toBe(0);
    const result = JSON.parse(snap.stdout) as { dir: string; rows: number; points: Record<string, number>; targets: { uploaded: string[] }[] };
    expect(result.rows).toBe(at.rows.length);
    expect(result.points).toEqual({ [f.coll]: at.points.length });
    expect(result.targets[0]!.uploaded).toHaveLength(1);
    const manifest = readManifest(result.dir);
    expect(manifest.tables).toMatchObject({ engine: 'postgres', rows: at.rows.length });
    expect(manifest.qdrant).toMatchObject([{ collection: f.coll, file: `qdrant/0-${f.coll}.snapshot`, points: at.points.length }]);
    expect(Object.keys(manifest.files).sort()).toEqual([`qdrant/0-${f.coll}.snapshot`, 'tables/000.copy', 'tables/manifest.json']);
    expect(manifest.skewMs).toBeGreaterThanOrEqual(0);
    expect(snapshotFolders(config(f.store), 'fleet').map((s) => s.problem)).toEqual([undefined]);
    // Nothing of it is left on the Qdrant server.
    expect(await f.q.snapshotNames(f.coll)).toEqual([]);

    const listed = await f.store.run(['snapshots', 'list', '--store', 'fleet', '--verify', '--json']);
    expect(listed.code, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout)).toMatchObject({ snapshots: [{ name: manifest.name, rows: at.rows.length, points: { [f.coll]: at.points.length }, problem: null }] });
    const pushed = await f.store.run(['snapshots', 'push', '--store', 'fleet', '--json']);
    expect(pushed.code, pushed.stderr).toBe(0);
    const verified = await f.store.run(['snapshots', 'verify', '--target', 'nas', '--store', 'fleet']);
    expect(verified.code, verified.stdout + verified.stderr).toBe(0);

    // Both stores change: rows and their points gone, new ones, a text rewritten in both.
    await f.db.client.query(`DELETE FROM fleet.memory WHERE id LIKE 'live-2%'`);
    await fillPgStore(f.db, 'fleet', { live: 7, tag: 'later' });
    await f.db.client.query(`UPDATE fleet.memory SET fact = 'rewritten' WHERE id = 'live-1'`);
    const survivors = new Set(await ids(f.db, 'fleet'));
    const kept = (await f.q.points(f.coll)).filter((p) => survivors.has(String(p.payload.memory_id)));
    await deletePointsNotIn(f, survivors);
    await f.q.upsert(f.coll, kept.filter((p) => p.payload.memory_id === 'live-1').map((p) => ({ id: p.id, payload: { ...p.payload, text: 'rewritten' } })));
    await pointRows(f);
    const changed = { rows: await rows(f), points: await points(f) };
    expect(changed.rows).not.toEqual(at.rows);
    expect(changed.points).not.toEqual(at.points);

    const restored = await f.store.run(['restore', 'latest', '--target', 'nas', '--store', 'fleet', '--now', '2030-01-01T00:00:00Z', '--json']);
    expect(restored.code, restored.stdout + restored.stderr).toBe(0);
    const r = JSON.parse(restored.stdout) as { undo: string; rows: number; points: Record<string, number>; steps: string[] };
    expect(await rows(f)).toEqual(at.rows);
    expect(await points(f)).toEqual(at.points);
    expect(r.points).toEqual({ [f.coll]: at.points.length });
    expect(r.steps.join('\n')).toMatch(new RegExp(`recovered Qdrant collection ${f.coll}`));
    expect(readManifest(r.undo)).toMatchObject({ reason: 'pre-restore', tables: { rows: changed.rows.length }, qdrant: [{ collection: f.coll, points: changed.points.length }] });
    expect(existsSync(journalPath(join(snapshotRoot(f.store), '.restore')))).toBe(false);
    expect(await f.q.snapshotNames(f.coll)).toEqual([]);
    const check = await f.store.run(['check', '--store', 'fleet', '--json']);
    expect(check.code, check.stdout + check.stderr).toBe(0);

    // The undo snapshot puts both stores back as the restore found them.
    const undone = await f.store.run(['run', 'restore', r.undo, '--store', 'fleet', '--now', '2030-01-01T00:01:00Z']);
    expect(undone.code, undone.stdout + undone.stderr).toBe(0);
    expect(await rows(f)).toEqual(changed.rows);
    expect(await points(f)).toEqual(changed.points);
  });

  it('retention keeps the newest snapshot.keep of them, collection snapshots and all, here and on the target', async () => {
    const f = await fixture('pg_q_keep');
    const file = JSON.parse(readFileSync(f.store.config, 'utf8'));
    file.snapshot.keep = 2;
    file.snapshot.targets[0].keep = 2;
    writeFileSync(f.store.config, JSON.stringify(file));
    await fillPgStore(f.db, 'fleet', { live: 10 });
    await pointRows(f);
    const names: string[] = [];
    const pruned: string[][] = [];
    for (const at of ['2030-01-01T02:00:00Z', '2030-01-02T02:00:00Z', '2030-01-03T02:00:00Z']) {
      const snap = await f.store.run(['run', 'snapshot', '--store', 'fleet', '--now', at, '--json']);
      expect(snap.code, snap.stderr).toBe(0);
      const r = JSON.parse(snap.stdout) as { name: string; pruned: string[] };
      names.push(r.name);
      pruned.push(r.pruned);
    }
    expect(pruned).toEqual([[], [], [names[0]]]);
    expect(snapshotFolders(config(f.store), 'fleet').map((s) => s.name)).toEqual(names.slice(1));
    expect(readdirSync(snapshotRoot(f.store)).filter((n) => n.startsWith('2030'))).toEqual(names.slice(1));
    const target = JSON.parse(readFileSync(f.store.config, 'utf8')).snapshot.targets[0].path as string;
    expect(readdirSync(join(target, 'fleet')).filter((n) => n.startsWith('2030')).sort()).toEqual(names.slice(1));
    expect(await f.q.snapshotNames(f.coll)).toEqual([]);
  });

  it('agents writing rows and points during run snapshot: the tables hold one instant, the collection its own, both in the folder; restored, each is exactly what the snapshot holds', async () => {
    const f = await fixture('pg_q_agents');
    await f.db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) SELECT 'bulk-' || g, 'user', repeat('fact ' || g || ' ', 30), 'message' FROM generate_series(1, 40000) g`);
    await pointRows(f, `id LIKE 'bulk-1%'`);
    const agent = new pg.Client({ connectionString: f.db.url });
    await agent.connect();
    let running = true;
    let pairs = 0;
    // The agent: each transaction adds a pair (the older superseded by the newer) and deletes the oldest pair left; a
    // point for each new row after its commit.
    const writes = (async () => {
      while (running) {
        await agent.query('BEGIN');
        await agent.query(`INSERT INTO fleet.memory (id, subject, fact, source) VALUES ($1, 'user', 'new', 'message')`, [`pair-${pairs}-b`]);
        await agent.query(`INSERT INTO fleet.memory (id, subject, fact, source, superseded_by) VALUES ($1, 'user', 'old', 'message', $2)`, [`pair-${pairs}-a`, `pair-${pairs}-b`]);
        if (pairs >= 5) await agent.query(`DELETE FROM fleet.memory WHERE id = $1`, [`pair-${pairs - 5}-b`]);
        await agent.query('COMMIT');
        await f.q.upsert(f.coll, [{ id: 1_000_000 + pairs, payload: { memory_id: `pair-${pairs}-b`, text: 'new' } }]);
        pairs++;
      }
    })();
    let dir: string;
    try {
      while (pairs < 3) await new Promise((r) => setTimeout(r, 5));
      const snap = await f.store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
      expect(snap.code, snap.stderr).toBe(0);
      dir = (JSON.parse(snap.stdout) as { dir: string }).dir;
      expect(pairs).toBeGreaterThan(3);
    } finally {
      running = false;
      await writes.catch(() => {});
      await agent.end();
    }
    const manifest = readManifest(dir);
    const copied = readFileSync(join(dir, 'tables', '000.copy'), 'utf8').split('\n').filter(Boolean);
    const found = copied.map((l) => l.split('\t')[0]!).filter((id) => id.startsWith('pair-'));
    const halves = new Map<string, string[]>();
    for (const id of found) {
      const [, n, half] = id.split('-');
      halves.set(n!, [...(halves.get(n!) ?? []), half!]);
    }
    for (const [n, h] of halves) expect(h.sort(), `pair ${n}`).toEqual(['a', 'b']);
    expect(halves.size).toBe(5);
    expect(manifest.qdrant).toHaveLength(1);

    // Restored into the store the agent left: the rows are the artifact's, the points the collection snapshot's.
    const restored = await f.store.run(['restore', dir, '--store', 'fleet', '--now', '2030-01-01T00:00:00Z', '--json']);
    expect(restored.code, restored.stdout + restored.stderr).toBe(0);
    expect((await ids(f.db, 'fleet')).length).toBe(copied.length);
    expect(new Set(await ids(f.db, 'fleet'))).toEqual(new Set(copied.map((l) => l.split('\t')[0]!)));
    expect((await f.q.points(f.coll)).length).toBe((JSON.parse(restored.stdout) as { points: Record<string, number> }).points[f.coll]);
  });

  it.each(['the local snapshot', 'the copy on a target'])('an erased person stays erased: erase finds her in the snapshot (rows and points), restore of %s keeps her rows and points out, everyone else\'s come back', async (from) => {
    const f = await fixture('pg_q_erased');
    await fillPgStore(f.db, 'fleet', { live: 20, old: 3 });
    await f.db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) SELECT 'carol-' || g, 'carol', 'Carol lives at ' || g || ' Elm Street', 'message' FROM generate_series(1, 5) g`);
    await f.db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source, superseded_by) VALUES ('carol-old', 'carol', 'Carol lived at 9 Oak Road', 'message', 'carol-1')`);
    await pointRows(f);
    const snap = await f.store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
    expect(snap.code, snap.stderr).toBe(0);
    const dir = (JSON.parse(snap.stdout) as { dir: string }).dir;
    const everyoneElse = { rows: (await rows(f)).filter((l) => !l.includes('carol')), points: (await points(f)).filter((p) => !p.includes('carol') && !p.includes('Carol')) };

    const erase = await f.store.run(['erase', '--store', 'fleet', '--user', 'carol', '--json']);
    // The snapshot (and its copy on the target) still hold her: erase says so, exit 1, and leaves them.
    expect(erase.code, erase.stdout + erase.stderr).toBe(1);
    expect(JSON.parse(erase.stdout)).toMatchObject({ memories: 6, snapshots: { found: expect.arrayContaining([dir]) } });
    expect(await ids(f.db, 'fleet', `subject = 'carol'`)).toEqual([]);
    expect((await points(f)).filter((p) => p.includes('Carol'))).toEqual([]);

    const restored = from === 'the copy on a target'
      ? await f.store.run(['restore', 'latest', '--target', 'nas', '--store', 'fleet', '--json'])
      : await f.store.run(['restore', dir, '--store', 'fleet', '--json']);
    expect(restored.code, restored.stdout + restored.stderr).toBe(0);
    const r = JSON.parse(restored.stdout) as { erasedKeptOut: number; steps: string[] };
    expect(r.erasedKeptOut).toBe(6);
    expect(await ids(f.db, 'fleet', `subject = 'carol' OR id LIKE 'carol%' OR fact LIKE '%Elm Street%' OR fact LIKE '%Oak Road%'`)).toEqual([]);
    expect(await rows(f)).toEqual(everyoneElse.rows);
    // Her points were in the collection snapshot: recovered, then erased again before the tables went live.
    expect(await points(f)).toEqual(everyoneElse.points);
    const check = await f.store.run(['check', '--store', 'fleet', '--json']);
    expect(check.code, check.stdout + check.stderr).toBe(0);

    // erase --snapshots takes the snapshot that holds her; then nothing is left to find.
    const gone = await f.store.run(['erase', '--store', 'fleet', '--user', 'carol', '--snapshots', '--json']);
    expect(gone.code, gone.stdout + gone.stderr).toBe(0);
    expect(existsSync(dir)).toBe(false);
  });

  it('kill -9 of run snapshot while the collection and the tables are being copied: no folder counts as a snapshot; the next run removes the partial and the server-side snapshot, and succeeds', async () => {
    const f = await fixture('pg_q_kill');
    await f.db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) SELECT 'big-' || g, 'user', repeat('fact ' || g || ' ', 40), 'message' FROM generate_series(1, 300000) g`);
    await pointRows(f, `id LIKE 'big-1%'`);
    const root = snapshotRoot(f.store);
    const child = spawn(process.execPath, [CLI, 'run', 'snapshot', '--store', 'fleet', '--config', f.store.config], { env: { ...process.env, LOG_LEVEL: 'silent', ...f.store.env }, stdio: 'ignore' });
    const deadline = Date.now() + 120_000;
    // Not while Qdrant is still being asked for the collection's snapshot: killed then, the run never heard its
    // name, and the next one can only say that one was being made (src/snapshot/server-snapshots.ts).
    const notes = join(root, NOTES_DIR);
    const nameUnheard = () => (existsSync(notes) ? readdirSync(notes) : []).filter((n) => n.endsWith('.json')).some((n) => {
      try {
        return (JSON.parse(readFileSync(join(notes, n), 'utf8')) as { snapshot: string | null }).snapshot === null;
      } catch {
        return false; // forgotten meanwhile
      }
    });
    let copying = false;
    while (!copying && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
      const partial = existsSync(root) ? readdirSync(root).find((n) => n.startsWith('.partial-')) : undefined;
      copying = partial !== undefined && existsSync(join(root, partial, 'tables', '000.copy')) && readFileSync(join(root, partial, 'tables', '000.copy')).length > 0 && !nameUnheard();
    }
    expect(copying).toBe(true);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    expect(readdirSync(root).filter((n) => n.startsWith('.partial-'))).toHaveLength(1);
    expect(snapshotFolders(config(f.store), 'fleet')).toEqual([]);
    const next = await f.store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
    expect(next.code, next.stderr).toBe(0);
    const r = JSON.parse(next.stdout) as { removedPartials: string[]; rows: number; points: Record<string, number> };
    expect(r.removedPartials).toHaveLength(1);
    expect(r.rows).toBe(300000);
    expect(r.points[f.coll]).toBeGreaterThan(0);
    expect(readdirSync(root).filter((n) => n.startsWith('.partial-'))).toEqual([]);
    expect(snapshotFolders(config(f.store), 'fleet').map((s) => s.problem)).toEqual([undefined]);
    expect(await f.q.snapshotNames(f.coll)).toEqual([]);
  });

  it.each(['the next restore', 'a worker start'])('kill -9 of restore after the collection is recovered, before the tables go live: the journal is reported by check, writers refuse the store, %s finishes it (rows and points the snapshot\'s)', async (by) => {
    const f = await fixture('pg_q_restore_kill');
    await fillPgStore(f.db, 'fleet', { live: 30, old: 3 });
    await pointRows(f);
    const at = { rows: await rows(f), points: await points(f) };
    const snap = await f.store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
    expect(snap.code, snap.stderr).toBe(0);
    const dir = (JSON.parse(snap.stdout) as { dir: string }).dir;
    await f.db.client.query(`DELETE FROM fleet.memory WHERE id LIKE 'live-1%'`);
    await deletePointsNotIn(f, new Set(await ids(f.db, 'fleet')));
    const changed = { rows: await rows(f), points: await points(f) };

    // An agent's transaction holds the table: the restore's swap waits on it, after the collection is recovered.
    const agent = new pg.Client({ connectionString: f.db.url });
    await agent.connect();
    const journal = journalPath(join(snapshotRoot(f.store), '.restore'));
    try {
      await agent.query('BEGIN');
      await agent.query('LOCK TABLE fleet.memory IN ACCESS SHARE MODE');
      const child = spawn(process.execPath, [CLI, 'restore', dir, '--store', 'fleet', '--now', '2030-01-01T00:00:00Z', '--config', f.store.config], { env: { ...process.env, LOG_LEVEL: 'silent', ...f.store.env }, stdio: 'ignore' });
      const exited = new Promise((r) => child.once('exit', r));
      const deadline = Date.now() + 120_000;
      let waiting = false;
      while (!waiting && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
        waiting = ((await f.db.client.query(`SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'memory' AND NOT l.granted`)).rowCount ?? 0) > 0;
      }
      expect(waiting).toBe(true);
      child.kill('SIGKILL');
      await exited;
    } finally {
      await agent.query('COMMIT').catch(() => {});
      await agent.end();
    }
    // Half restored: the collection is the snapshot's, the tables are not (their transaction died with the process).
    expect(await rows(f)).toEqual(changed.rows);
    expect(await points(f)).toEqual(at.points);
    expect(existsSync(journal)).toBe(true);
    expect(JSON.parse(readFileSync(journal, 'utf8'))).toMatchObject({ from: dir, recovered: [f.coll], sqliteDone: false });
    const check = await f.store.run(['check', '--store', 'fleet', '--json']);
    expect(check.code, check.stdout).toBe(1);
    expect(check.stdout).toMatch(/restore_pending/);
    const prune = await f.store.run(['run', 'prune', '--store', 'fleet']);
    expect(prune.code, prune.stderr).toBe(2);
    expect(prune.stderr).toMatch(/was interrupted/);
    expect(await rows(f)).toEqual(changed.rows);

    if (by === 'a worker start') {
      await finishInterruptedRestores(config(f.store), silentLogger, () => Date.parse('2030-01-01T00:01:00Z'));
    } else {
      const finished = await f.store.run(['restore', dir, '--store', 'fleet', '--now', '2030-01-01T00:01:00Z', '--json']);
      expect(finished.code, finished.stdout + finished.stderr).toBe(0);
      expect((JSON.parse(finished.stdout) as { steps: string[] }).steps.join('\n')).toMatch(/finishing the restore/);
    }
    expect(await rows(f)).toEqual(at.rows);
    expect(await points(f)).toEqual(at.points);
    expect(existsSync(journal)).toBe(false);
    expect((await f.store.run(['check', '--store', 'fleet', '--json'])).code).toBe(0);
  });

  it('a restore killed between the tables\' commit and its journal entry is not done again: the next restore sees the tables replaced, and an agent\'s row written since stays', async () => {
    const f = await fixture('pg_q_after_commit');
    await fillPgStore(f.db, 'fleet', { live: 12 });
    await pointRows(f);
    const snap = await f.store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
    expect(snap.code, snap.stderr).toBe(0);
    const dir = (JSON.parse(snap.stdout) as { dir: string }).dir;
    await f.db.client.query(`DELETE FROM fleet.memory WHERE id LIKE 'live-1%'`);
    const before = (await f.db.client.query<{ oid: string }>(`SELECT c.oid::text AS oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'fleet' AND c.relkind = 'r' ORDER BY c.oid`)).rows.map((r) => r.oid);
    const restored = await f.store.run(['restore', dir, '--store', 'fleet', '--now', '2030-01-01T00:00:00Z', '--json']);
    expect(restored.code, restored.stdout + restored.stderr).toBe(0);
    const undo = (JSON.parse(restored.stdout) as { undo: string }).undo;
    // As the journal stood when the swap had committed and the process died before recording it.
    const journal = journalPath(join(snapshotRoot(f.store), '.restore'));
    writeFileSync(journal, JSON.stringify({
      format: 'memory-warden-restore/1', store: 'fleet', from: dir, undo, direction: 'forward', recovered: [f.coll], sqliteDone: false,
      file: null, pid: 1, startedAt: '2030-01-01T00:00:00.000Z', tablesBefore: before,
    }), { mode: 0o600 });
    await f.db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) VALUES ('since-1', 'user', 'written after the restore', 'message')`);
    const at = { rows: await rows(f), points: await points(f) };
    const again = await f.store.run(['restore', dir, '--store', 'fleet', '--now', '2030-01-01T00:01:00Z', '--json']);
    expect(again.code, again.stdout + again.stderr).toBe(0);
    expect((JSON.parse(again.stdout) as { steps: string[] }).steps.join('\n')).toMatch(/were already restored/);
    expect(await rows(f)).toEqual(at.rows);
    expect(await points(f)).toEqual(at.points);
    expect(existsSync(journal)).toBe(false);
  });

  it('both or neither: the second collection\'s upload fails: the first is put back from the undo snapshot, the tables are untouched, no journal is left', async () => {
    const f = await fixture('pg_q_both', { collections: 2 });
    await fillPgStore(f.db, 'fleet', { live: 15, old: 2 });
    await pointRows(f);
    const snap = await f.store.run(['run', 'snapshot', '--store', 'fleet', '--json']);
    expect(snap.code, snap.stderr).toBe(0);
    const dir = (JSON.parse(snap.stdout) as { dir: string }).dir;
    expect(readManifest(dir).qdrant.map((p) => p.collection)).toEqual(f.colls);
    await f.db.client.query(`DELETE FROM fleet.memory WHERE id LIKE 'live-1%'`);
    await deletePointsNotIn(f, new Set(await ids(f.db, 'fleet')));
    const state = async () => ({ rows: await rows(f), points: await Promise.all(f.colls.map((c) => points(f, c))) });
    const before = await state();
    const proxy = await startFaultProxy(f.q.url);
    try {
      proxy.fail({ method: 'POST', path: new RegExp(`/collections/${f.colls[1]}/snapshots/upload$`), times: 1 });
      const cfg = config(f.store);
      cfg.stores.fleet!.qdrant!.url = proxy.url;
      await expect(restoreSnapshot(cfg, 'fleet', dir, { now: () => Date.parse('2030-01-01T00:00:00Z'), log: silentLogger })).rejects.toMatchObject({ kind: 'transient' });
      expect(proxy.failed).toBe(1);
    } finally {
      await proxy.close();
    }
    expect(await state()).toEqual(before);
    expect(existsSync(journalPath(join(snapshotRoot(f.store), '.restore')))).toBe(false);
    for (const c of f.colls) expect(await f.q.snapshotNames(c)).toEqual([]);
  });
});

/** Deletes every point whose row is not in `rowIds`, in every collection, as an agent's delete does. */
async function deletePointsNotIn(f: Fixture, rowIds: ReadonlySet<string>): Promise<void> {
  for (const coll of f.colls) {
    const doomed = (await f.q.points(coll)).filter((p) => !rowIds.has(String(p.payload.memory_id))).map((p) => p.id);
    if (doomed.length === 0) continue;
    const res = await fetch(`${f.q.url}/collections/${encodeURIComponent(coll)}/points/delete?wait=true`, {
      method: 'POST', headers: { 'content-type': 'application/json', ...(f.q.apiKey ? { 'api-key': f.q.apiKey } : {}) }, body: JSON.stringify({ points: doomed }),
    });
    expect(res.ok).toBe(true);
  }
}
