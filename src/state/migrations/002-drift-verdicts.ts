/**
 * Drift: every verdict a verifier (or a person) gave, kept so "changed" can be detected next time and the digest
 * can list what waits for a person (needs_person = 1 AND resolved_at IS NULL).
 */
export default `
CREATE TABLE IF NOT EXISTS drift_verdicts (
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
);
CREATE INDEX IF NOT EXISTS drift_verdicts_by_memory ON drift_verdicts(store, memory_id, checked_at);
CREATE INDEX IF NOT EXISTS drift_verdicts_pending ON drift_verdicts(store, needs_person, resolved_at);
`;
