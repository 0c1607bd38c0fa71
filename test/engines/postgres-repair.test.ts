import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { openDatabase } from '../../src/store/sqlite.js';
import { cliAsync } from '../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../helpers/pg.js';
import { qdrantTarget } from '../helpers/qdrant-server.js';
import { assertBuilt, spawnWorker, tempDir, useWorkerProcesses } from '../queue/fixtures.js';
import { fillPgStore, ids, initPgStore, pgStoreConfig, URL_VAR, type PgStore } from './pg-fixture.js';

const KILL_AT = fileURLToPath(new URL('../helpers/pg-kill-at.cjs', import.meta.url));
const AGENT = fileURLToPath(new URL('../../dist/bench/pg-agent.js', import.meta.url));

/** Rows superseded by a row that no longer exists: the memory table without its foreign key, as an agent may make it. */
const DROP_FK = `ALTER TABLE fleet.memory DROP CONSTRAINT memory_superseded_by_fkey`;

/**
 * `dangling` roots `d-N` superseded by `gone-N` (no such row), each with `depth` older versions `d-N-v1` → … → `d-N`;
 * beside them live rows `ok-N` and a correction pair `old-N` → `ok-N` that must stay.
 */
async function fillDangling(db: TestDatabase, n: number, depth = 2): Promise<void> {
  await db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) SELECT 'ok-' || g, 'user', 'likes tea ' || g, 'message' FROM generate_series(1, $1) g`, [n]);
  await db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source, superseded_by) SELECT 'old-' || g, 'user', 'liked coffee ' || g, 'message', 'ok-' || g FROM generate_series(1, $1) g`, [n]);
  await db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source, superseded_by) SELECT 'd-' || g, 'user', 'prefers npm ' || g, 'message', 'gone-' || g FROM generate_series(1, $1) g`, [n]);
  for (let v = 1; v <= depth; v++) {
    const next = v === 1 ? `'d-' || g` : `'d-' || g || '-v${v - 1}'`;
    await db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source, superseded_by) SELECT 'd-' || g || '-v${v}', 'user', 'used yarn ' || g, 'message', ${next} FROM generate_series(1, $1) g`, [n]);
  }
}

const danglingCount = async (db: TestDatabase) => Number((await db.client.query<{ n: string }>(
  `SELECT count(*) AS n FROM fleet.memory m WHERE superseded_by IS NOT NULL AND NOT EXISTS (SELECT 1 FROM fleet.memory p WHERE p.id = m.superseded_by)`)).rows[0]!.n);

