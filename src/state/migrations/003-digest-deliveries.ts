/**
 * Digest: one row per (recipient list, day) with the period it covered and whether the server accepted it; the
 * UNIQUE key is what makes a claim exclusive (src/digest/deliveries.ts).
 */
export default `
CREATE TABLE IF NOT EXISTS digest_deliveries (
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
);
`;
