import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { spawn } from 'node:child_process';
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
// Only the state db: that every table is there cannot depend on which feature module was imported.
import { openStateDb } from '../../src/state/state.js';
import { migrateState } from '../../src/state/migrate.js';
import { STATE_MIGRATIONS, STATE_VERSION } from '../../src/state/migrations/index.js';
import { WardenError } from '../../src/core/errors.js';
import { ids, makeStore, tempDir } from '../helpers/store.js';
import { cli } from '../helpers/cli.js';
import { V0_ROWS, V0_TABLES } from './v0-schema.js';

const TABLES = ['digest_deliveries', 'digest_texts', 'drift_verdicts', 'erase_key', 'erase_needles', 'erase_receipt_places', 'erase_receipts', 'erased_snapshots', 'job_runs', 'queue_use', 'state_compaction', 'warden_deletions'];
/** Tables and indexes the numbered steps after the first five add: never in a state db from before numbering. */
const LATER = new Set(['erase_needles', 'erased_snapshots', 'digest_texts', 'job_runs_by_scheduled_run', 'erase_key', 'state_compaction', 'queue_use', 'sqlite_autoindex_queue_use_1']);
/** Columns those steps add to a table of before numbering (ALTER TABLE ADD COLUMN appends them to its SQL). */
const LATER_COLUMNS: Record<string, string[]> = { job_runs: ['scheduled_run TEXT', 'pid INTEGER'], erase_receipts: ['selector_sha256 TEXT', 'ids_sha256 TEXT', 'key_id TEXT'] };
/** Columns a later step dropped from a table of before numbering (009: the unkeyed digests; it adds them back, keyed). */
const DROPPED_COLUMNS: Record<string, string[]> = { erase_receipts: ['selector_sha256 TEXT NOT NULL', 'ids_sha256 TEXT NOT NULL'] };
const withoutLaterColumns = (r: { type: string; name: string; sql: string }) =>
  r.type === 'table' && LATER_COLUMNS[r.name] ? { ...r, sql: LATER_COLUMNS[r.name]!.reduce((sql, col) => sql.replace(`, ${col}`, ''), r.sql).replace(/ \)/g, ')') } : r;
const withoutDroppedColumns = (r: { type: string; name: string; sql: string }) =>
  r.type === 'table' && DROPPED_COLUMNS[r.name] ? { ...r, sql: DROPPED_COLUMNS[r.name]!.reduce((sql, col) => sql.replace(` ${col},`, ''), r.sql) } : r;
/** A row of before numbering as it reads once upgraded: the later columns null (009's unkeyed digests too: dropped). */
const upgradedRows = (rows: Record<string, unknown[]>) =>
  Object.fromEntries(Object.entries(rows).map(([t, list]) => [t, LATER_COLUMNS[t] ? list.map((row) => ({ ...(row as object), ...Object.fromEntries(LATER_COLUMNS[t]!.map((c) => [c.split(' ')[0], null])) })) : list]));

let tmp: { dir: string; cleanup: () => void };
beforeEach(() => {
  tmp = tempDir('mw-state-');
});
afterEach(() => tmp.cleanup());

const raw = <T>(path: string, fn: (db: Database.Database) => T): T => {
  const db = new Database(path);
  try {
    return fn(db);
  } finally {
    db.close();
  }
};

const versionOf = (path: string) => raw(path, (db) => db.pragma('user_version', { simple: true }) as number);

/** Every table and index with its SQL, whitespace aside: what two state dbs must agree on to be the same schema. */
const schemaOf = (path: string) =>
  raw(path, (db) =>
    (db.prepare(`SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name`).all() as { type: string; name: string; sql: string }[])
      .map((r) => ({ ...r, sql: r.sql.replace(/\s+/g, ' ').replace(/\( /g, '(').replace(/ \)/g, ')') })));

const tablesOf = (path: string) => schemaOf(path).filter((r) => r.type === 'table').map((r) => r.name);

/** Every row of every table, to compare before and after an upgrade. */
const rowsOf = (path: string, tables: string[]) => raw(path, (db) => Object.fromEntries(tables.map((t) => [t, db.prepare(`SELECT * FROM ${t} ORDER BY rowid`).all()])));

/** A state db as the code before numbering left it: these tables in this order, one row each, version 0. */
function v0StateDb(path: string, tables: string[]): string {
  raw(path, (db) => {
    db.pragma('journal_mode = WAL');
    for (const t of tables) for (const sql of V0_TABLES[t]!) db.exec(sql);
    for (const t of tables) db.exec(V0_ROWS[t]!);
  });
  return path;
}

function freshStateDb(name = 'fresh.db'): string {
  const path = join(tmp.dir, name);
  openStateDb(path).close();
  return path;
}

