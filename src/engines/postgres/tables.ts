/**
 * The PostgreSQL engine's table artifacts (contract.ts, EngineTables): every table of the store's schema read at one
 * instant (snapshot.ts), checked (restore.ts, verifyArtifact), read back row by row (for the holds a snapshot makes),
 * and restored into the configured schema (restore.ts), with the staged tables handed to `beforeSwap` on the
 * restore's own connection, inside its transaction, before they go live.
 */
import { closeSync, readSync } from 'node:fs';
import { join } from 'node:path';
import type pg from 'pg';
import { storeError, usageError } from '../../core/errors.js';
import { openRegularFile, readRegularFile } from '../../core/read-file.js';
import type { EngineTables, PostgresStoreHandle, TablesTaken } from '../contract.js';
import { copiedColumns } from './copy-describe.js';
import { checkArtifact, PgRestoreRefused, restoreTables } from './restore.js';
import { copyRowReader } from './copy-text.js';
import type { PgSession } from './session.js';
import { quoteIdent } from './session.js';
import { MANIFEST_FILE, snapshotTables, type PgSnapshotManifest } from './snapshot.js';
import { RUNS_TABLE } from './runs.js';
import { pgStoreVectors } from './vectors.js';

const schemaOf = (handle: PostgresStoreHandle): string => {
  if (!handle.config.postgres) throw storeError(`${handle.name}: no postgres section`);
  return handle.config.postgres.schema;
};

const taken = (m: PgSnapshotManifest): TablesTaken => ({
  format: m.format,
  source: `postgres schema ${m.schema}`,
  takenAt: m.takenAt,
  tables: Object.fromEntries(m.tables.map((t) => [t.name, t.rows])),
  files: [MANIFEST_FILE, ...m.tables.map((t) => t.file)],
});

async function checked(folder: string): Promise<Awaited<ReturnType<typeof checkArtifact>>> {
  try {
    return await checkArtifact(folder);
  } catch (err) {
    if (err instanceof PgRestoreRefused) throw storeError(err.message, err);
    throw err;
  }
}

/**
 * The session a `beforeSwap` is given: the restore's one connection, in its transaction (never released by it). What
 * runs on it in transactions of its own (a layout's erase) gets them as savepoints of the restore's: its COMMIT
 * cannot end the restore's transaction, and its ROLLBACK undoes only its own statements.
 */
function sessionOn(client: pg.PoolClient, outer: PgSession): PgSession {
  const nested = (sql: string): string | null => {
    const verb = sql.trim().replace(/;$/, '').toUpperCase();
    if (verb === 'BEGIN' || verb === 'START TRANSACTION') return 'SAVEPOINT mw_nested';
    if (verb === 'COMMIT' || verb === 'END') return 'RELEASE SAVEPOINT mw_nested';
    if (verb === 'ROLLBACK') return 'ROLLBACK TO SAVEPOINT mw_nested; RELEASE SAVEPOINT mw_nested';
    return null;
  };
  const held = {
    query: (sql: string, params?: unknown[]) => client.query(nested(sql) ?? sql, params),
    release: () => {},
  } as unknown as pg.PoolClient;
  return {
    connect: async () => held,
    async query(sql, params) {
      try {
        return await client.query(sql, params as unknown[]);
      } catch (err) {
        throw outer.explain(err, 'query');
      }
    },
    explain: outer.explain,
    end: async () => {},
    nested: true,
  };
}

/** A file's bytes, read synchronously a megabyte at a time into one buffer (each piece is gone at the next). */
function* piecesOf(path: string): Generator<Buffer> {
  const fd = openRegularFile(path);
  const buf = Buffer.alloc(1 << 20);
  try {
    for (let n = readSync(fd, buf, 0, buf.length, null); n > 0; n = readSync(fd, buf, 0, buf.length, null)) yield buf.subarray(0, n);
  } finally {
    closeSync(fd);
  }
}

export const postgresTables: EngineTables<PostgresStoreHandle> = {
  async take(handle, folder, opts = {}) {
    const schema = schemaOf(handle);
    const client = await handle.pg.connect();
    try {
      const found = await client.query<{ name: string }>(
        // Not warden_runs: memory-warden's record of the fleet's scheduled runs is not the store's memory, and a restore
        // must not rewind it (a run done since the snapshot would read as never claimed).
        `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname <> $2 ORDER BY c.relname`, [schema, RUNS_TABLE]);
      if (found.rows.length === 0) throw usageError(`stores.${handle.name}.postgres.schema: schema ${schema} holds no table to snapshot (init creates them)`);
      return taken(await snapshotTables(client, { schema, tables: found.rows.map((r) => r.name), folder, ...(opts.rows ? { rows: opts.rows } : {}) }));
    } catch (err) {
      throw handle.pg.explain(err, 'snapshot');
    } finally {
      client.release();
    }
  },
  async verify(folder) {
    const { manifest, digests } = await checked(folder);
    return { ...taken(manifest), digests };
  },
  *values(folder, table, columns) {
    const manifest = JSON.parse(readRegularFile(join(folder, MANIFEST_FILE))) as PgSnapshotManifest;
    const t = manifest.tables.find((x) => x.name === table);
    if (!t) return;
    const cols = copiedColumns(t.description).map((c) => c.name);
    const at = columns.map((c) => cols.indexOf(c));
    if (at.some((i) => i < 0)) return;
    const got: (string | null)[][] = [];
    const reader = copyRowReader(at, (v) => got.push(v));
    for (const piece of piecesOf(join(folder, t.file))) {
      reader.push(piece);
      yield* got;
      got.length = 0;
    }
    reader.end();
    yield* got;
  },
  async generation(handle) {
    const r = await handle.pg.query<{ oid: string }>(
      `SELECT c.oid::text AS oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY c.oid`, [schemaOf(handle)]);
    return r.rows.map((x) => x.oid);
  },
  async restore(handle, folder, opts = {}) {
    const schema = schemaOf(handle);
    const { manifest } = await checked(folder);
    const client = await handle.pg.connect();
    let broken = false;
    try {
      const { beforeSwap } = opts;
      const done = await restoreTables(client, {
        folder, schema,
        ...(beforeSwap ? {
          beforeSwap: async (staging: string) => {
            const pg = sessionOn(client, handle.pg);
            const vectors = pgStoreVectors(handle.config, pg, staging);
            await beforeSwap({
              ...handle, schema: quoteIdent(staging), path: `${handle.path} (restored tables, not yet live)`, pg, close: async () => {},
              ...(vectors ? { vectors } : {}),
            });
            // What ran in it may have set lock_timeout for the rest of the transaction (SET LOCAL outlives a released
            // savepoint): the swap waits for the agents' locks as it does without it.
            await client.query('SET LOCAL lock_timeout TO DEFAULT');
          },
        } : {}),
      });
      return { ...taken(manifest), source: `postgres schema ${done.schema}`, tables: Object.fromEntries(done.tables.map((t) => [t.name, t.rows])) };
    } catch (err) {
      broken = !(err as { kind?: string }).kind && !(err instanceof PgRestoreRefused);
      if (err instanceof PgRestoreRefused) throw storeError(`restore into ${schema}: ${err.message}`, err);
      throw handle.pg.explain(err, 'restore');
    } finally {
      client.release(broken);
    }
  },
};

