import { storeError } from '../../../core/errors.js';
import type { PostgresInit, PostgresStoreHandle } from '../../contract.js';
import { REQUIRED_COLUMNS } from '../schema.js';
import { VECTOR_TABLES_SQL } from '../../../vectors/registry.js';
import { quoteIdent } from '../../../engines/postgres/session.js';

/**
 * The memory table of the brief on PostgreSQL, in the store's schema: the same columns as on SQLite (src/layouts/
 * warden/schema.ts), times as timestamptz (an instant by type: no text form to canonicalise, none unparseable),
 * `superseded_by … ON DELETE CASCADE`, the same two indexes and the live_memory view. The text columns are stored
 * uncompressed (STORAGE EXTERNAL), ids included: a byte check of erased text reads the relation files, and a compressed TOAST value
 * never matches what it looks for.
 */
export const memoryDdl = (s: string) => `
CREATE TABLE ${s}.memory (
  id            text PRIMARY KEY,
  subject       text NOT NULL,
  fact          text NOT NULL,
  source        text NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  confirmed_at  timestamptz NOT NULL DEFAULT now(),
  expires_at    timestamptz,
  superseded_by text REFERENCES ${s}.memory(id) ON DELETE CASCADE,
  last_used_at  timestamptz
)`;

/**
 * The text columns a byte check greps for, the ids among them (erase looks for the erased ids too): never compressed.
 * Setting a column's storage sets it on the indexes over it (the primary key, memory_superseded) as well.
 */
export const TEXT_COLUMNS = ['id', 'subject', 'fact', 'source', 'superseded_by'] as const;

export const indexDdl: Record<string, (s: string) => string> = {
  memory_expires: (s) => `CREATE INDEX memory_expires ON ${s}.memory(expires_at)`,
  memory_superseded: (s) => `CREATE INDEX memory_superseded ON ${s}.memory(superseded_by)`,
};

/** Live: not superseded, not expired at `now` (the rule prune deletes by, at the other side of the instant). */
export const liveViewDdl = (s: string) => `
CREATE OR REPLACE VIEW ${s}.live_memory AS
SELECT id, subject, fact, source, confirmed_at, expires_at
FROM ${s}.memory
WHERE superseded_by IS NULL AND (expires_at IS NULL OR expires_at > now())`;

const schemaName = (store: PostgresStoreHandle) => store.config.postgres!.schema;
const setting = (store: PostgresStoreHandle) => `stores.${store.name}.postgres.schema`;

/** Read on `q`: init reads inside its own transaction (PGlite's one backend makes a second connection wait for it). */
async function objects(store: PostgresStoreHandle, q: Pick<PostgresStoreHandle['pg'], 'query'> = store.pg): Promise<{ schema: boolean; relations: Map<string, string>; columns: Set<string>; external: Set<string> }> {
  const name = schemaName(store);
  const schema = (await q.query(`SELECT 1 FROM pg_namespace WHERE nspname = $1`, [name])).rows.length > 0;
  const rel = await q.query<{ relname: string; relkind: string }>(
    `SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1`, [name]);
  const cols = await q.query<{ attname: string; attstorage: string }>(
    `SELECT a.attname, a.attstorage FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = $1 AND c.relname = 'memory' AND a.attnum > 0 AND NOT a.attisdropped`, [name]);
  return {
    schema,
    relations: new Map(rel.rows.map((r) => [r.relname, r.relkind])),
    columns: new Set(cols.rows.map((r) => r.attname)),
    external: new Set(cols.rows.filter((r) => r.attstorage === 'e').map((r) => r.attname)),
  };
}

/** Throws one line naming `stores.NAME.postgres.schema` and what is missing; reads only. */
export async function assertWardenSchemaPg(store: PostgresStoreHandle): Promise<void> {
  const o = await objects(store);
  const name = schemaName(store);
  const init = `memory-warden init --config FILE --store ${store.name} creates it`;
  if (!o.schema) throw storeError(`${setting(store)}: no schema "${name}" in the database (${init})`);
  if (o.relations.get('memory') !== 'r') throw storeError(`${setting(store)}: schema "${name}" has no table memory (${init})`);
  const missing = REQUIRED_COLUMNS.filter((c) => !o.columns.has(c));
  if (missing.length > 0) throw storeError(`${setting(store)}: table ${name}.memory is missing columns ${missing.join(', ')}`);
  const absent = await missingVectorTables(store);
  if (absent.length > 0) {
    throw storeError(`stores.${store.name}.postgres.vectors.tables: schema "${name}" has no vector table ${absent.join(', ')} (id, a vector column, payload jsonb: the agent or its SDK creates it)`);
  }
}

/** The configured pgvector tables the schema lacks (or has in another shape). */
async function missingVectorTables(store: PostgresStoreHandle, q: Pick<PostgresStoreHandle['pg'], 'query'> = store.pg): Promise<string[]> {
  const wanted = store.config.postgres?.vectors?.tables ?? [];
  if (wanted.length === 0) return [];
  const have = new Set((await q.query<{ name: string }>(VECTOR_TABLES_SQL, [schemaName(store)])).rows.map((r) => r.name));
  return wanted.filter((t) => !have.has(t));
}

