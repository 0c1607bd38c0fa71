import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import Database from 'better-sqlite3';
import { cliAsync } from '../helpers/cli.js';
import { createTestDatabase, startPgvectorServer, type TestDatabase } from '../helpers/pg.js';
import { assertBuilt, tempDir } from '../queue/fixtures.js';
import { makeStore, type Row } from '../helpers/store.js';
import { ids, initPgStore, pgStoreConfig, URL_VAR, type PgStore } from './pg-fixture.js';
import { verifyBytesGone } from '../../src/engines/postgres/bytes.js';
import { wardenErasedInPg } from '../../src/layouts/warden/postgres/erase.js';
import { openPgSession } from '../../src/engines/postgres/session.js';
import type { PostgresStoreHandle } from '../../src/engines/contract.js';
import { qdrantTarget } from '../helpers/qdrant-server.js';
import { storeFiles } from '../../src/store/files.js';
import { localLeftovers } from '../../src/snapshot/copies.js';
import { validateConfig } from '../../src/config/config.js';

const KILL_AT = fileURLToPath(new URL('../helpers/pg-kill-at.cjs', import.meta.url));
const AGENT = fileURLToPath(new URL('../../dist/bench/pg-agent.js', import.meta.url));

/**
 * erase of a person from a PostgreSQL warden store, through the CLI as a user runs it. Native = Debian's PostgreSQL
 * 15 (createTestDatabase): the decisions equal SQLite's on the same rows, the byte check, kill -9 at each step, agents
 * writing beside it. PGlite = PostgreSQL 18 in WASM over the wire (startPgvectorServer): erase and its byte check
 * through pg_read_binary_file there too.
 */

/**
 * The same rows for both engines: two people, a shared source, chains (one across people), a case-mixed subject;
 * `quoted`: two more whose ids a batch sends as SQL literals (quotes, a backslash, replacement patterns `$'` `$&`),
 * one a chain's root with an older version of Bob's.
 */
function rows(quoted = false): Row[] {
  const out: Row[] = [];
  for (let i = 1; i <= 30; i++) out.push({ id: `ann-${i}`, subject: 'ann', fact: `Ann's secret number ${i} is ${1000 + i * 7}`, source: i % 2 ? 'message' : `ann-mail-${i}` });
  for (let i = 1; i <= 20; i++) out.push({ id: `bob-${i}`, subject: 'bob', fact: `Bob likes cheese kind ${i}`, source: 'message' });
  // Bob's older versions superseded by Ann's rows: erase of Ann takes them by cascade, on both engines.
  for (let v = 1; v <= 5; v++) out.push({ id: `bob-old-${v}`, subject: 'bob', fact: `Bob lived at street ${v}`, source: 'message', superseded_by: v === 5 ? 'ann-3' : `bob-old-${v + 1}` });
  if (quoted) {
    out.push({ id: "ann-'$'$&\\-q", subject: 'ann', fact: "Ann's quote ' and $' and \\ stay data", source: 'message' });
    out.push({ id: "bob-$`-old", subject: 'bob', fact: 'Bob quoted once', source: 'message', superseded_by: "ann-'$'$&\\-q" });
  }
  out.push({ id: 'mix-1', subject: 'Project ANNEX', fact: 'the annex opens', source: 'message' });
  // Case is folded in ASCII only, as SQLite's lower() does: `--subject Ärger` takes "ÄRGER", never "ärger".
  out.push({ id: 'mix-2', subject: 'x', fact: 'großer ärger heute', source: 'message' });
  out.push({ id: 'mix-3', subject: 'x', fact: 'ÄRGER im Büro', source: 'message' });
  return out;
}

async function fillPg(client: pg.Client, schema: string, all: Row[]): Promise<void> {
  // Rows first, then the chains (the foreign key is checked at once).
  for (const r of all) await client.query(`INSERT INTO "${schema}".memory (id, subject, fact, source) VALUES ($1, $2, $3, $4)`, [r.id, r.subject, r.fact, r.source]);
  for (const r of all) if (r.superseded_by) await client.query(`UPDATE "${schema}".memory SET superseded_by = $1 WHERE id = $2`, [r.superseded_by, r.id]);
}

