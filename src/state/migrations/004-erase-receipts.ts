/**
 * Erase receipts (src/erase/receipts.ts): what was erased, how much, when; never the text, the user or the ids.
 * Beside each, where the erase looked and how much it erased there (never what): one row per place.
 */
export default `
CREATE TABLE IF NOT EXISTS erase_receipts (
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
);
CREATE TABLE IF NOT EXISTS erase_receipt_places (
  receipt_id INTEGER NOT NULL REFERENCES erase_receipts(id) ON DELETE CASCADE,
  place      TEXT NOT NULL,
  count      INTEGER NOT NULL,
  PRIMARY KEY (receipt_id, place)
);
`;
