import { storeError, transientError } from '../../core/errors.js';
import type { StoreConfig } from '../../store/config.js';
import type { EngineIntegrity, EngineLock, PostgresStoreHandle, StoreEngine } from '../contract.js';
import { openPgSession, quoteIdent } from './session.js';
import { pgStoreVectors } from './vectors.js';
import { claimPgScheduledRun } from './runs.js';
import { postgresTables } from './tables.js';
import { scrubErasedPg } from './scrub.js';

/** Advisory lock class of memory-warden's maintenance lock ('mw'); the second key is the schema's hash. */
export const LOCK_CLASS = 0x6d77;

function pgOf(store: StoreConfig) {
  if (!store.postgres) throw storeError('engine postgres: no postgres section (the config check requires one)');
  return store.postgres;
}

/**
 * A store in a schema of a PostgreSQL database, reachable from every host. One maintenance writer at a time across
 * the fleet: a session advisory lock keyed by the schema, on a connection of its own held for the job, which the
 * server releases when that connection ends (the holder killed -9 included). The integrity check is amcheck's
 * bt_index_check over the store's indexes, where the extension is installed in the database. A scheduled run of its
 * jobs is claimed in the database too (runs.ts): once across the fleet, whichever worker takes it. Its snapshots are
 * its schema's tables at one instant (tables.ts).
 */
export const postgresEngine: StoreEngine<PostgresStoreHandle> = {
  name: 'postgres',
  reach: 'fleet',
  describe: (store) => `postgres schema ${pgOf(store).schema}`,
  async open(name, store) {
    const cfg = pgOf(store);
    const pg = openPgSession(name, cfg);
    try {
      // The first connection says at once what is wrong with the URL, the server or the credentials.
      (await pg.connect()).release();
    } catch (err) {
      await pg.end().catch(() => {});
      throw err;
    }
    const vectors = pgStoreVectors(store, pg, cfg.schema);
    return {
      engine: 'postgres', name, config: store, path: `postgres schema ${cfg.schema}`, schema: quoteIdent(cfg.schema), pg,
      ...(vectors ? { vectors } : {}),
      close: () => pg.end(),
    };
  },
  async lock(handle, holder) {
    const schema = pgOf(handle.config).schema;
    const client = await handle.pg.connect();
    let taken = false;
    try {
      const r = await client.query<{ taken: boolean }>('SELECT pg_try_advisory_lock($1, hashtext($2)) AS taken', [LOCK_CLASS, schema]);
      taken = r.rows[0]!.taken;
    } catch (err) {
      client.release(true);
      throw handle.pg.explain(err, `${holder}: take the maintenance lock`);
    }
    if (!taken) {
      client.release();
      throw transientError(`${handle.name} (${handle.path}): another maintenance job holds this store's lock (a PostgreSQL advisory lock, from this or another host); try again later`);
    }
    return {
      async release() {
        // Ending the connection releases the lock however the unlock went.
        await client.query('SELECT pg_advisory_unlock($1, hashtext($2))', [LOCK_CLASS, schema]).catch(() => {});
        client.release(true);
      },
    } satisfies EngineLock;
  },
  async integrity(handle): Promise<EngineIntegrity> {
    const installed = await handle.pg.query<{ schema: string }>(`SELECT n.nspname AS schema FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'amcheck'`);
    if (installed.rows.length === 0) {
      return { result: 'ok', skipped: 'amcheck is not installed in this database, so the indexes were not verified (CREATE EXTENSION amcheck, run by a role that may, installs it; init does so for a warden store)' };
    }
    const ext = quoteIdent(installed.rows[0]!.schema);
    const indexes = await handle.pg.query<{ name: string; oid: number }>(
      `SELECT c.relname AS name, c.oid::int AS oid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid
       JOIN pg_am a ON a.oid = c.relam WHERE t.relnamespace = $1::regnamespace AND a.amname = 'btree' ORDER BY c.relname`,
      [pgOf(handle.config).schema],
    );
    const broken: string[] = [];
    for (const { name, oid } of indexes.rows) {
      try {
        await handle.pg.query(`SELECT ${ext}.bt_index_check($1::oid, true)`, [oid]);
      } catch (err) {
        broken.push(`index ${name}: ${String((err as Error).message).split('\n')[0]}`);
      }
    }
    return { result: broken.length === 0 ? 'ok' : broken.join('; ') };
  },
  claimScheduledRun: (name, store, run) => claimPgScheduledRun(name, pgOf(store), run),
  // open connected, and the layout's assertSchema found the tables: nothing more to prove before reading.
  assertReadable: async () => {},
  async identity(handle) {
    const r = await handle.pg.query<{ db: string; ns: string }>(
      `SELECT d.oid::text AS db, n.oid::text AS ns FROM pg_database d, pg_namespace n WHERE d.datname = current_database() AND n.nspname = $1`,
      [pgOf(handle.config).schema]);
    if (r.rows.length === 0) return undefined;
    // The cluster's own id where this role may read it; else the server's address stands for it.
    const cluster = await handle.pg.query<{ id: string }>(`SELECT system_identifier::text AS id FROM pg_control_system()`).then(
      (c) => c.rows[0]!.id,
      async () => (await handle.pg.query<{ id: string }>(`SELECT coalesce(host(inet_server_addr()), 'local') || ':' || coalesce(inet_server_port(), 0) AS id`)).rows[0]!.id,
    );
    return `postgres:${cluster}:${r.rows[0]!.db}:${r.rows[0]!.ns}`;
  },
  tables: postgresTables,
  scrubErased: (handle, opts) => scrubErasedPg(handle, pgOf(handle.config), opts),
};
