import { createHash, randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, linkSync, mkdirSync, openSync, rmSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { expandHome } from '../config/read.js';
import type { Db } from '../store/sqlite.js';
import { openStateDb } from '../state/state.js';
import { configError, storeError, usageError } from '../core/errors.js';
import { readRegularFile } from '../core/read-file.js';
import { toCanonical, type Instant } from '../time/instants.js';

/**
 * The installation's erase key: 32 random bytes (64 hex digits, mode 0600) under which every hash memory-warden
 * keeps of an erased person is made (the prune ledger's users, the erase ledger's ids and selectors, the receipts'
 * digests, a snapshot's holds), so that none of them can be tested against guessed ids, names or addresses without
 * it. Where it lives: `eraseKeyFile` in the config, by default `erase.key` in the state db's folder. It should be
 * backed up apart from the state db: whoever holds both can test the hashes.
 *
 * The key is bound to its state db: the state db records the key's id (`erase_key`, the id snapshot manifests give
 * the key their holds were made under), and a key whose id differs is refused. A missing key is made only for a
 * state db that holds nothing made under a key; otherwise it is refused, naming the file and how to restore it,
 * and only `memory-warden erase key --new` starts a new key, knowingly: every earlier hash is then unmatchable.
 */
export const KEY_FILE = 'erase.key';

/** Where the key is: the config's `stateDb` and `eraseKeyFile` (a Config is one). */
export interface KeyPlace {
  stateDb: string;
  eraseKeyFile?: string | undefined;
}

/** The key file: `eraseKeyFile`, else `erase.key` beside the state db. `~` is expanded only when `expand`. */
export function eraseKeyPath(place: KeyPlace, expand = true): string {
  const x = (p: string) => (expand ? expandHome(p) : p);
  return place.eraseKeyFile !== undefined ? x(place.eraseKeyFile) : join(dirname(x(place.stateDb)), KEY_FILE);
}

/** The key's id: what the state db records and a snapshot's manifest names; says nothing of the key itself. */
export const eraseKeyId = (key: Buffer) => createHash('sha256').update(key).digest('hex').slice(0, 16);

/** The id of the key this state db's hashes were made under, or null when none is recorded yet. */
export function boundKeyId(db: Db): string | null {
  return (db.prepare(`SELECT key_id FROM erase_key WHERE one = 1`).pluck().get() as string | undefined) ?? null;
}

/** Whether the state db holds hashes made under some key: a state db from before keys were recorded. */
export function holdsKeyedHashes(db: Db): boolean {
  return db.prepare(`SELECT EXISTS (SELECT 1 FROM warden_deletions) OR EXISTS (SELECT 1 FROM erase_needles)`).pluck().get() === 1;
}

const NEW_KEY = 'to start a new key knowingly (every earlier erase can then no longer be matched), run memory-warden erase key --new with this config';

/**
 * The installation's key, checked against its state db (see above). `state`: an open handle on the state db, if
 * the caller has one. The first use on a state db records the key's id; a missing key is made (written whole to a
 * private temp file, then hard-linked into place, which fails if one exists: two processes agree on one, and no
 * reader sees half a key) only while the state db holds nothing made under another.
 */
export function eraseKey(place: KeyPlace, state?: Db): Buffer {
  const path = eraseKeyPath(place);
  const stateDb = expandHome(place.stateDb);
  return withState(stateDb, state, (db) => {
    const bound = boundKeyId(db);
    let key = readKey(path, stateDb, bound);
    if (key === null) {
      if (bound !== null || holdsKeyedHashes(db)) {
        const made = bound === null ? 'hashes made under an earlier key' : `hashes made under erase key ${bound}`;
        throw configError(`erase key: ${path} is missing, and state db ${stateDb} holds ${made}: restore the key from your backup to ${path} (mode 0600), or set eraseKeyFile to where it is; ${NEW_KEY}`);
      }
      key = createKey(path) ?? readKey(path, stateDb, bound); // another process made it first: theirs
      if (key === null) throw storeError(`erase key: ${path} was made by another process and is gone again`);
    }
    const id = eraseKeyId(key);
    const recorded = bound ?? bind(db, id);
    if (recorded !== id) {
      throw configError(`erase key: ${path} is not the key state db ${stateDb} was used with (this file's key id ${id}, the state db's ${recorded}): restore that key from your backup to ${path}, or set eraseKeyFile to where it is; ${NEW_KEY.replace('run', `move ${path} away and run`)}`);
    }
    return key;
  });
}

/** What `erase key --new` did: the new key's file and id, and the id it replaces (null: none was recorded). */
export interface NewKey {
  path: string;
  keyId: string;
  replaced: string | null;
}

/**
 * Start a new key, knowingly: only where no file is (a key is never overwritten: move it away first), recorded as
 * the state db's key in place of the earlier one. Hashes made under the earlier key stay, unmatchable.
 */
export function newEraseKey(place: KeyPlace, at: Instant): NewKey {
  const path = eraseKeyPath(place);
  const stateDb = expandHome(place.stateDb);
  return withState(stateDb, undefined, (db) => {
    const key = createKey(path);
    if (key === null) throw usageError(`erase key --new: ${path} exists; a key is never overwritten (move it away first if you mean to replace it)`);
    const keyId = eraseKeyId(key);
    return db.transaction(() => {
      const replaced = boundKeyId(db);
      db.prepare(`INSERT OR REPLACE INTO erase_key (one, key_id, since) VALUES (1, ?, ?)`).run(keyId, toCanonical(at));
      return { path, keyId, replaced };
    }).immediate();
  });
}

/** Record the key's id for a state db that has none; the id recorded (another process may have been first). */
function bind(db: Db, id: string): string {
  return db.transaction(() => {
    db.prepare(`INSERT OR IGNORE INTO erase_key (one, key_id, since) VALUES (1, ?, ?)`).run(id, toCanonical(Date.now()));
    return boundKeyId(db)!;
  }).immediate();
}

function withState<T>(stateDb: string, state: Db | undefined, fn: (db: Db) => T): T {
  if (state) return fn(state);
  const db = openStateDb(stateDb);
  try {
    return fn(db);
  } finally {
    db.close();
  }
}

/** The key in the file, or null when there is no file. */
function readKey(path: string, stateDb: string, bound: string | null): Buffer | null {
  let hex: string;
  try {
    hex = readRegularFile(path, 1024).trim(); // a FIFO or a device put there is refused, never waited on or read
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw storeError(`erase key: cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, err);
  }
  if (!/^[0-9a-f]{64}$/.test(hex)) {
    const under = bound === null ? '' : ` (state db ${stateDb} holds hashes made under key ${bound})`;
    throw configError(`erase key: ${path} is not 64 hex digits (damaged or truncated): restore it from your backup${under}; ${NEW_KEY.replace('run', `move ${path} away and run`)}`);
  }
  return Buffer.from(hex, 'hex');
}

/** A new key at `path`, or null when a file is already there. */
function createKey(path: string): Buffer | null {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const key = randomBytes(32);
  const tmp = `${path}.${process.pid}.${randomBytes(4).toString('hex')}`;
  try {
    const fd = openSync(tmp, 'wx', 0o600);
    try {
      writeSync(fd, key.toString('hex'));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    linkSync(tmp, path);
    return key;
  } catch (err) {
    if ((err as { code?: string }).code === 'EEXIST') return null;
    throw storeError(`erase key: could not create ${path}: ${(err as Error).message}`, err);
  } finally {
    rmSync(tmp, { force: true });
  }
}
