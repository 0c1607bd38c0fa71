/** Job runs and their outcome: the digest's "what ran", `status`, and the schedules' "last ok run". */
export default `
CREATE TABLE IF NOT EXISTS job_runs (
  id          INTEGER PRIMARY KEY,
  job         TEXT NOT NULL,
  store       TEXT,
  started_at  TEXT NOT NULL,
  finished_at TEXT,
  outcome     TEXT NOT NULL CHECK (outcome IN ('running', 'ok', 'failed')),
  result      TEXT,
  error       TEXT
);
CREATE INDEX IF NOT EXISTS job_runs_by_time ON job_runs(finished_at);
CREATE INDEX IF NOT EXISTS job_runs_by_job ON job_runs(job, store, outcome, finished_at);
`;
