/**
 * Nothing memory-warden keeps of an erased person can be tested against guesses without the erase key
 * (src/erase/key.ts). Receipts kept `sha256("user:<id>")`, `sha256("subject:<text>")` and the sha256 of the erased
 * ids, unkeyed: a list of guessed addresses, names or ids found them. From here on those two columns hold
 * HMAC-SHA256 under the erase key, named by `key_id`; the unkeyed ones cannot be re-keyed (that needs what they
 * hashed, which is gone), so they are dropped: a receipt from before says null. The same two values in the
 * results of erase jobs a worker ran go too. `erase_key`: the id of the key this state db's hashes are made under,
 * so a missing or another key is refused rather than silently replaced. `state_compaction`: the dropped values'
 * pages are rewritten (secure_delete, then VACUUM and the WAL truncated) before the state db is next used, also
 * after a kill -9 right after this step (src/state/migrate.ts).
 */
export default `
ALTER TABLE erase_receipts DROP COLUMN selector_sha256;
ALTER TABLE erase_receipts DROP COLUMN ids_sha256;
ALTER TABLE erase_receipts ADD COLUMN selector_sha256 TEXT;
ALTER TABLE erase_receipts ADD COLUMN ids_sha256 TEXT;
ALTER TABLE erase_receipts ADD COLUMN key_id TEXT;
UPDATE job_runs SET result = json_set(result, '$.selectorSha256', json('null'), '$.idsSha256', json('null'))
 WHERE job = 'erase' AND json_valid(result) AND json_type(result) = 'object'
   AND (json_type(result, '$.selectorSha256') IS NOT NULL OR json_type(result, '$.idsSha256') IS NOT NULL);
CREATE TABLE erase_key (
  one     INTEGER PRIMARY KEY CHECK (one = 1),
  key_id  TEXT NOT NULL,
  since   TEXT NOT NULL
);
CREATE TABLE state_compaction (
  reason  TEXT PRIMARY KEY
);
INSERT INTO state_compaction (reason) VALUES ('009: unkeyed erase digests dropped');
`;
