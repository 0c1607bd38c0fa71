/**
 * Owns erase's memory of earlier erases, in the state db (src/state/migrations/006-erase-needles.ts): what each
 * selector erased, as keyed hashes only, and the snapshots an erase removed.
 */
import { createHmac } from 'node:crypto';
import type { Db } from '../store/sqlite.js';
import type { EraseSelector } from '../layouts/contract.js';
import { openStateDb } from '../state/state.js';
import { asciiLower } from '../text/needles.js';
import { idMacInto, userMac } from '../snapshot/targets/holds.js';
import type { Strings } from '../text/string-list.js';
import { toCanonical, type Instant } from '../time/instants.js';

/*
 * `erase_needles`: the ids each erase erased, as the keyed hashes a snapshot's holds use (holds.ts, under the
 * installation's erase key), under a keyed hash of its selector. A later erase of the same person (the same
 * selector) looks for those ids again in every snapshot, local and remote, and in the state db's records about
 * memories, though the rows, their texts and the prune ledger's rows are gone: "exit 1 while any copy remains"
 * holds across runs. No id, user or text is kept. An `erase --user` also files the person's keyed hash (holds.ts's
 * form, kind `user`), whether or not the store still held anything of theirs: every restore re-applies the ledger
 * (src/erase/restore-ledger.ts) and keeps out what it names, ids and people both. `erased_snapshots`: the snapshots
 * an erase removed, by name, which replicate never uploads again and `restore latest` never picks.
 */
/** The selector as a keyed hash: the same person asked again finds what the earlier runs erased. */
export function selectorMac(key: Buffer, sel: EraseSelector): string {
  const what = 'user' in sel ? `user:${sel.user}`
    : 'subject' in sel ? `subject:${asciiLower(sel.subject.trim())}` // matched ASCII case-insensitively
      : `ids:${[...new Set(sel.ids)].sort().join('\n')}`;
  return createHmac('sha256', key).update(`selector:${what}`, 'utf8').digest('hex');
}

/** The id hashes (holds.ts's form) that earlier erases of this selector erased from this store. */
export function earlierIdMacs(state: Db, store: string, selector: string): string[] {
  return state.prepare(`SELECT mac FROM erase_needles WHERE store = ? AND selector_mac = ? AND kind = 'id'`).pluck().all(store, selector) as string[];
}

/** Record the ids an erase is about to erase (before the deletes: a crash after them must not lose them). */
export function recordErasedIds(state: Db, key: Buffer, store: string, selector: string, ids: Strings): void {
  recordErasedIdMacs(state, store, selector, idMacsOf(key, ids));
}

/**
 * The ids' keyed hashes (holds.ts's form), as their eight bytes each: an erase hashes its plan's ids while
 * the store's check runs, records them once it has passed, and after the deletes hashes and records only the ids the
 * plan did not have. An id listed twice is hashed twice and recorded once.
 */
export function idMacsOf(key: Buffer, ids: Strings): Buffer {
  const out = Buffer.alloc(ids.length * 8);
  const into = idMacInto(key);
  let at = 0;
  for (const id of ids) {
    into(id, out, at);
    at += 8;
  }
  return out;
}

/**
 * recordErasedIds with the hashes made already (idMacsOf). SQLite cuts them from the bytes and writes their hex
 * (holds.ts's 16 lower-case digits), MAC_CHUNK at a time: a string and a statement call per id in JavaScript was
 * garbage enough, at 100,000 ids, to grow V8's young generation by 17 MB for the rest of the erase. They go in in
 * the table's key order (sorted as 64-bit numbers, big-endian as their hex reads), so that the inserts append to
 * the key's B-tree: in random order every insert met another page, and the whole tree had to stay in the state db's
 * page cache (erase keeps that cache small).
 */
export function recordErasedIdMacs(state: Db, store: string, selector: string, macs: Buffer): void {
  if (macs.length === 0) return;
  macs = sortedMacs(macs);
  const put = state.prepare(`WITH RECURSIVE at(i) AS (SELECT 0 UNION ALL SELECT i + 8 FROM at WHERE i + 8 < length(@macs))
    INSERT OR IGNORE INTO erase_needles (store, selector_mac, kind, mac) SELECT @store, @selector, 'id', lower(hex(substr(@macs, i + 1, 8))) FROM at`);
  state.transaction(() => {
    for (let at = 0; at < macs.length; at += MAC_CHUNK * 8) put.run({ store, selector, macs: macs.subarray(at, Math.min(macs.length, at + MAC_CHUNK * 8)) });
  }).immediate();
}
const MAC_CHUNK = 4096;

/** A copy of 8-byte hashes in ascending byte order. */
function sortedMacs(macs: Buffer): Buffer {
  const sorted = Buffer.alloc(macs.length - (macs.length % 8)); // its own ArrayBuffer, at offset 0 (aligned)
  macs.copy(sorted, 0, 0, sorted.length);
  sorted.swap64();
  new BigUint64Array(sorted.buffer, sorted.byteOffset, sorted.length / 8).sort();
  return sorted.swap64();
}

/**
 * Record, before anything is deleted, what an erase will keep out of every restore whatever the store holds now:
 * the person of `--user` (a snapshot taken before may hold memories of theirs the store no longer has), and the
 * ids `--ids` names.
 */
export function recordErasedSelector(state: Db, key: Buffer, store: string, selector: string, sel: EraseSelector): void {
  if ('user' in sel) {
    state.prepare(`INSERT OR IGNORE INTO erase_needles (store, selector_mac, kind, mac) VALUES (?, ?, 'user', ?)`).run(store, selector, userMac(key, sel.user));
  } else if ('ids' in sel) {
    recordErasedIds(state, key, store, selector, sel.ids);
  }
}

/** Record snapshots an erase is about to delete, before it deletes them: replicate must never upload them again. */
export function recordErasedSnapshots(stateDb: string, store: string, names: readonly string[], at: Instant): void {
  if (names.length === 0) return;
  const db = openStateDb(stateDb);
  try {
    const put = db.prepare(`INSERT OR IGNORE INTO erased_snapshots (store, snapshot, erased_at) VALUES (?, ?, ?)`);
    db.transaction(() => names.forEach((n) => put.run(store, n, toCanonical(at)))).immediate();
  } finally {
    db.close();
  }
}

/** Names of this store's snapshots an erase removed. */
export function erasedSnapshots(stateDb: string, store: string): Set<string> {
  const db = openStateDb(stateDb);
  try {
    return new Set(db.prepare(`SELECT snapshot FROM erased_snapshots WHERE store = ?`).pluck().all(store) as string[]);
  } finally {
    db.close();
  }
}

