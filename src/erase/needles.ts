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
  let at = 0;
  for (const id of ids) at += idMacInto(key, id, out, at);
  return out;
}

/** recordErasedIds with the hashes made already (idMacsOf). */
export function recordErasedIdMacs(state: Db, store: string, selector: string, macs: Buffer): void {
  if (macs.length === 0) return;
  const put = state.prepare(`INSERT OR IGNORE INTO erase_needles (store, selector_mac, kind, mac) VALUES (?, ?, 'id', ?)`);
  state.transaction(() => {
    for (let at = 0; at < macs.length; at += 8) put.run(store, selector, macs.toString('hex', at, at + 8));
  }).immediate();
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

