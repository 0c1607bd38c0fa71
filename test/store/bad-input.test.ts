import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { makeStore, tempDir, type Row } from '../helpers/store.js';
import { cli } from '../helpers/cli.js';

/**
 * Every command against every kind of bad file: exit 2, one line on stderr naming the file, and the file's bytes
 * and mtime unchanged. The same table for each command, so a new command or a new fault is one line.
 */
const ROWS: Row[] = Array.from({ length: 2000 }, (_, i) => ({
  id: `m${i}`, fact: `fact ${i} ${'x'.repeat(150)}`, expires_at: i % 2 ? '2020-01-01 00:00:00' : null,
  superseded_by: i % 7 === 3 ? 'gone' : null,
}));

const COMMANDS: Record<string, (db: string, cfg: string) => string[]> = {
  check: (db, cfg) => ['check', '--config', cfg, '--db', db],
  init: (db) => ['init', '--db', db],
  'run prune': (db, cfg) => ['run', 'prune', '--config', cfg, '--db', db],
  'run integrity': (db, cfg) => ['run', 'integrity', '--config', cfg, '--db', db],
  'repair dangling': (db, cfg) => ['repair', 'dangling', '--config', cfg, '--db', db],
  'repair timestamps': (db, cfg) => ['repair', 'timestamps', '--config', cfg, '--db', db],
  'review list': (db, cfg) => ['review', 'list', '--config', cfg, '--db', db],
  'review confirm': (db, cfg) => ['review', 'confirm', 'm2', '--config', cfg, '--db', db],
  'review delete': (db, cfg) => ['review', 'delete', 'm2', '--config', cfg, '--db', db],
  'digest --preview': (db, cfg) => ['digest', '--preview', '--config', cfg, '--db', db],
  'digest --send': (db, cfg) => ['digest', '--send', '--config', cfg, '--db', db],
  erase: (db, cfg) => ['erase', '--ids', 'm2', '--config', cfg, '--db', db],
};

/** A healthy store in rollback-journal mode (so an exclusive lock keeps readers out too), rebuilt per case. */
function healthy(path: string): string {
  makeStore(path, ROWS);
  const db = new Database(path);
  db.pragma('journal_mode = DELETE');
  db.close();
  return path;
}

/** A fault's store: a file of just these bytes. */
const fileOf = (bytes: string) => (dir: string): string => {
  const db = join(dir, 'm.db');
  writeFileSync(db, bytes);
  return db;
};

/** The commands every fault is tried on; the first faults below go through all of COMMANDS. */
const SOME = ['check', 'init', 'run prune', 'review confirm', 'digest --preview', 'erase'];

interface Fault {
  /** Makes the bad file (or the healthy store, for faults elsewhere) and returns the path to give --db. */
  make(dir: string): string;
  /** What must appear on the one stderr line: the file at fault. */
  names(dir: string, db: string): string;
  /** Files whose bytes and mtime must not change. */
  watch(dir: string, db: string): string[];
  /** Which commands: all of COMMANDS, or SOME (a fault that fails at open behaves alike in every command). */
  only?: string[];
  skip?: string[];
}

