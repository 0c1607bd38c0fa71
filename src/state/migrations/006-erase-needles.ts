/**
 * Erase's memory of earlier erases (src/erase/needles.ts): keyed hashes of what each selector erased, so a
 * later erase of the same person searches the copies again without any text, and the snapshots an erase removed.
 */
export default `
CREATE TABLE erase_needles (
  store         TEXT NOT NULL,
  selector_mac  TEXT NOT NULL,
  kind          TEXT NOT NULL CHECK (kind IN ('id', 'user')),
  mac           TEXT NOT NULL,
  PRIMARY KEY (store, selector_mac, kind, mac)
) WITHOUT ROWID;
CREATE TABLE erased_snapshots (
  store       TEXT NOT NULL,
  snapshot    TEXT NOT NULL,
  erased_at   TEXT NOT NULL,
  PRIMARY KEY (store, snapshot)
);
`;