/** Advisory locks held in the test's database (pg_locks is the whole server's). */
const advisoryHeld = async (db: TestDatabase) => (await db.client.query(
  `SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)).rowCount;

/**
 * repair dangling, timestamps and orphans on a PostgreSQL warden store, and enqueue of its jobs to a real worker: on
 * the native server (PostgreSQL 15), each test in a database of its own.
 */
describe('repair on a PostgreSQL store', { timeout: 300_000 }, () => {
  let db: TestDatabase | undefined;
  const children: ChildProcess[] = [];
  beforeAll(() => assertBuilt());
  afterEach(async () => {
    for (const c of children.splice(0)) if (c.exitCode === null) c.kill('SIGKILL');
    await db?.drop();
    db = undefined;
  });

  async function store(label: string, postgres: Record<string, unknown> = {}, extra: Record<string, unknown> = {}): Promise<PgStore> {
    db = await createTestDatabase(label);
    const s = pgStoreConfig(db, { postgres, extra });
    await initPgStore(s);
    return s;
  }

  it('dangling, the foreign key absent (an agent\'s own table): the roots and every older version behind them go, in batches; nothing else; check is clean after', async () => {
    const s = await store('pg_repair_dangling', { batchSize: 2 });
    await db!.client.query(DROP_FK);
    await fillDangling(db!, 5, 2);
    const before = await s.run(['check', '--store', 'fleet', '--json']);
    expect(before.code).toBe(1);
    expect(before.json()).toMatchObject({ dangling: 5 });

    const r = await s.run(['repair', 'dangling', '--store', 'fleet', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const out = r.json();
    expect(out).toMatchObject({ store: 'fleet', deleted: 15, foreignKey: 'absent' });
    expect([...out.dangling].sort()).toEqual(['d-1', 'd-2', 'd-3', 'd-4', 'd-5']);
    expect([...out.cascaded].sort()).toEqual([1, 2, 3, 4, 5].flatMap((g) => [`d-${g}-v1`, `d-${g}-v2`]).sort());
    expect(await ids(db!, 'fleet', `id LIKE 'd-%'`)).toEqual([]);
    expect(await ids(db!, 'fleet')).toHaveLength(10); // ok-N and old-N, all of them
    expect(await danglingCount(db!)).toBe(0);
    expect(await advisoryHeld(db!)).toBe(0);

    const after = await s.run(['check', '--store', 'fleet', '--json']);
    expect(after.json()).toMatchObject({ dangling: 0 });
    const again = await s.run(['repair', 'dangling', '--store', 'fleet']);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toBe('fleet: deleted 0 row(s) (foreign key of superseded_by: absent)\n');
    // The key added back without checking the rows already there: said so.
    await db!.client.query(`ALTER TABLE fleet.memory ADD CONSTRAINT memory_superseded_by_fkey FOREIGN KEY (superseded_by) REFERENCES fleet.memory(id) ON DELETE CASCADE NOT VALID`);
    expect((await s.run(['repair', 'dangling', '--store', 'fleet', '--json'])).json()).toMatchObject({ deleted: 0, foreignKey: 'not-valid' });
  });

  it('dangling with the foreign key\'s triggers disabled: said so, and the same rows go; the human output lists them', async () => {
    const s = await store('pg_repair_disabled');
    // The key's triggers off (as a restore tool or a hand fix leaves them): nothing checks or cascades.
    await db!.client.query(`ALTER TABLE fleet.memory DISABLE TRIGGER ALL`);
    await fillDangling(db!, 1, 1);
    await db!.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) VALUES ('x', 'user', 'fresh', 'message')`);
    await db!.client.query(`INSERT INTO fleet.memory (id, subject, fact, source, superseded_by) VALUES ('y', 'user', 'older', 'message', 'x')`);
    await db!.client.query(`DELETE FROM fleet.memory WHERE id = 'x'`); // no cascade: y now points at nothing
    const r = await s.run(['repair', 'dangling', '--store', 'fleet']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe('fleet: deleted 3 row(s) (foreign key of superseded_by: disabled)\n  dangling  d-1\n  dangling  y\n  cascaded  d-1-v1\n');
    expect(await ids(db!, 'fleet')).toEqual(['ok-1', 'old-1']);
    await db!.client.query(`ALTER TABLE fleet.memory ENABLE TRIGGER ALL`);
    expect((await s.run(['repair', 'dangling', '--store', 'fleet'])).stdout).toBe('fleet: deleted 0 row(s) (foreign key of superseded_by: enforced)\n');
  });

  it('dangling is refused while another maintenance job holds the store\'s advisory lock; nothing deleted', async () => {
    const s = await store('pg_repair_locked');
    await db!.client.query(DROP_FK);
    await fillDangling(db!, 2, 1);
    const holder = new pg.Client({ connectionString: db!.url });
    await holder.connect();
    try {
      // The lock prune takes (src/engines/postgres/index.ts): class 'mw', the schema's hash.
      await holder.query(`SELECT pg_advisory_lock(${0x6d77}, hashtext('fleet'))`);
      const r = await s.run(['repair', 'dangling', '--store', 'fleet']);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/another maintenance job holds this store's lock/);
      expect(await danglingCount(db!)).toBe(2);
    } finally {
      await holder.end();
    }
  });

  it('dangling killed -9 between its batches: what committed is whole (no chain cut in two), the lock goes with the process, the next run finishes', async () => {
    const s = await store('pg_repair_kill', { batchSize: 3 });
    await db!.client.query(DROP_FK);
    await fillDangling(db!, 12, 3);
    const killed = await cliAsync(['repair', 'dangling', '--store', 'fleet', '--json', '--config', s.config],
      { ...s.env, NODE_OPTIONS: `--require ${KILL_AT}`, MW_PG_KILL_AT: JSON.stringify({ sql: '^COMMIT$', nth: 2, when: 'after' }) });
    expect(killed.code, killed.stderr).not.toBe(0);
    expect(killed.stdout).toBe('');
    const left = await ids(db!, 'fleet', `id LIKE 'd-%'`);
    expect(left.length).toBe(12 * 4 - 2 * 3 * 4); // two batches of three roots, each with three versions
    // Every root left has every version of its chain: the only dangling rows are roots.
    expect(await danglingCount(db!)).toBe(6);
    for (const id of left.filter((x) => !x.includes('-v'))) for (let v = 1; v <= 3; v++) expect(left).toContain(`${id}-v${v}`);
    for (let t = 0; t < 200 && (await advisoryHeld(db!)) !== 0; t++) await new Promise((r) => setTimeout(r, 50));
    const again = await s.run(['repair', 'dangling', '--store', 'fleet', '--json']);
    expect(again.code, again.stderr).toBe(0);
    expect(again.json()).toMatchObject({ deleted: 24 });
    expect(await ids(db!, 'fleet', `id LIKE 'd-%'`)).toEqual([]);
    expect(await ids(db!, 'fleet')).toHaveLength(24);
  });

  it('dangling beside four agent processes writing over their own connections: no agent error, every write kept, every dangling chain gone', async () => {
    const s = await store('pg_repair_agents', { batchSize: 50 });
    await db!.client.query(DROP_FK);
    await fillDangling(db!, 1000, 2);
    const agents = ['a1', 'a2', 'a3', 'a4'].map((name) => {
      const child = spawn(process.execPath, [AGENT, db!.url, 'fleet', name, '1'], { stdio: ['ignore', 'pipe', 'inherit'] });
      children.push(child);
      let out = '';
      child.stdout!.setEncoding('utf8').on('data', (c: string) => (out += c));
      const ready = new Promise<void>((resolve) => child.stdout!.once('data', () => resolve()));
      const done = new Promise<string>((resolve) => child.once('close', () => resolve(out)));
      return { child, ready, done };
    });
    await Promise.all(agents.map((a) => a.ready));
    const r = await s.run(['repair', 'dangling', '--store', 'fleet', '--json']);
    for (const a of agents) a.child.kill('SIGTERM');
    const reports = (await Promise.all(agents.map((a) => a.done))).map((o) => JSON.parse(o.trim().split('\n').at(-1)!) as { writes: number; errors: string[]; live: string[] });
    expect(r.code, r.stderr).toBe(0);
    expect(r.json()).toMatchObject({ deleted: 3000 });
    for (const rep of reports) {
      expect(rep.errors).toEqual([]);
      expect(rep.writes).toBeGreaterThan(0);
      expect(await ids(db!, 'fleet', `id = ANY(ARRAY[${rep.live.map((id) => `'${id}'`).join(',')}]::text[])`)).toEqual([...rep.live].sort());
    }
    expect(await ids(db!, 'fleet', `id LIKE 'd-%'`)).toEqual([]);
    expect(await ids(db!, 'fleet', `id LIKE 'ok-%' OR id LIKE 'old-%'`)).toHaveLength(2000);
    expect(await danglingCount(db!)).toBe(0);
  });

  it('dangling with Qdrant beside it: the deleted rows\' points go first, every other point stays', async () => {
    const q = await qdrantTarget();
    try {
      const coll = q.name('memories');
      const s = await store('pg_repair_qdrant', {}, { stores: { fleet: { engine: 'postgres', postgres: { url: `\${${URL_VAR}}`, schema: 'fleet' }, qdrant: { url: q.url, ...(q.apiKey ? { apiKey: q.apiKey } : {}), collections: [coll] } } } });
      await db!.client.query(DROP_FK);
      await fillDangling(db!, 2, 1);
      await q.createCollection(coll);
      const pointed = ['d-1', 'd-1-v1', 'd-2-v1', 'ok-1', 'old-2'];
      await q.upsert(coll, pointed.map((id, i) => ({ id: i + 1, payload: { memory_id: id } })));
      const r = await s.run(['repair', 'dangling', '--store', 'fleet', '--json']);
      expect(r.code, r.stderr).toBe(0);
      expect(r.json()).toMatchObject({ deleted: 4 });
      expect((await q.points(coll)).map((p) => p.payload.memory_id).sort()).toEqual(['ok-1', 'old-2']);
      q.assertConforms();
    } finally {
      await q.close();
    }
  });

  it('timestamps: timestamptz holds no unparseable or non-canonical value, so nothing is rewritten; infinity and years past 9999 are listed for a person; a time column of another type is named; exit 0, nothing changed', async () => {
    const s = await store('pg_repair_times');
    await fillPgStore(db!, 'fleet', { live: 3 });
    await db!.client.query(`UPDATE fleet.memory SET expires_at = 'infinity' WHERE id = 'live-1'`);
    await db!.client.query(`UPDATE fleet.memory SET confirmed_at = '12000-01-01 00:00:00+00' WHERE id = 'live-2'`);
    await db!.client.query(`INSERT INTO fleet.memory (id, subject, fact, source, expires_at) VALUES ('bc', 'user', 'ancient', 'message', '0100-06-01 00:00:00+00 BC')`);
    await db!.client.query(`ALTER TABLE fleet.memory ALTER COLUMN last_used_at TYPE text`);
    const table = async () => (await db!.client.query(`SELECT * FROM fleet.memory ORDER BY id`)).rows.map((r) => JSON.stringify(r));
    const before = await table();
    const r = await s.run(['repair', 'timestamps', '--store', 'fleet', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const out = r.json();
    expect(out).toMatchObject({ store: 'fleet', rewritten: 0, unparseable: 0, outOfRange: 3, changes: [] });
    expect(out.left.map((l: { id: string; column: string }) => `${l.id} ${l.column}`).sort()).toEqual(['bc expires_at', 'live-1 expires_at', 'live-2 confirmed_at']);
    expect(out.left.find((l: { id: string }) => l.id === 'live-1').value).toBe('infinity');
    expect(out.notes[0]).toMatch(/^created_at, confirmed_at, expires_at: timestamp with time zone \(timestamptz\), which holds only instants/);
    expect(out.notes[1]).toMatch(/^last_used_at is text, not timestamptz: not looked at/);
    expect(await table()).toEqual(before);
    const text = await s.run(['repair', 'timestamps', '--store', 'fleet']);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout.split('\n').slice(0, 4)).toEqual([
      'fleet: rewrote 0 timestamp(s); 0 unparseable and 3 outside the years 0000-9999 left for a person',
      '  left  live-2 confirmed_at: 12000-01-01 00:00:00', '  left  bc expires_at: 0100-06-01 00:00:00 BC', '  left  live-1 expires_at: infinity',
    ]);
  });

  it('orphans: --dry-run counts the points whose row is gone and deletes nothing; then they go, and every point of a row (or naming none) stays', async () => {
    const q = await qdrantTarget();
    try {
      const coll = q.name('memories');
      const s = await store('pg_repair_orphans', {}, { stores: { fleet: { engine: 'postgres', postgres: { url: `\${${URL_VAR}}`, schema: 'fleet' }, qdrant: { url: q.url, ...(q.apiKey ? { apiKey: q.apiKey } : {}), collections: [coll] } } } });
      await fillPgStore(db!, 'fleet', { live: 3 });
      await q.createCollection(coll);
      await q.upsert(coll, [
        { id: 1, payload: { memory_id: 'live-1' } }, { id: 2, payload: { memory_id: 'live-2' } },
        { id: 3, payload: { memory_id: 'deleted-1' } }, { id: 4, payload: { memory_id: 'deleted-2' } },
        { id: 5, payload: { other: 'names no row' } },
      ]);
      const dry = await s.run(['repair', 'orphans', '--store', 'fleet', '--dry-run', '--json']);
      expect(dry.code, dry.stderr).toBe(0);
      expect(dry.json()).toMatchObject({ dryRun: true, deleted: 2, ids: [`${coll}:3`, `${coll}:4`] });
      expect(await q.points(coll)).toHaveLength(5);
      const r = await s.run(['repair', 'orphans', '--store', 'fleet']);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toBe(`fleet: deleted 2 orphan point(s)\n  ${coll}: 2\n  ${coll}:3\n  ${coll}:4\n`);
      expect((await q.points(coll)).map((p) => p.id).sort()).toEqual([1, 2, 5]);
      expect(await ids(db!, 'fleet')).toHaveLength(3);
      q.assertConforms();
    } finally {
      await q.close();
    }
  });

  it('orphans on a store with no qdrant section: exit 2, one line saying there are no points', async () => {
    const s = await store('pg_repair_noq');
    const r = await s.run(['repair', 'orphans', '--store', 'fleet']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/fleet: no qdrant section in its config: there are no points to repair/);
  });
});

