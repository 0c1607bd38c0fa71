import { addStateMigration, openStateDb } from './state.js';
import { storeError } from './errors.js';
import type { EraseReceipt } from './erase.js';

/** Erase receipts in the state db: what was erased, how much, when; never the text, the user or the ids. */
addStateMigration(`CREATE TABLE IF NOT EXISTS erase_receipts (
     id               INTEGER PRIMARY KEY,
     store            TEXT NOT NULL,
     layout           TEXT NOT NULL,
     selector         TEXT NOT NULL CHECK (selector IN ('user', 'subject', 'ids')),
     selector_sha256  TEXT NOT NULL,
     erased_at        TEXT NOT NULL,
     memories         INTEGER NOT NULL,
     ids_sha256       TEXT NOT NULL,
     counts           TEXT NOT NULL,
     vacuumed         INTEGER NOT NULL,
     wal_truncated    INTEGER NOT NULL,
     snapshots_found  TEXT NOT NULL,
     snapshots_deleted TEXT NOT NULL
   )`);

export function recordReceipt(stateDb: string, r: EraseReceipt): number {
  const db = openStateDb(stateDb);
  try {
    return Number(
      db.prepare(`INSERT INTO erase_receipts (store, layout, selector, selector_sha256, erased_at, memories, ids_sha256, counts, vacuumed, wal_truncated, snapshots_found, snapshots_deleted)
                  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
        .run(r.store, r.layout, r.selector, r.selectorSha256, r.erasedAt, r.memories, r.idsSha256, JSON.stringify(r.counts), r.vacuumed ? 1 : 0, r.walTruncated ? 1 : 0, JSON.stringify(r.snapshots.found), JSON.stringify(r.snapshots.deleted))
        .lastInsertRowid,
    );
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
  selector_sha256: string;
  erased_at: string;
  memories: number;
  ids_sha256: string;
  counts: string;
  vacuumed: number;
  wal_truncated: number;
  snapshots_found: string;
  snapshots_deleted: string;
}

export function listReceipts(stateDb: string, store?: string): StoredReceipt[] {
  const db = openStateDb(stateDb);
  try {
    return db.prepare(`SELECT * FROM erase_receipts ${store ? 'WHERE store = ?' : ''} ORDER BY id`).all(...(store ? [store] : [])) as StoredReceipt[];
  } finally {
    db.close();
  }
}
