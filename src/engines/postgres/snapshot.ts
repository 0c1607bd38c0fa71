/**
 * One consistent artifact of a set of tables of one schema at one instant: a folder with one COPY text file per
 * table and `manifest.json` (each file's sha256, byte and row counts, and the tables' descriptions: columns, types,
 * constraints with their ON DELETE actions, indexes, storage settings; and the views of the schema that read them).
 *
 * One instant: every table is read in a single `REPEATABLE READ READ ONLY` transaction on one connection, which
 * first takes ACCESS SHARE locks on them all (agents keep writing; only DDL waits), so every COPY sees the same
 * snapshot of the database and an invariant each writer transaction keeps across tables holds in the artifact.
 * Streamed: rows go from the socket through the hash into the file with backpressure (copy-stream.ts), so memory
 * does not grow with the table. pg_dump is not used: pg_dump 15 refuses newer servers (PGlite is PostgreSQL 18),
 * and `pg_dump --snapshot=<id>` would need this transaction's exported snapshot and a second process anyway.
 */
import { createHash } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { streamToNewFile } from '../../core/write-file.js';
import type pg from 'pg';
import type { TableRowsWatch } from '../contract.js';
import { copyOut } from './copy-stream.js';
import { copyFieldReader, copyFieldText, copyRowReader } from './copy-text.js';
import { copiedColumns, dependentViews, describeTable, quoteIdent as q, type TableDescription, type ViewDescription } from './copy-describe.js';

export const PG_SNAPSHOT_FORMAT = 'memory-warden/pg-tables/1';
export const MANIFEST_FILE = 'manifest.json';

export interface SnapshotTable {
  name: string;
  /** File name inside the artifact's folder. */
  file: string;
  sha256: string;
  bytes: number;
  rows: number;
  description: TableDescription;
}

export interface PgSnapshotManifest {
  format: typeof PG_SNAPSHOT_FORMAT;
  /** The schema the tables were read from (a restore may target another: the configured one). */
  schema: string;
  /** The transaction's start, as the server saw it (ISO 8601). */
  takenAt: string;
  /** version() of the server. */
  server: string;
  /** The transaction's exported snapshot id: what `pg_dump --snapshot` would take to read the same instant. */
  snapshotId: string;
  tables: SnapshotTable[];
  views: ViewDescription[];
}

/**
 * Reads `tables` of `schema` into `folder` (which must exist and be empty of these names) at one instant. `rows`:
 * one table's rows handed over as they stream into its file (the same bytes the file's hash is taken of), so what
 * is made of them needs no second read.
 */
export async function snapshotTables(
  client: pg.ClientBase,
  opts: { schema: string; tables: readonly string[]; folder: string; rows?: TableRowsWatch },
): Promise<PgSnapshotManifest> {
  const { schema, folder } = opts;
  const tables = [...new Set(opts.tables)];
  if (tables.length === 0) throw new Error('snapshot: no tables named');
  await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
  try {
    // Names inside the schema come out unqualified in the descriptions (copy-describe.ts).
    await client.query(`SELECT set_config('search_path', $1, true)`, [`${q(schema)}, pg_catalog`]);
    await client.query(`LOCK TABLE ${tables.map((t) => `${q(schema)}.${q(t)}`).join(', ')} IN ACCESS SHARE MODE`);
    const head = await client.query<{ at: Date; server: string; snap: string }>(
      `SELECT transaction_timestamp() AS at, version() AS server, pg_export_snapshot() AS snap`);
    const oids = await client.query<{ oid: number }>(
      `SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = ANY($2)`,
      [schema, tables]);
    const out: SnapshotTable[] = [];
    for (const [i, name] of tables.entries()) {
      const description = await describeTable(client, schema, name);
      const file = `${String(i).padStart(3, '0')}.copy`;
      const copied = copiedColumns(description).map((c) => c.name);
      const watch = opts.rows?.table === name ? opts.rows : undefined;
      const at = watch?.columns.map((c) => copied.indexOf(c));
      const reader = watch && at && (watch.fields ? copyFieldReader(at, (buf, from, to) => watch.fields!(buf, from, to, copyFieldText)) : copyRowReader(at, watch.row));
      const written = await copyToFile(client, `COPY ${q(schema)}.${q(name)} (${copied.map(q).join(', ')}) TO STDOUT`, join(folder, file), reader);
      out.push({ name, file, ...written, description });
    }
    const views = (await dependentViews(client, oids.rows.map((r) => r.oid)))
      .filter((v) => v.schema === schema).map(({ name, def }) => ({ name, def }));
    const manifest: PgSnapshotManifest = {
      format: PG_SNAPSHOT_FORMAT,
      schema,
      takenAt: head.rows[0]!.at.toISOString(),
      server: head.rows[0]!.server,
      snapshotId: head.rows[0]!.snap,
      tables: out,
      views,
    };
    await client.query('COMMIT');
    await writeFile(join(folder, MANIFEST_FILE), `${JSON.stringify(manifest, null, 2)}\n`, { flush: true, mode: 0o600, flag: 'wx' });
    return manifest;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw new Error(`snapshot of ${schema}: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * How many bytes of rows may wait for the disk before the socket is paused: with the stream's default (16 kB) every
 * 64 kB piece paused the server's stream until the write was done.
 */
const WRITE_AHEAD = 4 << 20;

/** One COPY into one file, hashed (and handed to `reader`) on the way; the file is flushed to disk before this returns. */
async function copyToFile(client: pg.ClientBase, sql: string, path: string, reader?: { push(piece: Buffer): void; end(): void }): Promise<{ sha256: string; bytes: number; rows: number }> {
  const hash = createHash('sha256');
  let bytes = 0;
  const tap = new Transform({
    transform(chunk: Buffer, _enc, done) {
      hash.update(chunk);
      bytes += chunk.length;
      try {
        reader?.push(chunk);
      } catch (err) {
        done(err as Error);
        return;
      }
      done(null, chunk);
    },
    flush(done) {
      try {
        reader?.end();
      } catch (err) {
        done(err as Error);
        return;
      }
      done();
    },
  });
  const written = streamToNewFile(path, { flush: true, mode: 0o600, highWaterMark: WRITE_AHEAD }, tap);
  written.catch(() => {}); // surfaced by the await below
  let rows: number;
  try {
    rows = await copyOut(client, sql, tap);
  } finally {
    tap.end();
  }
  await written;
  return { sha256: hash.digest('hex'), bytes, rows };
}
