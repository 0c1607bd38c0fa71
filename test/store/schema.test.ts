import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { tempDir } from '../helpers/store.js';
import { cli } from '../helpers/cli.js';

describe('init', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it('creates the brief\'s schema in a new store with --create, in WAL mode', () => {
    const db = join(dir, 'new.db');
    const r = cli(['init', '--db', db, '--create', '--json']);
    expect(r.code).toBe(0);
    expect(r.json()).toMatchObject({ createdTable: true, addedView: true, journalMode: 'wal' });
    const d = new Database(db, { readonly: true });
    const cols = (d.prepare(`SELECT name FROM pragma_table_info('memory')`).all() as { name: string }[]).map((c) => c.name);
    expect(cols).toEqual(['id', 'subject', 'fact', 'source', 'created_at', 'confirmed_at', 'expires_at', 'superseded_by', 'last_used_at']);
    const fk = d.prepare(`SELECT "table", "to", on_delete FROM pragma_foreign_key_list('memory')`).get();
    expect(fk).toEqual({ table: 'memory', to: 'id', on_delete: 'CASCADE' });
    d.close();
  });

  it('migrates a store in use without losing a row, and is idempotent', () => {
    const db = join(dir, 'old.db');
    const d = new Database(db);
    d.exec(`CREATE TABLE memory (id TEXT PRIMARY KEY, subject TEXT NOT NULL, fact TEXT NOT NULL, created_at TEXT);
            INSERT INTO memory VALUES ('m1', 'user', 'prefers pnpm', '2026-01-02 03:04:05'), ('m2', 'user', 'uses vim', NULL);`);
    d.close();
    const first = cli(['init', '--db', db, '--json']);
    expect(first.code).toBe(0);
    expect(first.json()).toMatchObject({ createdTable: false, addedColumns: ['source', 'confirmed_at', 'expires_at', 'superseded_by', 'last_used_at'], addedView: true });
    const second = cli(['init', '--db', db, '--json']);
    expect(second.json()).toMatchObject({ createdTable: false, addedColumns: [], addedIndexes: [], addedView: false });
    const after = new Database(db, { readonly: true });
    const rows = after.prepare('SELECT id, fact, source, created_at, confirmed_at FROM memory ORDER BY id').all();
    expect(rows).toEqual([
      { id: 'm1', fact: 'prefers pnpm', source: '', created_at: '2026-01-02 03:04:05', confirmed_at: '2026-01-02 03:04:05' },
      expect.objectContaining({ id: 'm2', fact: 'uses vim', source: '' }),
    ]);
    after.close();
    // The migrated store is a store every command accepts; its empty sources are reported.
    const check = cli(['check', '--db', db, '--json'], { MEMORY_WARDEN_STATE: join(dir, 's.db') });
    expect(check.json().problems.map((p: any) => p.code)).toContain('empty_source');
    // New rows that leave out the time columns are stamped, as the brief's defaults would.
    const w = new Database(db);
    w.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES ('m3', 'u', 'f', 'message:9')`).run();
    expect(w.prepare(`SELECT confirmed_at IS NOT NULL AS ok FROM memory WHERE id = 'm3'`).get()).toEqual({ ok: 1 });
    w.close();
  });

  it('refuses a table it cannot make a memory store of', () => {
    const db = join(dir, 'weird.db');
    const d = new Database(db);
    d.exec(`CREATE TABLE memory (key TEXT PRIMARY KEY, value TEXT)`);
    d.close();
    const r = cli(['init', '--db', db]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/no id, subject, fact column/);
  });
});

describe('live_memory', () => {
  it('hides an expiry written with Z or an offset at the right instant, and keeps superseded rows out', () => {
    const { dir, cleanup } = tempDir();
    try {
      const db = join(dir, 'v.db');
      expect(cli(['init', '--db', db, '--create']).code).toBe(0);
      const d = new Database(db);
      const ago = new Date(Date.now() - 3_600_000).toISOString(); // an hour ago, as ISO-8601 with Z
      const later = new Date(Date.now() + 3_600_000).toISOString().replace('Z', '+00:00');
      d.prepare(`INSERT INTO memory (id, subject, fact, source, expires_at) VALUES ('gone', 's', 'f', 'm', ?), ('soon', 's', 'f', 'm', ?), ('junk', 's', 'f', 'm', 'someday'), ('new', 's', 'f', 'm', NULL)`).run(ago, later);
      d.prepare(`INSERT INTO memory (id, subject, fact, source, superseded_by) VALUES ('old', 's', 'f', 'm', 'new')`).run();
      expect(d.prepare('SELECT id FROM live_memory ORDER BY id').all()).toEqual([{ id: 'junk' }, { id: 'new' }, { id: 'soon' }]);
      d.close();
    } finally {
      cleanup();
    }
  });
});
