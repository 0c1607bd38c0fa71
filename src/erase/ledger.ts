import { createHmac, randomBytes } from 'node:crypto';
import { closeSync, existsSync, fsyncSync, linkSync, mkdirSync, openSync, rmSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Config } from '../config/config.js';
import { expandHome } from '../config/config.js';
import type { Db } from '../store/sqlite.js';
import { openStateDb } from '../state/state.js';
import { storeError } from '../core/errors.js';
import { readRegularFile } from '../core/read-file.js';
import { toCanonical, type Instant } from '../time/instants.js';

/**
 * What memory-warden deleted from a mem0 store, findable by the person it belonged to. mem0's history has no user
 * column and the entity link that tied a memory to its user goes with the delete, so without this a later
 * `erase --user` could not find the text history keeps of a memory the prune removed. Each deleted memory is
 * recorded with an HMAC of its user id under a key of this installation (`erase.key` beside the state db, 0600):
 * the state db never holds the user id, and the hash cannot be tested against guessed ids without the key.
 * The warden layout records nothing: its rows carry no user, and its prune leaves no copy of a row in the store
 * (no history table; erase's VACUUM drops the free pages), so nothing of a pruned row waits there to be found.
 * Table `warden_deletions`: src/state/migrations/005-warden-deletions.ts.
 * What each erase found, kept for the next one: src/erase/needles.ts.
 */
export const KEY_FILE = 'erase.key';

/**
 * The installation's key, created once: written whole to a private temp file, then hard-linked into place, which
 * fails if the key exists. So two processes starting together agree on one, and no reader ever sees half a key.
 */
export function eraseKey(stateDb: string): Buffer {
  const path = join(dirname(stateDb), KEY_FILE);
  if (!existsSync(path)) {
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    const tmp = `${path}.${process.pid}.${randomBytes(4).toString('hex')}`;
    try {
      const fd = openSync(tmp, 'wx', 0o600);
      try {
        writeSync(fd, randomBytes(32).toString('hex'));
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      linkSync(tmp, path);
    } catch (err) {
      if ((err as { code?: string }).code !== 'EEXIST') throw storeError(`erase key: could not create ${path}: ${(err as Error).message}`, err);
    } finally {
      rmSync(tmp, { force: true });
    }
  }
  let hex: string;
  try {
    hex = readRegularFile(path, 1024).trim(); // a FIFO or a device put there is refused, never waited on or read
  } catch (err) {
    throw storeError(`erase key: cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, err);
  }
  if (!/^[0-9a-f]{64}$/.test(hex)) throw storeError(`erase key: ${path} is not 64 hex digits; restore it from backup (without it erase --user cannot find what prune deleted)`);
  return Buffer.from(hex, 'hex');
}

export function userHmac(key: Buffer, user: string): string {
  return createHmac('sha256', key).update(`user:${user}`, 'utf8').digest('hex');
}

export interface DeletedMemory {
  id: string;
  user: string | null;
}

/** Record memories about to be deleted (before the delete: a crash after it must not lose the record). */
export function recordDeletions(stateDb: string, store: string, memories: readonly DeletedMemory[], at: Instant): void {
  const owned = memories.filter((m): m is { id: string; user: string } => typeof m.user === 'string' && m.user !== '');
  if (owned.length === 0) return;
  const key = eraseKey(stateDb);
  const db = openStateDb(stateDb);
  try {
    const put = db.prepare(`INSERT OR REPLACE INTO warden_deletions (store, memory_id, user_hmac, deleted_at) VALUES (?, ?, ?, ?)`);
    db.transaction(() => owned.forEach((m) => put.run(store, m.id, userHmac(key, m.user), toCanonical(at)))).immediate();
  } finally {
    db.close();
  }
}

/** The prune's hook for one store: records each batch before it is deleted. */
export function deletionRecorder(config: Config, store: string): (memories: readonly DeletedMemory[], at: Instant) => void {
  const stateDb = expandHome(config.stateDb);
  return (memories, at) => recordDeletions(stateDb, store, memories, at);
}

/** Memory ids memory-warden deleted from this store that belonged to this user. */
export function deletedFor(state: Db, stateDb: string, store: string, user: string): string[] {
  const has = state.prepare(`SELECT 1 FROM warden_deletions WHERE store = ? LIMIT 1`).get(store);
  if (!has) return [];
  const rows = state.prepare(`SELECT memory_id FROM warden_deletions WHERE store = ? AND user_hmac = ?`).all(store, userHmac(eraseKey(stateDb), user)) as { memory_id: string }[];
  return rows.map((r) => String(r.memory_id));
}
