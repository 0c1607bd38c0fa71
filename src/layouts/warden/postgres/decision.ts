import type pg from 'pg';
import { sqlState } from '../../../engines/postgres/session.js';
import type { PostgresStoreHandle, VerdictLog } from '../../contract.js';

/** A write that met an agent's lock past lock_timeout is tried again this many times, then fails (transient). */
const LOCK_RETRIES = 20;

/** An error of the server or the connection to it (the rest, a guard's or the state db's, are passed on as they are). */
const fromServer = (err: unknown) => typeof (err as { severity?: unknown })?.severity === 'string' || /^E[A-Z]+$/.test(sqlState(err) ?? '');

/** Canonical text of a timestamptz column (`YYYY-MM-DD HH:MM:SS`, UTC, whole seconds): what SQLite's rows hold. */
export const canon = (col: string) => `to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')`;

/** A canonical text as the instant it names (UTC), for a timestamptz parameter. */
export const utc = (param: string) => `(${param}::timestamp AT TIME ZONE 'UTC')`;

let recording: Promise<unknown> = Promise.resolve();

/**
 * The state db's transaction stays open across the store's COMMIT (an await): one such at a time in this process, so
 * a second decision (the review page's requests) waits here for the first's commit rather than on the state db's
 * write lock, which it would wait for with the whole process blocked. The COMMIT waits on no lock: no deadlock.
 */
function oneAtATime<T>(fn: () => Promise<T>): Promise<T> {
  const run = recording.then(fn, fn);
  recording = run.catch(() => {});
  return run;
}

/**
 * One decision on a PostgreSQL store, written with its record in the state db (`log`): `work` reads and writes the
 * store in one short transaction (SET LOCAL lock_timeout: no agent waits on it longer) and returns what to record;
 * that runs in the log's transaction, opened after the store's writes and committed right after the store's commit,
 * so a store write that fails records nothing. A lock an agent held past lock_timeout (or a deadlock) rolls the
 * transaction back and it is tried again, from the start: nothing of a try that did not commit is recorded.
 */
export async function decideOnPg<T>(
  store: PostgresStoreHandle, log: VerdictLog, doing: string,
  work: (client: pg.PoolClient) => Promise<() => T>,
): Promise<T> {
  const client = await store.pg.connect();
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        await client.query('BEGIN');
        await client.query(`SET LOCAL lock_timeout = ${Math.floor(store.config.postgres!.lockTimeoutMs)}`);
        const record = await work(client);
        return await oneAtATime(async () => {
          log.begin();
          try {
            const out = record();
            await client.query('COMMIT');
            log.commit();
            return out;
          } catch (err) {
            log.rollback(); // before the next decision may open its own
            throw err;
          }
        });
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        const again = (sqlState(err) === '55P03' || sqlState(err) === '40P01') && attempt < LOCK_RETRIES;
        if (!again) throw fromServer(err) ? store.pg.explain(err, doing) : err;
        await new Promise((r) => setTimeout(r, 5 + Math.random() * 20));
      }
    }
  } finally {
    client.release();
  }
}
