import { ensurePrivateFile, openHandle, setJournalMode } from './sqlite.js';
import { transientError } from '../errors.js';

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

export function acquireMaintenanceLock(dbPath: string, opts: { waitMs?: number; holder?: string } = {}): MaintenanceLock {
  const path = lockPathFor(dbPath);
  ensurePrivateFile(path); // beside the store and under the snapshot root alike: 0600, its journal too
  const db = openHandle(path, { timeout: opts.waitMs ?? 0 });
  try {
    setJournalMode(db, 'delete');
    db.exec('CREATE TABLE IF NOT EXISTS holder (pid INTEGER, job TEXT, since TEXT)');
    db.exec('BEGIN IMMEDIATE');
    db.prepare('DELETE FROM holder').run();
    db.prepare(`INSERT INTO holder VALUES (?, ?, datetime('now'))`).run(process.pid, opts.holder ?? null);
  } catch (err) {
    db.close();
    const code = (err as { code?: string }).code;
    if (code === 'SQLITE_BUSY' || code === 'SQLITE_LOCKED') {
      throw transientError(`${dbPath}: another maintenance job is writing to this store (lock ${path}); try again later`, err);
    }
    throw err;
  }
  let released = false;
  return {
    path,
    release() {
      if (released) return;
      released = true;
      try {
        db.exec('ROLLBACK');
      } finally {
        db.close();
      }
    },
  };
}

export async function withMaintenanceLock<T>(dbPath: string, holder: string, fn: () => Promise<T>): Promise<T> {
  const lock = acquireMaintenanceLock(dbPath, { holder });
  try {
    return await fn();
  } finally {
    lock.release();
  }
}
