import { createHmac } from 'node:crypto';
import type { Config } from '../config/config.js';
import type { Db } from '../store/sqlite.js';
import { openStateDb } from '../state/state.js';
import { expandHome } from '../config/read.js';
import { toCanonical, type Instant } from '../time/instants.js';
import { eraseKey, type KeyPlace } from './key.js';

/**
 * What memory-warden deleted from a mem0 store, findable by the person it belonged to. mem0's history has no user
 * column and the entity link that tied a memory to its user goes with the delete, so without this a later
 * `erase --user` could not find the text history keeps of a memory the prune removed. Each deleted memory is
 * recorded with an HMAC of its user id under the installation's erase key (src/erase/key.ts): the state db never
 * holds the user id, and the hash cannot be tested against guessed ids without the key.
 * The warden layout records nothing: its rows carry no user, and its prune leaves no copy of a row in the store
 * (no history table; erase's VACUUM drops the free pages), so nothing of a pruned row waits there to be found.
 * Table `warden_deletions`: src/state/migrations/005-warden-deletions.ts.
 * What each erase found, kept for the next one: src/erase/needles.ts.
 */
export { eraseKey, KEY_FILE } from './key.js';

export function userHmac(key: Buffer, user: string): string {
  return createHmac('sha256', key).update(`user:${user}`, 'utf8').digest('hex');
}

export interface DeletedMemory {
  id: string;
  user: string | null;
}

/** Record memories about to be deleted (before the delete: a crash after it must not lose the record). */
export function recordDeletions(place: KeyPlace, store: string, memories: readonly DeletedMemory[], at: Instant): void {
  const owned = memories.filter((m): m is { id: string; user: string } => typeof m.user === 'string' && m.user !== '');
  if (owned.length === 0) return;
  const db = openStateDb(expandHome(place.stateDb));
  try {
    const key = eraseKey(place, db);
    const put = db.prepare(`INSERT OR REPLACE INTO warden_deletions (store, memory_id, user_hmac, deleted_at) VALUES (?, ?, ?, ?)`);
    db.transaction(() => owned.forEach((m) => put.run(store, m.id, userHmac(key, m.user), toCanonical(at)))).immediate();
  } finally {
    db.close();
  }
}

/** The prune's hook for one store: records each batch before it is deleted. */
export function deletionRecorder(config: Config, store: string): (memories: readonly DeletedMemory[], at: Instant) => void {
  return (memories, at) => recordDeletions(config, store, memories, at);
}

/** Memory ids memory-warden deleted from this store that belonged to this user. */
export function deletedFor(state: Db, key: Buffer, store: string, user: string): string[] {
  const has = state.prepare(`SELECT 1 FROM warden_deletions WHERE store = ? LIMIT 1`).get(store);
  if (!has) return [];
  const rows = state.prepare(`SELECT memory_id FROM warden_deletions WHERE store = ? AND user_hmac = ?`).all(store, userHmac(key, user)) as { memory_id: string }[];
  return rows.map((r) => String(r.memory_id));
}