const FAULTS: Record<string, Fault> = {
  'a corrupt page in the middle': {
    make(dir) {
      const db = healthy(join(dir, 'm.db'));
      const bytes = readFileSync(db);
      const page = bytes.readUInt16BE(16);
      const middle = Math.floor(bytes.length / page / 2);
      bytes.fill(0x5a, middle * page, (middle + 3) * page);
      writeFileSync(db, bytes);
      return db;
    },
    names: (_, db) => db,
    watch: (_, db) => [db],
  },
  'a truncated file': {
    make(dir) {
      const db = healthy(join(dir, 'm.db'));
      truncateSync(db, Math.floor(statSync(db).size / 3));
      return db;
    },
    names: (_, db) => db,
    watch: (_, db) => [db],
    only: SOME,
  },
  'a SQLite header over garbage': {
    make(dir) {
      const db = join(dir, 'm.db');
      writeFileSync(db, Buffer.concat([Buffer.from('SQLite format 3\0', 'latin1'), Buffer.alloc(8192, 0x41)]));
      return db;
    },
    names: (_, db) => db,
    watch: (_, db) => [db],
    only: SOME,
  },
  // SQLite's unix VFS reports a one-byte file as empty: it would have taken it for a new database.
  'a one-byte file': { make: fileOf('x'), names: (_, db) => db, watch: (_, db) => [db] },
  'a two-byte file': { make: fileOf('xy'), names: (_, db) => db, watch: (_, db) => [db], only: SOME },
  'a directory': {
    make(dir) {
      const db = join(dir, 'm.db');
      mkdirSync(db);
      return db;
    },
    names: (_, db) => db,
    watch: () => [],
    only: SOME,
  },
  'a path under a missing folder': {
    make: (dir) => join(dir, 'nowhere', 'm.db'),
    names: (_, db) => db,
    watch: () => [],
    only: SOME,
  },
  'a store another process holds exclusively past the busy timeout': {
    make: (dir) => healthy(join(dir, 'm.db')),
    names: (_, db) => db,
    watch: (_, db) => [db],
    // init takes no --config, so it would wait the default 5 s: the other commands cover the lock.
    skip: ['init'],
  },
  'a one-byte state db': {
    make(dir) {
      const db = healthy(join(dir, 'm.db'));
      writeFileSync(join(dir, 'state.db'), '\0');
      return db;
    },
    names: (dir) => join(dir, 'state.db'),
    watch: (dir, db) => [db, join(dir, 'state.db')],
    skip: ['check', 'init', 'repair dangling', 'repair timestamps'],
  },
  'a corrupt state db': {
    make(dir) {
      const db = healthy(join(dir, 'm.db'));
      writeFileSync(join(dir, 'state.db'), 'not a state db\n'.repeat(50));
      return db;
    },
    names: (dir) => join(dir, 'state.db'),
    watch: (dir, db) => [db, join(dir, 'state.db')],
    // These never read the state db.
    skip: ['check', 'init', 'repair dangling', 'repair timestamps'],
  },
};

const fingerprint = (path: string) => ({ bytes: readFileSync(path).toString('base64'), mtime: statSync(path).mtimeMs });

describe.each(Object.entries(FAULTS))('%s', (faultName, fault) => {
  let dir: string;
  let cleanup: () => void;
  let holder: ChildProcess | undefined;
  beforeAll(() => ({ dir, cleanup } = tempDir()));
  afterAll(() => {
    holder?.kill('SIGKILL');
    cleanup();
  });

  const commands = (fault.only ?? Object.keys(COMMANDS)).filter((c) => !fault.skip?.includes(c));
  it.each(commands)('%s: exit 2, one line naming the file, nothing changed', async (name) => {
    const caseDir = join(dir, name.replace(/\W+/g, '-'));
    mkdirSync(caseDir);
    const cfg = join(caseDir, 'warden.yaml');
    writeFileSync(cfg, 'busyTimeoutMs: 150\nsmtp: { host: 127.0.0.1, port: 9 }\ndigest:\n  to: [ops@example.org]\n');
    const db = fault.make(caseDir);
    if (faultName.includes('exclusively')) holder = await holdExclusive(db);
    const before = fault.watch(caseDir, db).map(fingerprint);
    const r = cli(COMMANDS[name]!(db, cfg), { MEMORY_WARDEN_STATE: join(caseDir, 'state.db') });
    holder?.kill('SIGKILL');
    holder = undefined;
    expect(r.code, r.stderr).toBe(2);
    const lines = r.stderr.trim().split('\n');
    expect(lines, r.stderr).toHaveLength(1);
    expect(lines[0]).toContain(fault.names(caseDir, db));
    expect(fault.watch(caseDir, db).map(fingerprint)).toEqual(before);
    if (!existsSync(db)) expect(existsSync(join(caseDir, 'nowhere'))).toBe(false);
    if (name === 'digest --send' && !faultName.includes('state db')) expect(claimedDigests(join(caseDir, 'state.db'))).toBe(0);
  });
});

