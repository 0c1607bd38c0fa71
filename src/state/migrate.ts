import type { Db } from '../store/sqlite.js';
import { coerceError, storeError } from '../errors.js';
import { STATE_MIGRATIONS, type StateMigration } from './migrations/index.js';

/**
 * Brings a state db to this build's schema: reads `PRAGMA user_version` and applies the steps after it, in
 * order, then records the last one, all inside one BEGIN IMMEDIATE. Two processes opening a new state db
 * together queue on the write lock; the second reads the first's version and has nothing left to do, and a
 * kill -9 halfway leaves the db at its old version, to be migrated whole by the next open. `migrations` is
 * there for tests of steps this build does not have yet.
 */
export function migrateState(db: Db, path: string, migrations: readonly StateMigration[] = STATE_MIGRATIONS): number {
  const known = migrations.length;
  return db.transaction(() => {
    const version = db.pragma('user_version', { simple: true }) as number;
    if (version > known) {
      throw storeError(`open state db ${path}: its schema is version ${version}, newer than this memory-warden knows (${known}); run the newer memory-warden that wrote it`);
    }
    for (const step of migrations.slice(version)) {
      try {
        db.exec(step.sql);
      } catch (err) {
        // coerceError keeps a busy lock transient (retried); anything else is a bug of the step, named.
        throw coerceError(err, `migrate state db to version ${step.version} (${step.file})`);
      }
    }
    if (version < known) db.pragma(`user_version = ${known}`);
    return known;
  }).immediate();
}
