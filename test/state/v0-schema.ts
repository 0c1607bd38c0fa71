/**
 * The state db as memory-warden made it before numbered migrations (user_version 0): each module ran its own
 * `CREATE TABLE IF NOT EXISTS` when imported, so a state db holds any subset of these, in whatever order the
 * modules loaded. Copied verbatim from that code; never edit, it is what old state dbs on disk contain.
 */
export const V0_TABLES: Record<string, string[]> = {
  job_runs: [
    `CREATE TABLE IF NOT EXISTS job_runs (
     id          INTEGER PRIMARY KEY,
     job         TEXT NOT NULL,
     store       TEXT,
     started_at  TEXT NOT NULL,
     finished_at TEXT,
     outcome     TEXT NOT NULL CHECK (outcome IN ('running', 'ok', 'failed')),
     result      TEXT,
     error       TEXT
   )`,
    `CREATE INDEX IF NOT EXISTS job_runs_by_time ON job_runs(finished_at)`,
    `CREATE INDEX IF NOT EXISTS job_runs_by_job ON job_runs(job, store, outcome, finished_at)`,
  ],
  drift_verdicts: [
    `CREATE TABLE IF NOT EXISTS drift_verdicts (
     id           INTEGER PRIMARY KEY,
     store        TEXT NOT NULL,
     memory_id    TEXT NOT NULL,
     verdict      TEXT NOT NULL CHECK (verdict IN ('confirmed', 'contradicted', 'changed', 'unverifiable', 'refused', 'manual')),
     verifier     TEXT,
     evidence     TEXT,
     fingerprint  TEXT,
     checked_at   TEXT NOT NULL,
     needs_person INTEGER NOT NULL DEFAULT 0,
     resolved_at  TEXT,
     resolution   TEXT
   )`,
    `CREATE INDEX IF NOT EXISTS drift_verdicts_by_memory ON drift_verdicts(store, memory_id, checked_at)`,
    `CREATE INDEX IF NOT EXISTS drift_verdicts_pending ON drift_verdicts(store, needs_person, resolved_at)`,
  ],
  digest_deliveries: [
    `CREATE TABLE IF NOT EXISTS digest_deliveries (
     id           INTEGER PRIMARY KEY,
     list_key     TEXT NOT NULL,
     day          TEXT NOT NULL,
     period_start TEXT NOT NULL,
     period_end   TEXT NOT NULL,
     status       TEXT NOT NULL CHECK (status IN ('sending', 'sent', 'failed', 'quiet')),
     claim_token  TEXT,
     claimed_at   TEXT NOT NULL,
     attempts     INTEGER NOT NULL DEFAULT 1,
     message_id   TEXT NOT NULL,
     sent_at      TEXT,
     response     TEXT,
     error        TEXT,
     summary      TEXT,
     UNIQUE (list_key, day)
   )`,
  ],
  warden_deletions: [
    `CREATE TABLE IF NOT EXISTS warden_deletions (
     store       TEXT NOT NULL,
     memory_id   TEXT NOT NULL,
     user_hmac   TEXT NOT NULL,
     deleted_at  TEXT NOT NULL,
     PRIMARY KEY (store, memory_id)
   )`,
    `CREATE INDEX IF NOT EXISTS warden_deletions_by_user ON warden_deletions(store, user_hmac)`,
  ],
  erase_receipts: [
    `CREATE TABLE IF NOT EXISTS erase_receipts (
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
   )`,
  ],
  erase_receipt_places: [
    `CREATE TABLE IF NOT EXISTS erase_receipt_places (
     receipt_id INTEGER NOT NULL REFERENCES erase_receipts(id) ON DELETE CASCADE,
     place      TEXT NOT NULL,
     count      INTEGER NOT NULL,
     PRIMARY KEY (receipt_id, place)
   )`,
  ],
};

/** One row per table, as the code of then wrote them. */
export const V0_ROWS: Record<string, string> = {
  job_runs: `INSERT INTO job_runs (id, job, store, started_at, finished_at, outcome, result, error)
             VALUES (7, 'prune', 'agent', '2026-11-30T03:00:00.000Z', '2026-11-30T03:00:02.000Z', 'ok', '{"deleted":3}', NULL)`,
  drift_verdicts: `INSERT INTO drift_verdicts (id, store, memory_id, verdict, verifier, evidence, fingerprint, checked_at, needs_person)
                   VALUES (3, 'agent', 'm_1', 'contradicted', 'file', '{"found":"16"}', 'f1', '2026-11-30T04:00:00.000Z', 1)`,
  digest_deliveries: `INSERT INTO digest_deliveries (id, list_key, day, period_start, period_end, status, claim_token, claimed_at, message_id, sent_at)
                      VALUES (2, 'k1', '2026-11-30', '2026-11-29T07:00:00.000Z', '2026-11-30T07:00:00.000Z', 'sent', 't', '2026-11-30T07:00:00.000Z', '<m@x>', '2026-11-30T07:00:01.000Z')`,
  warden_deletions: `INSERT INTO warden_deletions (store, memory_id, user_hmac, deleted_at) VALUES ('agent', 'm_2', 'ab12', '2026-11-30T03:00:01.000Z')`,
  erase_receipts: `INSERT INTO erase_receipts (id, store, layout, selector, selector_sha256, erased_at, memories, ids_sha256, counts, vacuumed, wal_truncated, snapshots_found, snapshots_deleted)
                   VALUES (5, 'agent', 'mem0', 'user', 'cd34', '2026-11-30T05:00:00.000Z', 2, 'ef56', '{}', 1, 1, '[]', '[]')`,
  erase_receipt_places: `INSERT INTO erase_receipt_places (receipt_id, place, count) VALUES (5, 'store:memories', 2)`,
};
