import type { Db } from '../store/sqlite.js';
import { coerceError, storeError } from '../errors.js';
import { STATE_MIGRATIONS, type StateMigration } from './migrations/index.js';

/**
 * Brings a state db to this build's schema: the steps after its `PRAGMA user_version`, in order, then the new
 * version, all inside one BEGIN IMMEDIATE. The version is read again under that write lock, so two processes
 * opening a new state db together queue there and the second finds nothing left to do; a kill -9 halfway leaves
 * the old version, migrated whole by the next open. An up-to-date db (every open but the first) takes no lock.
 * `migrations` is there for tests of steps this build does not have yet.
 */
export function migrateState(db: Db, path: string, migrations: readonly StateMigration[] = STATE_MIGRATIONS): number {
  const known = migrations.length;
  const versionNow = () => {
    const version = db.pragma('user_version', { simple: true }) as number;
    if (version > known) {
      throw storeError(`open state db ${path}: its schema is version ${version}, newer than this memory-warden knows (${known}); run the newer memory-warden that wrote it`);
    }
    return version;
  };
  if (versionNow() === known) return known;
  return db.transaction(() => {
    const version = versionNow();
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
