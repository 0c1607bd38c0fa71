/**
 * Restores an artifact of snapshot.ts into the configured schema, and only there.
 *
 * Order, so that a failure or kill -9 at any point leaves the old tables or the new ones, never a mix:
 * 1. every file's sha256 is checked against the manifest before anything changes (a mismatch names the file);
 * 2. then one transaction: a staging schema of memory-warden's own (`<schema>__mw_restore`, marked by a comment;
 *    one of that name without the mark is refused), the tables created there, the rows streamed in and hashed
 *    again, constraints, foreign keys and indexes added; then the old tables locked, the views of the schema that
 *    read them dropped, the old tables dropped (RESTRICT: a table outside the artifact that references them stops
 *    the restore), the staged tables moved in (ALTER TABLE ... SET SCHEMA: indexes and TOAST go with them), the
 *    views created again, the staging schema dropped, COMMIT. Agents see the old tables until the commit and the
 *    new ones after it; the old tables are locked only for the swap at the end.
 * `beforeSwap`, when given, is called with the staging schema's name just before step 2's swap, on this connection in
 * this transaction (the staged tables are visible to it alone); what it throws rolls everything back.
 * Two restores of one schema queue on a transaction's advisory lock. Not carried: grants on the old tables (the new ones belong
 * to the restoring role), views in other schemas (the restore stops instead of touching them).
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Transform } from 'node:stream';
import type pg from 'pg';
import { copyIn } from './copy-stream.js';
import { unescapeCopyText } from './copy-text.js';
import { RUNS_TABLE } from './runs.js';
import { copiedColumns, createTableSql, dependentViews, finishTableSql, quoteIdent as q, type TableDescription } from './copy-describe.js';
import { MANIFEST_FILE, PG_SNAPSHOT_FORMAT, type PgSnapshotManifest } from './snapshot.js';

export { unescapeCopyText };

const STAGING_MARK = 'memory-warden restore staging';

export class PgRestoreRefused extends Error {}

/** What `beforeSwap` threw, passed on as it was once the transaction is rolled back. */
class StoppedBeforeSwap extends Error {
  constructor(readonly thrown: unknown) {
    super('stopped before the swap');
  }
}

export interface PgRestoreResult {
  schema: string;
  tables: { name: string; rows: number }[];
}

/** The manifest of the artifact in `folder`, its files' hashes checked; throws PgRestoreRefused naming the file. */
export async function verifyArtifact(folder: string): Promise<PgSnapshotManifest> {
  return (await checkArtifact(folder)).manifest;
}

/** verifyArtifact's manifest, and every file's size and sha256 (the manifest's own too) as the check read them. */
export async function checkArtifact(folder: string): Promise<{ manifest: PgSnapshotManifest; digests: Record<string, { bytes: number; sha256: string }> }> {
  const path = join(folder, MANIFEST_FILE);
  let manifest: PgSnapshotManifest;
  const digests: Record<string, { bytes: number; sha256: string }> = {};
  try {
    const text = await readFile(path);
    manifest = JSON.parse(text.toString('utf8')) as PgSnapshotManifest;
    digests[MANIFEST_FILE] = { bytes: text.length, sha256: createHash('sha256').update(text).digest('hex') };
  } catch (err) {
    throw new PgRestoreRefused(`${path}: not a readable manifest (${(err as Error).message})`);
  }
  if (manifest.format !== PG_SNAPSHOT_FORMAT || !Array.isArray(manifest.tables)) throw new PgRestoreRefused(`${path}: not a ${PG_SNAPSHOT_FORMAT} manifest`);
  for (const t of manifest.tables) {
    const file = join(folder, t.file);
    if (t.file.includes('/') || t.file.includes('\\')) throw new PgRestoreRefused(`${path}: file name ${JSON.stringify(t.file)} leaves the folder`);
    let got: { bytes: number; sha256: string };
    try {
      got = await sha256File(file);
    } catch (err) {
      throw new PgRestoreRefused(`${file}: cannot be read (${(err as Error).message})`);
    }
    if (got.sha256 !== t.sha256) throw new PgRestoreRefused(`${file}: sha256 ${got.sha256} is not the manifest's ${t.sha256} (table ${t.name}): the artifact was changed`);
    digests[t.file] = got;
  }
  return { manifest, digests };
}

/** A file's size and sha256, read a megabyte at a time. */
async function sha256File(path: string): Promise<{ bytes: number; sha256: string }> {
  const h = createHash('sha256');
  let bytes = 0;
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 })) {
    h.update(chunk as Buffer);
    bytes += (chunk as Buffer).length;
  }
  return { bytes, sha256: h.digest('hex') };
}

