import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { coerceError } from '../src/core/errors.js';

/**
 * What a worker retries: SQLite's answers that mean another connection holds a lock now (a busy store, the WAL
 * index's locks contended past SQLite's own retries) are transient; a damaged file is not.
 */
describe('SQLite errors: transient or not', () => {
  it.each(['SQLITE_BUSY', 'SQLITE_BUSY_SNAPSHOT', 'SQLITE_BUSY_RECOVERY', 'SQLITE_LOCKED', 'SQLITE_PROTOCOL'])('%s is transient', (code) => {
    const e = coerceError(new Database.SqliteError('some message', code), 'prune agent');
    expect(e.transient, code).toBe(true);
    expect(e.message).toBe('prune agent: some message');
  });

  it.each(['SQLITE_CORRUPT', 'SQLITE_NOTADB', 'SQLITE_IOERR', 'SQLITE_CONSTRAINT_FOREIGNKEY'])('%s is not', (code) => {
    expect(coerceError(new Database.SqliteError('some message', code)).transient, code).toBe(false);
  });
});