function sqliteStore(all: Row[]): { config: string; db: string } {
  const dir = tempDir('pg-erase-sqlite');
  const db = join(dir, 'memory.db');
  makeStore(db, all);
  const config = join(dir, 'config.yaml');
  writeFileSync(config, JSON.stringify({ stateDb: join(dir, 'state.db'), snapshot: { root: join(dir, 'snapshots') }, stores: { fleet: { db } } }));
  return { config, db };
}

const sqliteIds = (db: string) => {
  const d = new Database(db, { readonly: true });
  try {
    return (d.prepare('SELECT id FROM memory ORDER BY id').pluck().all() as string[]);
  } finally {
    d.close();
  }
};

/** Byte check of the test's own: the original texts looked for in the table's files (the erase's own check aside). */
async function bytesOf(url: string, schema: string, needles: string[]) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await verifyBytesGone(c, { schema, tables: ['memory'], needles });
  } finally {
    await c.end();
  }
}

const annTexts = (quoted = false) => rows(quoted).filter((r) => r.subject === 'ann').map((r) => r.fact!);

it('a PostgreSQL store has no file on the host: erase\'s search for copies killed runs left looks only in its snapshot folder', () => {
  const dir = tempDir('pg-erase-files');
  process.env.MW_PG_FILES_URL = 'postgres://127.0.0.1:1/none';
  const config = validateConfig({ stateDb: join(dir, 'state.db'), snapshot: { root: join(dir, 'snapshots') }, stores: { fleet: { engine: 'postgres', postgres: { url: '${MW_PG_FILES_URL}', schema: 'fleet' } } } });
  expect(storeFiles(config.stores.fleet!)).toEqual([]);
  // Not the working directory's `..restore-*` files (what an empty store path would name), nor a journal beside no file.
  expect(localLeftovers(config, 'fleet')).toEqual([]);
});

