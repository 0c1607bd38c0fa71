/**
 * The erase ledger (src/erase/ledger.ts): what memory-warden deleted from a mem0 store, findable by an HMAC of
 * the user id it belonged to, so a later `erase --user` finds the text mem0's history keeps of it.
 */
export default `
CREATE TABLE IF NOT EXISTS warden_deletions (
  store       TEXT NOT NULL,
  memory_id   TEXT NOT NULL,
  user_hmac   TEXT NOT NULL,
  deleted_at  TEXT NOT NULL,
  PRIMARY KEY (store, memory_id)
);
CREATE INDEX IF NOT EXISTS warden_deletions_by_user ON warden_deletions(store, user_hmac);
`;