describe('state db migrations', () => {
  it('a new state db gets every table and index, at the last version', () => {
    const path = freshStateDb();
    expect(tablesOf(path)).toEqual(TABLES);
    expect(versionOf(path)).toBe(STATE_VERSION);
    expect(STATE_VERSION).toBe(STATE_MIGRATIONS.length);
    // The same schema the code before numbering made, statement for statement.
    const v0 = v0StateDb(join(tmp.dir, 'v0.db'), Object.keys(V0_TABLES));
    expect(schemaOf(path).filter((r) => !LATER.has(r.name)).map(withoutLaterColumns)).toEqual(schemaOf(v0).map(withoutDroppedColumns));
  });

  it('the folder and the list agree: every NNN-*.ts file is listed, in order, numbered from 1 without gaps', () => {
    const dir = fileURLToPath(new URL('../../src/state/migrations/', import.meta.url));
    const files = readdirSync(dir).filter((f) => f !== 'index.ts').sort();
    expect(files.every((f) => /^\d{3}-[a-z0-9-]+\.ts$/.test(f))).toBe(true);
    expect(STATE_MIGRATIONS.map((m) => `${m.file}.ts`)).toEqual(files);
    expect(STATE_MIGRATIONS.map((m) => Number(m.file.slice(0, 3)))).toEqual(STATE_MIGRATIONS.map((_, i) => i + 1));
    expect(STATE_MIGRATIONS.map((m) => m.version)).toEqual(STATE_MIGRATIONS.map((_, i) => i + 1));
  });

  it.each([
    ['every table', Object.keys(V0_TABLES)],
    ['made by a worker that never erased', ['job_runs', 'drift_verdicts', 'digest_deliveries']],
    ['made by erase first', ['erase_receipts', 'erase_receipt_places', 'warden_deletions', 'job_runs']],
    ['job runs only', ['job_runs']],
    ['no table yet', []],
  ])('a state db of the code before numbering (%s) upgrades in place, every row kept', (_, tables) => {
    const path = v0StateDb(join(tmp.dir, 'state.db'), tables);
    const before = upgradedRows(rowsOf(path, tables));
    expect(versionOf(path)).toBe(0);

    openStateDb(path).close();
    expect(versionOf(path)).toBe(STATE_VERSION);
    expect(tablesOf(path)).toEqual(TABLES);
    expect(rowsOf(path, tables)).toEqual(before);
    expect(schemaOf(path)).toEqual(schemaOf(freshStateDb()));

    // Opened again: nothing to do, nothing lost; the tables work as before (the receipt's places cascade).
    const db = openStateDb(path);
    try {
      expect(rowsOf(path, tables)).toEqual(before);
      expect(db.prepare('PRAGMA foreign_key_check').all()).toEqual([]);
      if (tables.includes('erase_receipt_places')) {
        db.prepare('DELETE FROM erase_receipts WHERE id = 5').run();
        expect(db.prepare('SELECT count(*) AS n FROM erase_receipt_places').get()).toEqual({ n: 0 });
      }
    } finally {
      db.close();
    }
  });

  it.each([
    ['one step ahead, every table', STATE_VERSION + 1, Object.keys(V0_TABLES)],
    ['far ahead, no table', 99, []],
  ])('a state db newer than this build (%s) is refused in one line naming it, and left as it was', (_, version, tables) => {
    const path = v0StateDb(join(tmp.dir, 'state.db'), tables);
    raw(path, (db) => db.pragma(`user_version = ${version}`));
    const schema = schemaOf(path);

    let thrown: unknown;
    try {
      openStateDb(path).close();
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(WardenError);
    const err = thrown as WardenError;
    expect(err.kind).toBe('store');
    expect(err.transient).toBe(false);
    expect(err.message).toContain(path);
    expect(err.message).toContain(`version ${version}`);
    expect(err.message).toContain(`(${STATE_VERSION})`);
    expect(err.message).not.toContain('\n');
    expect(versionOf(path)).toBe(version);
    expect(schemaOf(path)).toEqual(schema);
  });

  it('the CLI refuses it before touching the store: one line, exit 2, the memories still there', () => {
    const state = v0StateDb(join(tmp.dir, 'state.db'), Object.keys(V0_TABLES));
    raw(state, (db) => db.pragma(`user_version = ${STATE_VERSION + 1}`));
    const store = makeStore(join(tmp.dir, 'memory.db'), [
      { id: 'a1', subject: 'alice', fact: 'Alice takes insulin daily' },
      { id: 'old', subject: 'x', fact: 'expired', expires_at: '2020-01-01T00:00:00.000Z' },
    ]);
    const config = join(tmp.dir, 'config.yaml');
    writeFileSync(config, `stateDb: ${state}\nsnapshot:\n  root: ${join(tmp.dir, 'backups')}\nstores:\n  agent:\n    db: ${store}\n`);
    for (const args of [['erase', '--subject', 'insulin'], ['run', 'prune']]) {
      const r = cli([...args, '--config', config, '--store', 'agent']);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toContain(state);
      expect(r.stderr).toContain(`version ${STATE_VERSION + 1}`);
    }
    expect(ids(store)).toEqual(['a1', 'old']);
    expect(versionOf(state)).toBe(STATE_VERSION + 1);
  });

  it('a later step runs once, after the steps a db has; a failing step leaves the db as it was', () => {
    const path = freshStateDb('state.db');
    // Plain CREATE TABLE: it would fail if run twice.
    const next = [...STATE_MIGRATIONS, { version: STATE_VERSION + 1, file: '999-test', sql: 'CREATE TABLE later (x TEXT NOT NULL)' }];
    const db = openStateDb(path);
    try {
      expect(migrateState(db, path, next)).toBe(STATE_VERSION + 1);
      expect(migrateState(db, path, next)).toBe(STATE_VERSION + 1);
    } finally {
      db.close();
    }
    expect(tablesOf(path)).toContain('later');
    expect(versionOf(path)).toBe(STATE_VERSION + 1);

    // From nothing, every step in one transaction: the last one fails, none of the others stays.
    const empty = join(tmp.dir, 'empty.db');
    raw(empty, (d) => d.pragma('journal_mode = WAL'));
    const broken = [...STATE_MIGRATIONS, { version: STATE_VERSION + 1, file: '999-broken', sql: 'CREATE TABLE job_runs (x)' }];
    const handle = new Database(empty);
    try {
      expect(() => migrateState(handle, empty, broken)).toThrow(/999-broken.*job_runs already exists/);
    } finally {
      handle.close();
    }
    expect(schemaOf(empty)).toEqual([]);
    expect(versionOf(empty)).toBe(0);
  });

  it('opening an up-to-date state db takes no write lock: it works while a writer holds one', () => {
    const path = freshStateDb('state.db');
    const writer = new Database(path);
    try {
      writer.exec('BEGIN IMMEDIATE');
      writer.exec(V0_ROWS.job_runs!);
      const db = openStateDb(path);
      try {
        expect(db.prepare('SELECT count(*) AS n FROM job_runs').get()).toEqual({ n: 0 }); // not committed yet
      } finally {
        db.close();
      }
      writer.exec('COMMIT');
    } finally {
      writer.close();
    }
  });

  /** Four processes load the code, then are started together on one new state db; each writes a job run. */
  async function race(path: string, open: string, version: number): Promise<void> {
    const dist = (p: string) => JSON.stringify(fileURLToPath(new URL(`../../dist/src/${p}`, import.meta.url)));
    const child = `
      const { openStateDb, recordRunStart } = await import(${dist('state/state.js')});
      const { openHandle, setJournalMode } = await import(${dist('store/sqlite.js')});
      const { migrateState } = await import(${dist('state/migrate.js')});
      const { STATE_MIGRATIONS } = await import(${dist('state/migrations/index.js')});
      process.stdout.write('ready\\n');
      process.stdin.once('data', () => {
        const path = process.argv[1];
        const db = ${open};
        recordRunStart(db, 'probe', String(process.pid), Date.now());
        process.stdout.write('version ' + db.pragma('user_version', { simple: true }) + '\\n');
        db.close();
        process.exit(0);
      });`;
    const procs = Array.from({ length: 4 }, () => spawn(process.execPath, ['--input-type=module', '-e', child, path], { stdio: ['pipe', 'pipe', 'pipe'] }));
    const outcomes = procs.map((p) => {
      let out = '';
      let err = '';
      p.stdout.on('data', (d: Buffer) => (out += d.toString()));
      p.stderr.on('data', (d: Buffer) => (err += d.toString()));
      const ready = new Promise<void>((resolve) => p.stdout.on('data', () => out.includes('ready') && resolve()));
      const done = new Promise<{ code: number | null; out: string; err: string }>((resolve) => p.on('close', (code) => resolve({ code, out, err })));
      return { ready, done };
    });
    await Promise.all(outcomes.map((o) => o.ready));
    for (const p of procs) p.stdin.end('go\n');
    for (const r of await Promise.all(outcomes.map((o) => o.done))) {
      expect(r.err).toBe('');
      expect(r.code).toBe(0);
      expect(r.out).toContain(`version ${version}`);
    }
    expect(raw(path, (db) => db.prepare(`SELECT count(*) AS n FROM job_runs WHERE job = 'probe'`).get())).toEqual({ n: 4 });
  }

  it('processes opening a new state db together all get it whole (the version is read under the write lock)', async () => {
    for (let round = 0; round < 3; round++) {
      const path = join(tmp.dir, `race-${round}`, 'state.db');
      await race(path, 'openStateDb(path)', STATE_VERSION);
      expect(tablesOf(path)).toEqual(TABLES);
    }
    // A step without IF NOT EXISTS fails if two processes both apply it: each must see the other's version.
    const once = `{ version: STATE_MIGRATIONS.length + 1, file: '999-once', sql: 'CREATE TABLE once (x)' }`;
    for (let round = 0; round < 3; round++) {
      const path = join(tmp.dir, `race-once-${round}.db`);
      writeFileSync(path, '');
      // As openStateDb opens it (setJournalMode: a bare PRAGMA is busy at once while another process writes).
      await race(path, `(() => { const db = openHandle(path, { timeout: 5000 }); setJournalMode(db, 'wal'); migrateState(db, path, [...STATE_MIGRATIONS, ${once}]); return db; })()`, STATE_VERSION + 1);
      expect(tablesOf(path)).toEqual([...TABLES, 'once'].sort());
    }
  });
});
