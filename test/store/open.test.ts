import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from '../helpers/store.js';
import { cli } from '../helpers/cli.js';
import { storeSelector } from '../../src/layouts/open.js';
import { storeSchema } from '../../src/store/config.js';

/** Bytes and mtime of a file, to prove a refused command left it untouched. */
function fingerprint(path: string) {
  return { bytes: readFileSync(path), mtime: statSync(path).mtimeMs };
}

// Each case spawns the CLI several times: on a loaded machine that takes longer than the default 30 s.
describe('refusing what is not a memory store', { timeout: 120_000 }, () => {
  let dir: string;
  let cleanup: () => void;
  let env: Record<string, string>;
  beforeEach(() => {
    ({ dir, cleanup } = tempDir());
    env = { MEMORY_WARDEN_STATE: join(dir, 'state.db') };
  });
  afterEach(() => cleanup());

  const commands = (db: string) => [
    ['check', '--db', db],
    ['run', 'prune', '--db', db],
    ['run', 'integrity', '--db', db],
    ['repair', 'dangling', '--db', db],
    ['repair', 'timestamps', '--db', db],
  ];

  it('a missing path is a clear error, exit 2, and no file appears', () => {
    const db = join(dir, 'missing.db');
    for (const args of [...commands(db), ['init', '--db', db]]) {
      const r = cli(args, env);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(/missing\.db: no such store/);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(existsSync(db)).toBe(false);
    }
  });

  it('a file that is not SQLite: exit 2, untouched', () => {
    const file = join(dir, 'notes.db');
    writeFileSync(file, 'these are my notes, not a database\n'.repeat(100));
    const before = fingerprint(file);
    for (const args of [...commands(file), ['init', '--db', file]]) {
      const r = cli(args, env);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(/notes\.db: not a SQLite database/);
    }
    expect(fingerprint(file)).toEqual(before);
    expect(existsSync(`${file}-wal`)).toBe(false);
  });

  it('a SQLite file without the memory table or its columns: exit 2 naming what is missing, untouched', () => {
    const other = join(dir, 'other.db');
    const d1 = new Database(other);
    d1.exec('CREATE TABLE messages (id INTEGER PRIMARY KEY, content TEXT); INSERT INTO messages (content) VALUES (\'hi\')');
    d1.close();
    const old = join(dir, 'old.db');
    const d2 = new Database(old);
    d2.exec(`CREATE TABLE memory (id TEXT PRIMARY KEY, subject TEXT NOT NULL, fact TEXT NOT NULL); INSERT INTO memory VALUES ('m1', 'u', 'likes tea')`);
    d2.close();
    const beforeOther = fingerprint(other);
    const beforeOld = fingerprint(old);
    for (const args of commands(other)) {
      const r = cli(args, env);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(/other\.db: no table "memory"/);
    }
    for (const args of commands(old)) {
      const r = cli(args, env);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(/old\.db: table memory is missing columns source, created_at, confirmed_at, expires_at, superseded_by/);
    }
    expect(fingerprint(other)).toEqual(beforeOther);
    expect(fingerprint(old)).toEqual(beforeOld);
  });

  it('a bad config field is one line naming its path, exit 2', () => {
    const cfg = join(dir, 'c.yaml');
    writeFileSync(cfg, 'prune:\n  batchSize: lots\n');
    const r = cli(['check', '--config', cfg, '--db', join(dir, 'x.db')], env);
    expect(r.code).toBe(2);
    expect(r.stderr.trim()).toMatch(/^memory-warden: config .*c\.yaml: prune\.batchSize: .*expected number/);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });
});

describe('how a pasted command names a store', () => {
  it('by --db when the path says everything, by --store when config says more', () => {
    const parse = (raw: unknown) => storeSchema.parse(raw);
    expect(storeSelector('m', parse({ db: '/var/lib/agent/m.db' }), true)).toEqual({ flag: '--db', value: '/var/lib/agent/m.db' });
    expect(storeSelector('m', parse({ db: '/var/lib/agent/m.db', layout: 'warden' }), true)).toEqual({ flag: '--db', value: '/var/lib/agent/m.db' });
    // Without the config, --db would miss the vectors (a delete would orphan them) or read mem0 as the brief's table.
    expect(storeSelector('agent', parse({ db: '/m.db', qdrant: { url: 'http://127.0.0.1:6333', collections: ['memories'] } }), true)).toEqual({ flag: '--store', value: 'agent' });
    expect(storeSelector('mem', parse({ db: '/history.db', layout: 'mem0' }), true)).toEqual({ flag: '--store', value: 'mem' });
    // --db names the store after its file and records in the default state db: another name or state db is another store's record.
    expect(storeSelector('agent', parse({ db: '/var/lib/agent/m.db' }), true)).toEqual({ flag: '--store', value: 'agent' });
    expect(storeSelector('m', parse({ db: '/var/lib/agent/m.db' }), false)).toEqual({ flag: '--store', value: 'm' });
  });
});
