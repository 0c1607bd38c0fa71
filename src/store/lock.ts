import { setJournalMode, type Db } from './sqlite.js';
import { openPrivateDb } from './private-file.js';
import { storeError, transientError } from '../core/errors.js';

/**
 * One maintenance writer per store at a time, across processes on this machine: an open write transaction on a
 * small sidecar SQLite file (`<store>.warden-lock`). The operating system drops the lock when the holder exits,
 * however it exits (kill -9 included), so a crash never leaves a stale lock behind. The agent never touches the
 * sidecar, so it is never blocked by it. The worker adds a Redis lock on top for writers on other machines.
 */
export interface MaintenanceLock {
  readonly path: string;
  release(): void;
}

export function lockPathFor(dbPath: string): string {
  return `${dbPath}.warden-lock`;
}

const SIDECAR_FIX = 'memory-warden makes this file itself: move it away';

export function acquireMaintenanceLock(dbPath: string, opts: { waitMs?: number; holder?: string } = {}): MaintenanceLock {
  const path = lockPathFor(dbPath);
  // Beside the store and under the snapshot root alike: a regular file of its own, never followed through a link,
  // 0600 and its journal too (src/store/private-file.ts).
  let db: Db | undefined;
  try {
    db = openPrivateDb(path, { name: 'lock sidecar', fix: SIDECAR_FIX, check: (d) => assertLockSidecar(d, path), options: { timeout: opts.waitMs ?? 0 } });
    setJournalMode(db, 'delete');
    db.exec('CREATE TABLE IF NOT EXISTS holder (pid INTEGER, job TEXT, since TEXT)');
    db.exec('BEGIN IMMEDIATE');
    db.prepare('DELETE FROM holder').run();
    db.prepare(`INSERT INTO holder VALUES (?, ?, datetime('now'))`).run(process.pid, opts.holder ?? null);
  } catch (err) {
    db?.close();
    const code = (err as { code?: string }).code;
    if (code === 'SQLITE_BUSY' || code === 'SQLITE_LOCKED') {
      throw transientError(`${dbPath}: another maintenance job is writing to this store (lock ${path}); try again later`, err);
    }
    throw err;
  }
  const held = db;
  let released = false;
  return {
    path,
    release() {
      if (released) return;
      released = true;
      try {
        held.exec('ROLLBACK');
      } finally {
        held.close();
      }
    },
  };
}

/**
 * A file at the sidecar's path is a sidecar only when it holds nothing but what this module makes (a `holder`
 * table, or nothing yet): any other database, or any other file, is someone's, and is left as it is.
 */
function assertLockSidecar(db: Db, path: string): void {
  let tables: string[];
  try {
    tables = db.prepare(`SELECT name FROM sqlite_schema WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'`).pluck().all() as string[];
  } catch (err) {
    if ((err as { code?: string }).code !== 'SQLITE_NOTADB') throw err;
    throw storeError(`lock sidecar ${path}: not a SQLite database, so not a lock sidecar; ${SIDECAR_FIX}`, err);
  }
  const other = tables.filter((t) => t !== 'holder');
  if (other.length > 0) {
    throw storeError(`lock sidecar ${path}: a database of other tables (${other.slice(0, 5).join(', ')}${other.length > 5 ? ', …' : ''}), not a lock sidecar; ${SIDECAR_FIX}`);
  }
}

export async function withMaintenanceLock<T>(dbPath: string, holder: string, fn: () => Promise<T>): Promise<T> {
  const lock = acquireMaintenanceLock(dbPath, { holder });
  try {
    return await fn();
  } finally {
    lock.release();
  }
}