/**
 * enqueue of a PostgreSQL store's job: on the shared queue, which any worker takes (the store has no host), run there
 * and its result printed here. A real worker process, the real Redis on a prefix of the test's own.
 */
describe('enqueue on a PostgreSQL store', { timeout: 120_000 }, () => {
  const procs = useWorkerProcesses();
  let db: TestDatabase | undefined;
  afterEach(async () => {
    for (const w of procs.workers.splice(0)) if (w.proc.exitCode === null) w.proc.kill('SIGKILL');
    await db?.drop();
    db = undefined;
  });

  it('a worker of another host takes the job from the shared queue and runs it; enqueue prints its result', async () => {
    db = await createTestDatabase('pg_enqueue');
    const dir = tempDir('pg-enqueue');
    const prefix = procs.prefix('pg-enqueue');
    mkdirSync(join(dir, 'w'));
    const file = join(dir, 'config.yaml');
    const off = { enabled: false };
    writeFileSync(file, JSON.stringify({
      stateDb: '${STATE_DIR}/state.db',
      redis: { url: procs.redis().url, prefix },
      worker: { http: { port: 0 }, schedules: { prune: off, integrity: off, snapshot: off, digest: off, drift: off } },
      stores: { fleet: { engine: 'postgres', postgres: { url: `\${${URL_VAR}}`, schema: 'fleet' } } },
    }));
    const env = (state: string) => ({ STATE_DIR: join(dir, state), [URL_VAR]: db!.url });
    mkdirSync(join(dir, 'ops'));
    const init = await cliAsync(['init', '--store', 'fleet', '--config', file], env('ops'));
    expect(init.code, init.stderr).toBe(0);
    await fillPgStore(db, 'fleet', { live: 4, expired: 6 });
    const w = spawnWorker(file, ['worker', '--host', 'box-z'], env('w'));
    procs.workers.push(w);
    await w.ready;

    const prune = await cliAsync(['enqueue', 'prune', '--store', 'fleet', '--timeout', '60', '--json', '--config', file], env('ops'));
    expect(prune.code, prune.stderr).toBe(0);
    expect(prune.json()).toMatchObject({ store: 'fleet', deleted: 6, expired: 6 });
    expect(await ids(db, 'fleet')).toEqual(['live-1', 'live-2', 'live-3', 'live-4']);
    const check = await cliAsync(['enqueue', 'integrity', '--store', 'fleet', '--timeout', '60', '--config', file], env('ops'));
    expect(check.code, check.stderr).toBe(0);
    expect(check.stdout).toMatch(/^integrity fleet: done\n/);
    // Put on the shared queue (the store has no host) and run by the worker of host box-z, none on a host's queue.
    const done = await procs.queue('maintenance', prefix).getCompleted();
    expect(done.map((j) => [j.name, j.data.store]).sort()).toEqual([['integrity', 'fleet'], ['prune', 'fleet']]);
    const onHost = await procs.queue('maintenance.box-z', prefix).getJobCounts();
    expect(Object.values(onHost).reduce((a, b) => a + (b ?? 0), 0)).toBe(0);
    expect(w.lines.filter((l) => l.msg === 'job done' && l.store === 'fleet').map((l) => l.job).sort()).toEqual(['integrity', 'prune']);
  });
});