/**
 * The pgvector tables' part of init: every column the server could compress (the payload, a text id) stored
 * uncompressed, as memory's texts are (the payload may repeat the fact: erase's byte check must be able to read it;
 * pgvector's own types are stored so already), and in payload mode a hash index on the key
 * naming the row (prune and erase delete a batch's vectors by it). The tables themselves are the agent's: init never
 * creates one (their vector dimension is the embedder's); a missing one is a note.
 */
async function initVectorTables(store: PostgresStoreHandle, client: Pick<PostgresStoreHandle['pg'], 'query'>, created: string[], notes: string[]): Promise<void> {
  const cfg = store.config.postgres?.vectors;
  if (!cfg) return;
  const absent = await missingVectorTables(store, client);
  for (const t of absent) notes.push(`vector table ${schemaName(store)}.${t} does not exist yet (the agent or its SDK creates it; run init again after, for its storage)`);
  for (const t of cfg.tables.filter((n) => !absent.includes(n))) {
    const table = `${store.schema}.${quoteIdent(t)}`;
    const cols = await client.query<{ attname: string }>(
      `SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped
         AND attstorage IN ('x', 'm') ORDER BY attnum`, [table]);
    if (cols.rows.length > 0) {
      await client.query(`ALTER TABLE ${table} ${cols.rows.map((c) => `ALTER COLUMN ${quoteIdent(c.attname)} SET STORAGE EXTERNAL`).join(', ')}`);
      created.push(`uncompressed storage of ${t}.${cols.rows.map((c) => c.attname).join(', ')}`);
    }
    if (cfg.pointId === 'payload') {
      const index = `${t.slice(0, 50)}_mw_row`;
      const has = await client.query(`SELECT 1 FROM pg_class WHERE relnamespace = $1::regnamespace AND relname = $2`, [schemaName(store), index]);
      if (has.rows.length === 0) {
        // A hash index: it holds 4-byte hashes, never the ids (nothing of an erased id in it, nothing compressed).
        await client.query(`CREATE INDEX ${quoteIdent(index)} ON ${table} USING hash ((payload->>${literal(cfg.payloadKey)}))`);
        created.push(`index ${index}`);
      }
    }
  }
}

/** A string as an SQL literal (an index expression cannot take a parameter). */
const literal = (v: string) => `'${v.replace(/'/g, "''")}'`;

/** The view as check reads it: present, or missing (init adds it). */
export async function liveViewPresent(store: PostgresStoreHandle): Promise<boolean> {
  return (await objects(store)).relations.get('live_memory') === 'v';
}

/**
 * Create what is missing, in one transaction: the schema, the table, its indexes, the view, the text columns'
 * storage. A table already there is never rewritten (columns it lacks are reported by assertSchema, not invented).
 * amcheck, for check's index verification, is installed where this role may; where not, a note says so.
 */
export async function initWardenPg(store: PostgresStoreHandle): Promise<PostgresInit> {
  const s = store.schema;
  const client = await store.pg.connect();
  const created: string[] = [];
  const notes: string[] = [];
  try {
    await client.query('BEGIN');
    // Two inits at once: the second waits here rather than failing on the first's half-made objects.
    await client.query(`SELECT pg_advisory_xact_lock(hashtext($1))`, [`memory-warden init ${schemaName(store)}`]);
    // On the transaction's own connection: a server of one backend (PGlite) would make another wait for this one.
    const before = await objects(store, client);
    if (!before.schema) {
      await client.query(`CREATE SCHEMA ${s}`);
      created.push(`schema ${schemaName(store)}`);
    }
    if (!before.relations.has('memory')) {
      await client.query(memoryDdl(s));
      created.push('table memory');
    }
    const toExternal = TEXT_COLUMNS.filter((c) => !before.external.has(c));
    if (toExternal.length > 0) {
      await client.query(`ALTER TABLE ${s}.memory ${toExternal.map((c) => `ALTER COLUMN ${c} SET STORAGE EXTERNAL`).join(', ')}`);
      if (before.relations.has('memory')) created.push(`uncompressed storage of ${toExternal.join(', ')}`);
    }
    for (const [name, ddl] of Object.entries(indexDdl)) {
      if (before.relations.has(name)) continue;
      await client.query(ddl(s));
      created.push(`index ${name}`);
    }
    if (!before.relations.has('live_memory')) {
      await client.query(liveViewDdl(s));
      created.push('view live_memory');
    }
    await initVectorTables(store, client, created, notes);
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    client.release();
    throw store.pg.explain(err, 'init');
  }
  try {
    const has = await client.query(`SELECT 1 FROM pg_extension WHERE extname = 'amcheck'`);
    if (has.rows.length === 0) {
      await client.query('CREATE EXTENSION IF NOT EXISTS amcheck');
      created.push('extension amcheck');
    }
  } catch (err) {
    notes.push(`amcheck could not be installed (${String((err as Error).message).split('\n')[0]}): check will not verify the indexes; a superuser can run CREATE EXTENSION amcheck`);
  } finally {
    client.release();
  }
  return { created, notes };
}
