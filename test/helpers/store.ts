import Database from 'better-sqlite3';
import { mkdtempSync, rmSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { initSchema } from '../../src/layouts/warden/schema.js';

export interface Row {
  id: string;
  subject?: string;
  fact?: string;
  source?: string;
  created_at?: string | null;
  confirmed_at?: string | null;
  expires_at?: string | null;
  superseded_by?: string | null;
}

/** A temp folder removed by the returned cleanup. */
export function tempDir(prefix = 'mw-'): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/**
 * A real store file with the brief's schema and these rows. Rows are inserted with foreign keys OFF so a test
 * can build what an agent with enforcement off leaves behind (dangling chains, any insert order).
 */
export function makeStore(path: string, rows: Row[] = []): string {
  const db = new Database(path);
  initSchema(db, path);
  insertRows(db, rows);
  db.close();
  return path;
}

export function insertRows(db: Database.Database, rows: Row[]): void {
  db.pragma('foreign_keys = OFF');
  const insert = db.prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at, expires_at, superseded_by)
    VALUES (@id, @subject, @fact, @source, coalesce(@created_at, datetime('now')), coalesce(@confirmed_at, @created_at, datetime('now')), @expires_at, @superseded_by)`);
  db.transaction(() => {
    for (const r of rows) {
      insert.run({
        subject: 'user', fact: `fact of ${r.id}`, source: 'message:1', created_at: null, confirmed_at: null,
        expires_at: null, superseded_by: null, ...r,
      });
    }
  })();
  db.pragma('foreign_keys = ON');
}

export function ids(path: string, sql = 'SELECT id FROM memory ORDER BY id'): string[] {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  try {
    return (db.prepare(sql).all() as { id: string }[]).map((r) => r.id);
  } finally {
    db.close();
  }
}

/**
 * mxFrame (the last valid WAL frame, byte 16) and nBackfill (frames already copied into the database, byte 96)
 * from the WAL index header in `<db>-shm` (SQLite's wal.c), read without touching the WAL.
 */
export function walIndex(path: string): { mxFrame: number; nBackfill: number } {
  const shm = readFileSync(`${path}-shm`);
  return { mxFrame: shm.readUInt32LE(16), nBackfill: shm.readUInt32LE(96) };
}