describe('erase on a PostgreSQL store', { timeout: 300_000 }, () => {
  let db: TestDatabase | undefined;
  const children: ChildProcess[] = [];
  beforeAll(() => assertBuilt());
  afterEach(async () => {
    for (const c of children.splice(0)) if (c.exitCode === null) c.kill('SIGKILL');
    await db?.drop();
    db = undefined;
  });

  it('native PG 15: --user, --subject and --ids take exactly the rows SQLite takes from the same rows; the receipt has the same shape; the bytes are gone', async () => {
    for (const [n, argv] of [['user', ['--user', 'ann']], ['subject', ['--subject', 'aNn']], ['ids', ['--ids', 'bob-old-5', 'ann-7', 'nope']], ['unicode', ['--subject', 'Ärger']]] as const) {
      db = await createTestDatabase(`pg_erase_same_${n}`);
      const store = pgStoreConfig(db);
      await initPgStore(store);
      await fillPg(db.client, 'fleet', rows(true));
      const lite = sqliteStore(rows(true));
      const dry = await store.run(['erase', ...argv, '--store', 'fleet', '--dry-run', '--json']);
      expect(dry.code, dry.stderr).toBe(0);
      expect((await ids(db, 'fleet')).length).toBe(rows(true).length);
      const onPg = await store.run(['erase', ...argv, '--store', 'fleet', '--json']);
      const onLite = await cliAsync(['erase', ...argv, '--store', 'fleet', '--json', '--config', lite.config]);
      expect(onLite.code, onLite.stderr).toBe(0);
      expect(onPg.code, onPg.stderr + onPg.stdout).toBe(0);
      expect(await ids(db, 'fleet')).toEqual(sqliteIds(lite.db));
      const [p, l] = [onPg.json(), onLite.json()];
      expect(dry.json().memories).toBe(p.memories);
      expect(p.memories).toBe(l.memories);
      if (n === 'unicode') expect(await ids(db, 'fleet', `id LIKE 'mix-%'`)).toEqual(['mix-1', 'mix-2']);
      expect(p.counts).toMatchObject({ rows: l.counts.rows, cascaded: l.counts.cascaded, strayPoints: 0, bytesLeft: 0, bytesUnverified: 0 });
      expect(Object.keys(p).filter((k) => k !== 'bytes').sort()).toEqual(Object.keys(l).sort());
      expect(p.places.map((x: { place: string }) => x.place)).toEqual(expect.arrayContaining(l.places.map((x: { place: string }) => x.place)));
      // What it cannot see is said, with how an operator reaches it; never "nothing left".
      expect(p.bytes.verdict).toBe('clean');
      expect(p.bytes.needles).toBeGreaterThan(0);
      expect(p.bytes.unseen.map((u: { what: string }) => u.what)).toEqual(expect.arrayContaining(['wal', 'dumps-and-backups', 'replication', 'freed-disk-blocks']));
      expect(p.vacuumed).toBe(true);
      expect(p.walTruncated).toBe(false);
      if (n === 'user') {
        expect((await bytesOf(db.url, 'fleet', annTexts(true))).verdict).toBe('clean');
        const text = await store.run(['erase', '--user', 'ann', '--store', 'fleet']);
        expect(text.code, text.stderr).toBe(0);
        expect(text.stdout).toMatch(/not seen by this check/);
        expect(text.stdout).toMatch(/wal .*pg_wal/);
      }
      await db.drop();
      db = undefined;
    }
  });

  it('native PG 15: kill -9 between batches, before the VACUUM FULL and before the byte check; each re-run leaves no row and no byte of the person, and says what it could not look for', async () => {
    const points = [
      { sql: '(^|\\n)COMMIT$', nth: 2, when: 'after' }, // between the deletes' batches (a batch's one query ends in its COMMIT)
      { sql: '^VACUUM', nth: 1, when: 'before' }, // every row deleted, nothing vacuumed
      { sql: 'pg_relation_filepath', nth: 1, when: 'before' }, // vacuumed, the byte check not begun
    ];
    for (const [i, at] of points.entries()) {
      db = await createTestDatabase(`pg_erase_kill_${i}`);
      const store = pgStoreConfig(db, { postgres: { batchSize: 5 } });
      await initPgStore(store);
      await fillPg(db.client, 'fleet', rows());
      const killed = await cliAsync(['erase', '--user', 'ann', '--store', 'fleet', '--json', '--config', store.config],
        { ...store.env, NODE_OPTIONS: `--require ${KILL_AT}`, MW_PG_KILL_AT: JSON.stringify(at) });
      expect(killed.code, `${at.sql}: ${killed.stderr}`).not.toBe(0);
      expect(killed.stdout).toBe('');
      // Whatever was committed is whole, and Bob's live rows are all there.
      const dangling = await db.client.query(`SELECT 1 FROM fleet.memory m WHERE superseded_by IS NOT NULL AND NOT EXISTS (SELECT 1 FROM fleet.memory p WHERE p.id = m.superseded_by)`);
      expect(dangling.rowCount).toBe(0);
      if (i > 0) expect(await ids(db, 'fleet', `subject = 'ann'`)).toEqual([]);
      if (i === 1) expect((await bytesOf(db.url, 'fleet', annTexts())).verdict).toBe('found'); // dead tuples, unvacuumed
      // The server releases the killed holder's advisory lock once its backend sees the connection gone. Only this test's
      // database counts: pg_locks lists the whole cluster, where other tests hold advisory locks of their own.
      const held = async () => (await db!.client.query(`SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)).rowCount;
      for (let t = 0; t < 200 && (await held()) !== 0; t++) await new Promise((r) => setTimeout(r, 50));
      expect(await held()).toBe(0);
      const again = await store.run(['erase', '--user', 'ann', '--store', 'fleet', '--json']);
      expect(again.code, `${at.sql}: ${again.stderr}${again.stdout}`).toBe(0);
      const r = again.json();
      expect(r.bytes.verdict).toBe('clean');
      expect(r.vacuumed).toBe(true);
      if (r.memories === 0) expect(r.bytes.unseen.map((u: { what: string }) => u.what)).toContain('earlier-erases');
      expect(await ids(db, 'fleet', `subject = 'ann' OR id LIKE 'bob-old-%'`)).toEqual([]);
      expect(await ids(db, 'fleet', `id LIKE 'bob-%' AND id NOT LIKE 'bob-old-%'`)).toHaveLength(20);
      expect((await bytesOf(db.url, 'fleet', annTexts())).verdict).toBe('clean');
      await db.drop();
      db = undefined;
    }
  });

  it('native PG 15: which subjects and sources are only the person\'s is asked once, by the plan; what changed before the deletes is asked again', async () => {
    // Each erase plans (a dry run, recorded before anything is deleted), then deletes. The plan's answers are taken
    // where they still hold: the table is read for the fields once. Paused between the two, the test changes rows:
    // a source the plan found shared whose other row goes becomes the person's, a new row of the person's brings a
    // source another row has too (not theirs) and one nobody else has (theirs).
    const texts = (r: { fact: string }[]) => r.map((x) => x.fact);
    const base = (shared: boolean) => [
      { id: 'pat-1', subject: 'patricia', fact: 'Patricia fact one', source: 'src-gone' },
      { id: 'pat-2', subject: 'patricia', fact: 'Patricia fact two', source: 'src-stays' },
      { id: 'oth-1', subject: 'otto', fact: 'Otto fact one', source: shared ? 'src-gone' : 'src-otto-1' },
      { id: 'oth-2', subject: 'otto', fact: 'Otto fact two', source: shared ? 'src-stays' : 'src-otto-2' },
    ];
    for (const changed of [false, true]) {
      db = await createTestDatabase(`pg_erase_fields_${changed ? 'changed' : 'same'}`);
      const store = pgStoreConfig(db);
      await initPgStore(store);
      // Unchanged: nothing of the person's is shared, the plan settles every field. Changed: the plan finds two
      // sources shared (asked again, with the new rows' ones).
      await fillPg(db.client, 'fleet', base(changed));
      const dir = tempDir('pg-erase-fields');
      const [held, resume, log] = [join(dir, 'held'), join(dir, 'resume'), join(dir, 'log')];
      // The deletes' own look-up of the roots (the plan reads them with its recursive query) is where it waits.
      const run = cliAsync(['erase', '--user', 'patricia', '--store', 'fleet', '--json', '--config', store.config], {
        ...store.env, NODE_OPTIONS: `--require ${KILL_AT}`, MW_PG_KILL_LOG: log,
        MW_PG_KILL_AT: JSON.stringify({ sql: '^SELECT id FROM .*memory WHERE subject = \\$1$|SELECT DISTINCT CASE', nth: 2, when: 'pause', held, resume }),
      });
      try {
        for (let t = 0; t < 600 && !existsSync(held); t++) await new Promise((r) => setTimeout(r, 50));
        expect(readFileSync(held, 'utf8')).toMatch(/^SELECT id FROM/);
        if (changed) {
          await db.client.query(`DELETE FROM fleet.memory WHERE id = 'oth-1'`);
          await fillPg(db.client, 'fleet', [
            { id: 'pat-3', subject: 'patricia', fact: 'Patricia fact three', source: 'src-new-shared' },
            { id: 'pat-4', subject: 'patricia', fact: 'Patricia fact four', source: 'src-new-theirs' },
            { id: 'oth-3', subject: 'otto', fact: 'Otto fact three', source: 'src-new-shared' },
          ]);
        }
      } finally {
        writeFileSync(resume, ''); // the process goes on (and ends) whatever failed here
      }
      const out = await run;
      expect(out.code, out.stderr + out.stdout).toBe(0);
      const r = out.json();
      const fieldReads = readFileSync(log, 'utf8').split('\n').filter((l) => l.startsWith('SELECT DISTINCT CASE')).length;
      const pat = changed ? ['pat-1', 'pat-2', 'pat-3', 'pat-4'] : ['pat-1', 'pat-2'];
      expect(r.memories).toBe(pat.length);
      // Needles: the facts, the ids, and the fields only the person has.
      const theirs = changed ? ['patricia', 'src-gone', 'src-new-theirs'] : ['patricia', 'src-gone', 'src-stays'];
      expect(r.bytes.needles).toBe(pat.length * 2 + theirs.length);
      expect(r.bytes.verdict).toBe('clean');
      // Unchanged, the plan settled every field: the table was read for them once; changed, again for what was open.
      expect(fieldReads).toBe(changed ? 2 : 1);
      expect(await ids(db, 'fleet')).toEqual(changed ? ['oth-2', 'oth-3'] : ['oth-1', 'oth-2']);
      expect((await bytesOf(db.url, 'fleet', texts(base(changed).filter((x) => x.id.startsWith('pat-'))))).verdict).toBe('clean');
      await db.drop();
      db = undefined;
    }
  });

  it('native PG 15: four agent processes writing over their own connections during the erase keep every write', async () => {
    db = await createTestDatabase('pg_erase_agents');
    const store = pgStoreConfig(db, { postgres: { batchSize: 50 } });
    await initPgStore(store);
    await db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) SELECT 'p-' || g, 'pat', 'Pat said thing ' || g, 'message' FROM generate_series(1, 3000) g`);
    await db.client.query(`UPDATE fleet.memory SET superseded_by = 'p-' || (split_part(id, '-', 2)::int + 1) WHERE split_part(id, '-', 2)::int % 10 <> 0`);
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
    const r = await store.run(['erase', '--user', 'pat', '--store', 'fleet', '--json']);
    for (const a of agents) a.child.kill('SIGTERM');
    const reports = (await Promise.all(agents.map((a) => a.done))).map((o) => JSON.parse(o.trim().split('\n').at(-1)!) as { writes: number; errors: string[]; live: string[] });
    expect(r.code, r.stderr).toBe(0);
    expect(r.json().memories).toBe(3000);
    for (const rep of reports) {
      expect(rep.errors).toEqual([]);
      expect(rep.writes).toBeGreaterThan(0);
      // Every memory each agent left live is there.
      expect(await ids(db, 'fleet', `id = ANY(ARRAY[${rep.live.map((id) => `'${id}'`).join(',')}]::text[])`)).toEqual([...rep.live].sort());
    }
    expect(await ids(db, 'fleet', `subject = 'pat'`)).toEqual([]);
  });

  it('native PG 15 with Qdrant beside it: the erased rows\' points and a stray copy of a text go, a surviving row\'s point stays; the receipt is kept (erase receipts), without a snapshot folder', async () => {
    const q = await qdrantTarget();
    try {
      db = await createTestDatabase('pg_erase_qdrant');
      const coll = q.name('memories');
      const store = pgStoreConfig(db, { extra: { stores: { fleet: { engine: 'postgres', postgres: { url: `\${${URL_VAR}}`, schema: 'fleet' }, qdrant: { url: q.url, ...(q.apiKey ? { apiKey: q.apiKey } : {}), collections: [coll] } } } } });
      await initPgStore(store);
      await fillPg(db.client, 'fleet', rows());
      await q.createCollection(coll);
      const pointed = ['ann-1', 'ann-3', 'bob-old-2', 'bob-1', 'bob-2'];
      await q.upsert(coll, [
        // ann-1's own point holds its text: the row's delete takes it, not the sweep.
        ...pointed.map((id, i) => ({ id: i + 1, payload: { memory_id: id, text: id === 'ann-1' ? rows()[0]!.fact : `row ${id}` } })),
        { id: 99, payload: { memory_id: 'gone', text: rows()[4]!.fact } }, // an orphan copy of Ann's text
        { id: 98, payload: { memory_id: 'bob-1', text: rows()[5]!.fact } }, // Bob's point repeating Ann's text: stays
      ]);
      // A dry run counts the stray copy the erase then deletes, and deletes nothing.
      const dry = await store.run(['erase', '--user', 'ann', '--store', 'fleet', '--dry-run', '--json']);
      expect(dry.code, dry.stderr + dry.stdout).toBe(0);
      expect(dry.json()).toMatchObject({ memories: 35, counts: { rows: 35, cascaded: 5, strayPoints: 1 } });
      expect((await q.points(coll)).length).toBe(pointed.length + 2);
      expect((await ids(db, 'fleet')).length).toBe(rows().length);
      const r = await store.run(['erase', '--user', 'ann', '--store', 'fleet', '--json']);
      expect(r.code, r.stderr + r.stdout).toBe(0);
      expect(r.json()).toMatchObject({ memories: 35, counts: { rows: 35, cascaded: 5, strayPoints: 1 }, snapshots: { found: [], deleted: [] } });
      expect(r.json().counts).toMatchObject(dry.json().counts);
      expect((await q.points(coll)).map((p) => p.payload.memory_id).sort()).toEqual(['bob-1', 'bob-1', 'bob-2']);
      const receipts = await store.run(['erase', 'receipts', '--store', 'fleet', '--user', 'ann', '--json']);
      expect(receipts.code, receipts.stderr).toBe(0);
      expect(receipts.json()).toMatchObject([{ store: 'fleet', selector: 'user', memories: 35 }]);
      expect(JSON.parse(receipts.json()[0].counts)).toMatchObject({ bytesLeft: 0, bytesUnverified: 0 });
      expect(receipts.stdout).not.toContain('Ann');
      q.assertConforms();
    } finally {
      await q.close();
    }
  });

  it('native PG 15: erasedIn names what the ledger took when the rows come back (as a restore brings them), reads only', async () => {
    db = await createTestDatabase('pg_erased_in');
    const store = pgStoreConfig(db);
    await initPgStore(store);
    await fillPg(db.client, 'fleet', rows());
    const session = openPgSession('fleet', { url: db.url, schema: 'fleet', lockTimeoutMs: 50, batchSize: 500, batchMs: 20 });
    const handle = { engine: 'postgres', name: 'fleet', config: {} as never, path: 'postgres schema fleet', schema: '"fleet"', pg: session, close: () => session.end() } as PostgresStoreHandle;
    try {
      const ledger = { id: (id: string) => id === 'bob-3' || id === 'gone', user: (u: string) => u === 'ann' };
      expect(await wardenErasedInPg(handle, ledger)).toEqual([{ ids: ['bob-3'] }, { user: 'ann' }]);
      expect((await ids(db, 'fleet')).length).toBe(rows().length);
      // The job the worker runs takes the store too (a dry run here: nothing changes).
      const job = await store.run(['run', 'erase', '--user', 'bob', '--store', 'fleet', '--dry-run', '--json']);
      expect(job.code, job.stderr).toBe(0);
      expect(job.json()).toMatchObject({ dryRun: true, memories: 25 });
      expect((await ids(db, 'fleet')).length).toBe(rows().length);
    } finally {
      await session.end();
    }
  });

  it('PGlite (PostgreSQL 18): erase --user deletes the person, VACUUM FULL runs and the byte check reads the files through pg_read_binary_file: clean', async () => {
    const server = await startPgvectorServer();
    try {
      const fake = { url: server.url, name: 'pglite', client: undefined as never, drop: async () => {} };
      const store: PgStore = pgStoreConfig(fake);
      await initPgStore(store);
      const c = new pg.Client({ connectionString: server.url });
      await c.connect();
      try {
        await fillPg(c, 'fleet', rows());
      } finally {
        await c.end();
      }
      const r = await store.run(['erase', '--user', 'ann', '--store', 'fleet', '--json']);
      expect(r.code, r.stderr + r.stdout).toBe(0);
      const receipt = r.json();
      expect(receipt.memories).toBe(35);
      expect(receipt.bytes.verdict).toBe('clean');
      expect(receipt.bytes.relations).toBeGreaterThan(0);
      expect((await bytesOf(server.url, 'fleet', annTexts())).verdict).toBe('clean');
      const left = await cliAsync(['check', '--store', 'fleet', '--json', '--config', store.config], { [URL_VAR]: server.url });
      expect(left.json().rows).toBe(rows().length - 35);
    } finally {
      await server.stop();
    }
  });
});