/** The repairs are layout methods: a layout without one (mem0's history) refuses it, exit 2, its file unchanged. */
describe('repair on a layout that has none', { timeout: 60_000 }, () => {
  it.each(['dangling', 'timestamps', 'orphans'])('repair %s of a mem0 store: one line naming the store and its layout, exit 2', async (what) => {
    const dir = tempDir('mem0-repair');
    const file = join(dir, 'history.db');
    const db = openDatabase(file, { create: true });
    db.exec(`CREATE TABLE history (id TEXT PRIMARY KEY, memory_id TEXT, old_memory TEXT, new_memory TEXT, event TEXT, created_at DATETIME, updated_at DATETIME, is_deleted INTEGER, actor_id TEXT, role TEXT)`);
    db.close();
    const config = join(dir, 'config.yaml');
    writeFileSync(config, JSON.stringify({ stateDb: join(dir, 'state.db'), stores: { py: { layout: 'mem0', db: file, qdrant: { url: 'http://127.0.0.1:1', collections: ['mem0'] } } } }));
    const before = readFileSync(file);
    const r = await cliAsync(['repair', what, '--store', 'py', '--config', config]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim()).toBe(`memory-warden: repair ${what}: store py is of the mem0 layout, which has no such repair (the repairs are of the warden layout's supersede chains, times and Qdrant points)`);
    expect(readFileSync(file).equals(before)).toBe(true);
  });
});