/** Digest deliveries claimed in a state db (none when it was never created). */
function claimedDigests(path: string): number {
  if (!existsSync(path)) return 0;
  const state = new Database(path, { readonly: true });
  try {
    const has = state.prepare(`SELECT 1 FROM sqlite_schema WHERE name = 'digest_deliveries'`).get();
    return has ? (state.prepare('SELECT count(*) FROM digest_deliveries').pluck().get() as number) : 0;
  } finally {
    state.close();
  }
}

/** Another process holding an exclusive lock on the store until it is killed. */
async function holdExclusive(db: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['-e', `
    const Database = require(${JSON.stringify(createRequire(import.meta.url).resolve('better-sqlite3'))});
    const db = new Database(${JSON.stringify(db)});
    db.exec('BEGIN EXCLUSIVE');
    db.prepare('SELECT count(*) FROM memory').get();
    process.stdout.write('held\\n');
    setInterval(() => {}, 1000);`], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve) => child.stdout!.once('data', () => resolve()));
  return child;
}

describe('init on a store that fails integrity_check', () => {
  it('refuses, exit 2, and migrates nothing even when a migration is due', { timeout: 120_000 }, () => {
    const { dir, cleanup } = tempDir();
    try {
      const db = join(dir, 'old.db');
      const d = new Database(db);
      d.exec(`CREATE TABLE memory (id TEXT PRIMARY KEY, subject TEXT NOT NULL, fact TEXT NOT NULL)`);
      const insert = d.prepare('INSERT INTO memory VALUES (?, ?, ?)');
      for (let i = 0; i < 3000; i++) insert.run(`m${i}`, 'user', `fact ${i} ${'y'.repeat(200)}`);
      d.close();
      const bytes = readFileSync(db);
      const page = bytes.readUInt16BE(16);
      bytes.fill(0, 60 * page, 62 * page);
      writeFileSync(db, bytes);
      copyFileSync(db, join(dir, 'before.db'));
      const before = fingerprint(db);
      const r = cli(['init', '--db', db], { MEMORY_WARDEN_STATE: join(dir, 'state.db') });
      expect(r.code).toBe(2);
      expect(r.stderr.trim()).toMatch(new RegExp(`^memory-warden: .*${db.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}.*(integrity_check failed|malformed)`));
      expect(fingerprint(db)).toEqual(before);
      expect(existsSync(`${db}-wal`)).toBe(false);
    } finally {
      cleanup();
    }
  });
});

describe('init --create over a file that is there', () => {
  const { dir, cleanup } = tempDir('mw-create-');
  afterAll(cleanup);

  it('never writes a store over a file SQLite would read as empty (one byte) or cannot read', () => {
    for (const [name, bytes] of [['one', 'x'], ['nul', '\0'], ['short', 'abc'], ['text', 'my notes\n'.repeat(20)]] as const) {
      const db = join(dir, `${name}.db`);
      writeFileSync(db, bytes);
      const before = fingerprint(db);
      const r = cli(['init', '--db', db, '--create'], { MEMORY_WARDEN_STATE: join(dir, 'state.db') });
      expect(r.code, name).toBe(2);
      expect(r.stderr.trim().split('\n'), name).toHaveLength(1);
      expect(r.stderr).toContain(db);
      expect(fingerprint(db), name).toEqual(before);
    }
  });

  it('an empty file or no file is made a store', () => {
    for (const name of ['empty', 'new']) {
      const db = join(dir, `${name}.db`);
      if (name === 'empty') writeFileSync(db, '');
      const r = cli(['init', '--db', db, '--create'], { MEMORY_WARDEN_STATE: join(dir, 'state.db') });
      expect(r.code, r.stderr).toBe(0);
      expect(readFileSync(db).subarray(0, 16).toString('latin1')).toBe('SQLite format 3\0');
    }
  });
});
