import type pg from 'pg';
import type { PostgresConfig } from './config.js';
import type { FleetRunClaim, ScheduledRunRef } from '../contract.js';
import { openPgSession, quoteIdent, type PgSession } from './session.js';

/** Advisory lock class of a scheduled run's claim ('mr'); the second key is the hash of the schema and the run. */
export const RUN_LOCK_CLASS = 0x6d72;

/** The table of the scheduled runs a PostgreSQL store's jobs were claimed for, in the store's schema. */
export const RUNS_TABLE = 'warden_runs';

const runsDdl = (s: string) => `
CREATE TABLE IF NOT EXISTS ${s}.${RUNS_TABLE} (
  id            bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
  scheduled_run text PRIMARY KEY,
  job           text NOT NULL,
  outcome       text NOT NULL CHECK (outcome IN ('running', 'ok', 'failed')),
  host          text NOT NULL,
  pid           integer NOT NULL,
  started_at    timestamptz NOT NULL,
  finished_at   timestamptz,
  attempts      integer NOT NULL DEFAULT 1
)`;

/** The table, made once: two first claims at once wait for each other here rather than collide in the catalog. */
async function ensureRunsTable(client: pg.PoolClient, schema: string): Promise<void> {
  const there = await client.query<{ t: string | null }>('SELECT to_regclass($1) AS t', [`${quoteIdent(schema)}.${RUNS_TABLE}`]);
  if (there.rows[0]!.t !== null) return;
  await client.query('BEGIN');
  try {
    await client.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [RUN_LOCK_CLASS, schema]);
    await client.query(runsDdl(quoteIdent(schema)));
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  }
}

interface RunRow {
  id: string;
  outcome: 'running' | 'ok' | 'failed';
  host: string;
  pid: number;
  finished_at: Date | null;
}

/**
 * A scheduled run of a PostgreSQL store, once across the fleet. The database decides: the claimer takes a session
 * advisory lock keyed by the schema and the run (`pg_try_advisory_lock`) on a connection of its own, held until the
 * run ends, and under it reads and writes the run's row in `<schema>.warden_runs`. A row 'ok' means done, by
 * whichever host; the lock held by another session means in progress there; a 'running' row whose lock is free is a
 * run whose holder died (the server ends a killed process's session and its locks with it): claimed again, as the
 * run never finished. Hash collisions of two runs' keys only make one wait (in progress, retried).
 */
export async function claimPgScheduledRun(storeName: string, cfg: PostgresConfig, ref: ScheduledRunRef): Promise<FleetRunClaim> {
  const session: PgSession = openPgSession(storeName, cfg, { max: 1 });
  const s = quoteIdent(cfg.schema);
  const key = `${cfg.schema} ${ref.scheduledRun}`;
  let client: pg.PoolClient | undefined;
  let locked = false;
  const close = async () => {
    if (locked) await client?.query('SELECT pg_advisory_unlock($1, hashtext($2))', [RUN_LOCK_CLASS, key]).catch(() => {});
    client?.release(true);
    await session.end().catch(() => {});
  };
  try {
    client = await session.connect();
    await ensureRunsTable(client, cfg.schema);
    locked = (await client.query<{ got: boolean }>('SELECT pg_try_advisory_lock($1, hashtext($2)) AS got', [RUN_LOCK_CLASS, key])).rows[0]!.got;
    const row = (await client.query<RunRow>(`SELECT id, outcome, host, pid, finished_at FROM ${s}.${RUNS_TABLE} WHERE scheduled_run = $1`, [ref.scheduledRun])).rows[0];
    if (!locked) {
      await close();
      return { inProgress: { host: row?.host ?? null, pid: row?.pid ?? null } };
    }
    if (row?.outcome === 'ok') {
      await close();
      return { alreadyRan: { runId: Number(row.id), finishedAt: row.finished_at!.toISOString(), host: row.host } };
    }
    const claimed = await client.query<{ id: string }>(
      `INSERT INTO ${s}.${RUNS_TABLE} (scheduled_run, job, outcome, host, pid, started_at) VALUES ($1, $2, 'running', $3, $4, now())
       ON CONFLICT (scheduled_run) DO UPDATE SET outcome = 'running', host = EXCLUDED.host, pid = EXCLUDED.pid, started_at = EXCLUDED.started_at,
         finished_at = NULL, attempts = ${RUNS_TABLE}.attempts + 1
       RETURNING id`,
      [ref.scheduledRun, ref.job, ref.host, ref.pid],
    );
    const held = client;
    let ended = false;
    return {
      claimed: {
        runId: Number(claimed.rows[0]!.id),
        async end(outcome) {
          if (ended) return; // once: its connection is gone after the first
          ended = true;
          try {
            await held.query(`UPDATE ${s}.${RUNS_TABLE} SET outcome = $2, finished_at = now() WHERE scheduled_run = $1`, [ref.scheduledRun, outcome]);
          } catch (err) {
            throw session.explain(err, `record the end of scheduled run ${ref.scheduledRun}`);
          } finally {
            await close();
          }
        },
      },
    };
  } catch (err) {
    await close();
    throw session.explain(err, `claim scheduled run ${ref.scheduledRun}`);
  }
}