/** The staging schema's name for `schema` (63 bytes at most, PostgreSQL's limit). */
export function stagingSchema(schema: string): string {
  return `${schema.slice(0, 50)}__mw_restore`;
}

/** Restores the artifact in `folder` into `schema`. `client` must not be in a transaction. */
export async function restoreTables(
  client: pg.ClientBase,
  opts: { folder: string; schema: string; beforeSwap?: (staging: string) => Promise<void> },
): Promise<PgRestoreResult> {
  const { folder, schema } = opts;
  const verified = await verifyArtifact(folder);
  // An artifact taken before warden_runs was left out of snapshots holds it: the fleet's record of its runs stays as
  // it is (tables.ts take).
  const manifest = { ...verified, tables: verified.tables.filter((t) => t.name !== RUNS_TABLE) };
  const staging = stagingSchema(schema);
  const viaCopy = !(await isPglite(client));
  // One transaction from the staging schema to the swap: a failure or kill -9 anywhere rolls all of it back, and
  // nothing of the session (search_path, locks) outlives it (PGlite shares one session among its clients).
  await client.query('BEGIN');
  try {
    await client.query(`SELECT pg_advisory_xact_lock(hashtext($1))`, [`memory-warden restore ${schema}`]);
    await dropStaging(client, staging);
    await client.query(`CREATE SCHEMA ${q(staging)}`);
    await client.query(`COMMENT ON SCHEMA ${q(staging)} IS '${STAGING_MARK}'`);
    // The configured schema after the staging one: a type of an extension installed there (pgvector's `vector`,
    // named unqualified when the tables were read from that same schema) resolves while the tables are staged.
    await client.query(`SELECT set_config('search_path', $1, true)`, [`${q(staging)}, ${q(schema)}, pg_catalog`]);
    const loaded: { name: string; rows: number }[] = [];
    for (const t of manifest.tables) for (const sql of createTableSql(t.description)) await client.query(sql);
    for (const t of manifest.tables) {
      const file = join(folder, t.file);
      const { rows, sha256 } = await loadFile(client, t.description, file, viaCopy);
      if (sha256 !== t.sha256) throw new PgRestoreRefused(`${file}: changed while it was being restored`);
      loaded.push({ name: t.name, rows });
    }
    const finish = manifest.tables.map((t) => finishTableSql(t.description));
    for (const sql of [...finish.flatMap((f) => f.keys), ...finish.flatMap((f) => f.foreign), ...finish.flatMap((f) => f.indexes)]) await client.query(sql);
    for (const t of manifest.tables) await resetIdentities(client, t.description);
    if (opts.beforeSwap) {
      // Given the staged tables, on this connection, inside this transaction: what it throws stops the restore.
      try {
        await opts.beforeSwap(staging);
      } catch (err) {
        throw new StoppedBeforeSwap(err);
      }
      await client.query(`SELECT set_config('search_path', $1, true)`, [`${q(staging)}, ${q(schema)}, pg_catalog`]);
    }
    await swap(client, schema, staging, manifest);
    await client.query('COMMIT');
    return { schema, tables: loaded };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    if (err instanceof PgRestoreRefused) throw err;
    if (err instanceof StoppedBeforeSwap) throw err.thrown;
    throw new Error(`restore into ${schema}: ${(err as Error).message}`, { cause: err });
  }
}

async function dropStaging(client: pg.ClientBase, staging: string): Promise<void> {
  const found = await client.query<{ mark: string | null }>(
    `SELECT obj_description(oid, 'pg_namespace') AS mark FROM pg_namespace WHERE nspname = $1`, [staging]);
  if (found.rowCount === 0) return;
  if (found.rows[0]!.mark !== STAGING_MARK) throw new PgRestoreRefused(`schema ${staging} exists and is not memory-warden's staging schema: rename it or drop it`);
  await client.query(`DROP SCHEMA ${q(staging)} CASCADE`);
}

async function isPglite(client: pg.ClientBase): Promise<boolean> {
  const v = await client.query<{ v: string }>(`SELECT version() AS v`);
  return v.rows[0]!.v.includes('PGlite');
}

/** Streams one COPY file into the staged table, hashing it again on the way. */
async function loadFile(client: pg.ClientBase, t: TableDescription, file: string, viaCopy: boolean): Promise<{ rows: number; sha256: string }> {
  const hash = createHash('sha256');
  const source = createReadStream(file).pipe(new Transform({
    transform(chunk: Buffer, _e, done) {
      hash.update(chunk);
      done(null, chunk);
    },
  }));
  const cols = copiedColumns(t);
  const rows = viaCopy
    ? await copyIn(client, `COPY ${q(t.name)} (${cols.map((c) => q(c.name)).join(', ')}) FROM STDIN`, source)
    : await insertCopyText(client, t, source);
  return { rows, sha256: hash.digest('hex') };
}

