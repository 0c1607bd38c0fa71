import type { StoreConfig } from '../store/config.js';
import { openStateDb } from '../state/state.js';
import { storeError } from '../core/errors.js';
import type { Place } from './state.js';
import type { ByteCheck } from '../engines/contract.js';
import type { Unreached } from '../layouts/contract.js';

/** What one erase did, as its receipt says it (never what the erased memories said). */
export interface EraseReceipt {
  id: number | null;
  store: string;
  layout: StoreConfig['layout'];
  selector: 'user' | 'subject' | 'ids';
  /**
   * HMAC-SHA256 of the selector under the erase key (the erase ledger's `selector_mac`; the key keeps its name from
   * when it was an unkeyed sha256): with the key, `erase receipts --user ID` finds the receipts of a person; without
   * it, nothing can be tested against guesses.
   */
  selectorSha256: string;
  erasedAt: string;
  dryRun: boolean;
  /** Rows (warden) or memories (mem0) erased. */
  memories: number;
  /** HMAC-SHA256 of the erased memory ids (sorted) under the erase key. */
  idsSha256: string;
  /** The id of the erase key both were made under (src/erase/key.ts). */
  keyId: string;
  counts: Record<string, number>;
  vacuumed: boolean;
  /** False when a reader kept the WAL from being truncated: old frames may remain until the next checkpoint. */
  walTruncated: boolean;
  /** `unverified`: those of `found` that could not be searched (unreachable, unreadable, not verifiable): may hold it. */
  snapshots: { found: string[]; deleted: string[]; unverified?: string[] };
  /** Every place erase looked, with how many records or files it erased there (store:…, state:…, files:…). */
  places: Place[];
  /** The state db's WAL truncated after its scrub (false: a reader held it; run erase again). */
  stateWalTruncated: boolean;
  /**
   * memory-warden's jobs in Redis (src/erase/redis.ts): `searched` when Redis was reached and read through; else
   * `reason` says why not and `notUsed` whether the state db proves nothing went through the queue here (else the
   * prefix is listed among the copies that cannot be ruled out). `queued`: jobs still waiting or running that hold
   * the person (`<queue> job <id>`): exit 1 until a later erase finds them done. Absent in receipts made before.
   */
  redis?: { searched: boolean; notUsed: boolean; reason?: string; queued: string[] };
  /**
   * A store whose engine reads its files back after the erase (PostgreSQL): what it looked for, found and cannot see
   * (the WAL, replicas, dumps by others, each with how an operator reaches it). Its `found` and an `unverified`
   * verdict are kept in the state db as `counts.bytesLeft` and `counts.bytesUnverified`.
   */
  bytes?: ByteCheck;
  /** What this erase knows it could not reach in the store, each with how the operator reaches it (empty: none known). */
  unreached: Unreached[];
}

/**
 * Erase receipts in the state db (src/state/migrations/004-erase-receipts.ts, keyed since 009): what was erased,
 * how much, when; never the text, the user or the ids, nor a hash of them anyone without the erase key can test.
 */
export function recordReceipt(stateDb: string, r: EraseReceipt): number {
  const db = openStateDb(stateDb);
  try {
    return db.transaction(() => {
      const id = Number(
        db.prepare(`INSERT INTO erase_receipts (store, layout, selector, selector_sha256, erased_at, memories, ids_sha256, key_id, counts, vacuumed, wal_truncated, snapshots_found, snapshots_deleted)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
          .run(r.store, r.layout, r.selector, r.selectorSha256, r.erasedAt, r.memories, r.idsSha256, r.keyId, JSON.stringify(r.counts), r.vacuumed ? 1 : 0, r.walTruncated ? 1 : 0, JSON.stringify(r.snapshots.found), JSON.stringify(r.snapshots.deleted))
          .lastInsertRowid,
      );
      const place = db.prepare(`INSERT INTO erase_receipt_places (receipt_id, place, count) VALUES (?, ?, ?)`);
      for (const p of r.places) place.run(id, p.place, p.count);
      return id;
    }).immediate();
  } catch (err) {
    throw storeError(`erase: the data is erased but the receipt could not be stored in ${stateDb}: ${(err as Error).message}`, err);
  } finally {
    db.close();
  }
}

export interface StoredReceipt {
  id: number;
  store: string;
  layout: string;
  selector: string;
  /** Keyed (see EraseReceipt); null, with ids_sha256 and key_id, on a receipt made before: its unkeyed digests were dropped. */
  selector_sha256: string | null;
  erased_at: string;
  memories: number;
  ids_sha256: string | null;
  key_id: string | null;
  counts: string;
  vacuumed: number;
  wal_truncated: number;
  snapshots_found: string;
  snapshots_deleted: string;
  /** JSON array of { place, count }. */
  places: string;
}

/** The receipts, of one store if given, of one selector if given (its keyed digest, as describeSelector makes it). */
export function listReceipts(stateDb: string, store?: string, selectorDigest?: string): StoredReceipt[] {
  const db = openStateDb(stateDb);
  try {
    const places = `(SELECT json_group_array(json_object('place', p.place, 'count', p.count)) FROM (SELECT * FROM erase_receipt_places WHERE receipt_id = r.id ORDER BY rowid) p)`;
    const where = [...(store ? ['r.store = ?'] : []), ...(selectorDigest ? ['r.selector_sha256 = ?'] : [])];
    const args = [...(store ? [store] : []), ...(selectorDigest ? [selectorDigest] : [])];
    return db.prepare(`SELECT r.*, ${places} AS places FROM erase_receipts r ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY r.id`).all(...args) as StoredReceipt[];
  } finally {
    db.close();
  }
}
