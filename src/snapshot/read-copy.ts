import { closeSync, existsSync, openSync, readSync, rmSync } from 'node:fs';
import Database from 'better-sqlite3';

/**
 * A snapshot's SQLite copy opened to be read, and never written, nor anything written beside it. memory-warden's
 * own copies are in rollback-journal mode (sqlite-copy.ts), but a folder may hold a copy someone else made: one in
 * WAL mode (its header's bytes 18-19 are 2) makes SQLite create `-wal` and `-shm` beside it even read-only, and a
 * snapshot folder holding files its manifest does not list is no longer one memory-warden can prove it made. Those
 * two files, when this open created them, are removed when it closes.
 */
export function readSnapshotCopy(file: string): { db: Database.Database; close(): void } {
  const created = walHeader(file) ? ['-wal', '-shm'].map((s) => file + s).filter((f) => !existsSync(f)) : [];
  const db = new Database(file, { readonly: true, fileMustExist: true });
  return {
    db,
    close() {
      db.close();
      for (const f of created) rmSync(f, { force: true });
    },
  };
}

function walHeader(file: string): boolean {
  const fd = openSync(file, 'r');
  try {
    const b = Buffer.alloc(2);
    return readSync(fd, b, 0, 2, 18) === 2 && b[0] === 2 && b[1] === 2;
  } finally {
    closeSync(fd);
  }
}