/**
 * PGlite's wire server ends the session on COPY FROM STDIN, so there the COPY text is parsed here and sent as
 * batches of text arrays, each value cast by its column's own type (the same input functions COPY would call).
 */
async function insertCopyText(client: pg.ClientBase, t: TableDescription, source: NodeJS.ReadableStream): Promise<number> {
  const cols = copiedColumns(t);
  const overriding = cols.some((c) => c.identity === 'a') ? ' OVERRIDING SYSTEM VALUE' : '';
  const sql = `INSERT INTO ${q(t.name)} (${cols.map((c) => q(c.name)).join(', ')})${overriding}
    SELECT ${cols.map((c, i) => `u.c${i}::${c.type}`).join(', ')}
      FROM unnest(${cols.map((_, i) => `$${i + 1}::text[]`).join(', ')}) AS u(${cols.map((_, i) => `c${i}`).join(', ')})`;
  let batch: (string | null)[][] = cols.map(() => []);
  let size = 0;
  let rows = 0;
  const flush = async () => {
    if (batch[0]!.length === 0 && cols.length > 0) return;
    await client.query(sql, batch);
    batch = cols.map(() => []);
    size = 0;
  };
  for await (const line of createInterface({ input: source, crlfDelay: Infinity })) {
    const fields = line.split('\t');
    if (fields.length !== cols.length) throw new Error(`table ${t.name}: a row has ${fields.length} fields, not ${cols.length}`);
    fields.forEach((f, i) => batch[i]!.push(unescapeCopyText(f)));
    rows++;
    size += line.length;
    if (size > 1 << 20 || batch[0]!.length >= 2000) await flush();
  }
  await flush();
  return rows;
}

/** An identity or serial column's sequence continues after the highest value restored. */
async function resetIdentities(client: pg.ClientBase, t: TableDescription): Promise<void> {
  for (const c of t.columns.filter((c) => c.identity || c.serial)) {
    await client.query(`SELECT setval(pg_get_serial_sequence($1, $2), m, true) FROM (SELECT max(${q(c.name)}) AS m FROM ${q(t.name)}) x WHERE m IS NOT NULL`,
      [q(t.name), c.name]);
  }
}

/** The end of the restore's transaction, where the old tables make way: agents see them until the commit. */
async function swap(client: pg.ClientBase, schema: string, staging: string, manifest: PgSnapshotManifest): Promise<void> {
  const names = manifest.tables.map((t) => t.name);
  {
    const old = await client.query<{ oid: number; name: string }>(
      `SELECT c.oid, c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relname = ANY($2) AND c.relkind = 'r'`, [schema, names]);
    const oldList = old.rows.map((r) => `${q(schema)}.${q(r.name)}`).join(', ');
    if (old.rowCount) await client.query(`LOCK TABLE ${oldList} IN ACCESS EXCLUSIVE MODE`);
    // Fully qualified definitions, so they read the new tables once these carry the old names.
    await client.query(`SELECT set_config('search_path', 'pg_catalog', true)`);
    const views = old.rowCount ? await dependentViews(client, old.rows.map((r) => r.oid)) : [];
    const elsewhere = views.find((v) => v.schema !== schema);
    if (elsewhere) throw new PgRestoreRefused(`view ${elsewhere.schema}.${elsewhere.name} in another schema reads the tables: restore leaves other schemas alone`);
    for (const v of [...views].reverse()) await client.query(`DROP VIEW ${q(schema)}.${q(v.name)}`);
    if (old.rowCount) await client.query(`DROP TABLE ${oldList} RESTRICT`);
    for (const n of names) await client.query(`ALTER TABLE ${q(staging)}.${q(n)} SET SCHEMA ${q(schema)}`);
    for (const v of views) await client.query(`CREATE VIEW ${q(schema)}.${q(v.name)} AS ${v.def}`);
    // The artifact's views the schema lacks (a restore into an empty schema), read with the schema first.
    await client.query(`SELECT set_config('search_path', $1, true)`, [`${q(schema)}, pg_catalog`]);
    for (const v of manifest.views) {
      const exists = await client.query(`SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`, [schema, v.name]);
      if (exists.rowCount === 0) await client.query(`CREATE VIEW ${q(schema)}.${q(v.name)} AS ${v.def}`);
    }
    await client.query(`DROP SCHEMA ${q(staging)} RESTRICT`);
  }
}
