import { storeError } from '../../../core/errors.js';
import type { PostgresInit, PostgresStoreHandle } from '../../contract.js';
import { compressibleColumns, uncompressedStorageSql } from '../../../engines/postgres/bytes.js';
import { REQUIRED_PG, STORE_TABLES, schemaOf } from './names.js';
import { openVectorSide } from './vectors.js';

// A Mastra store on PostgreSQL is PostgresStore's: its tables are Mastra's (it creates them at start-up), never
// memory-warden's. init creates none; it stores their text and JSON columns uncompressed (as the warden layout's
// are), so that erase's byte check can read the relation files, and PgVector's tables the same.

export async function assertMastraSchemaPg(store: PostgresStoreHandle): Promise<void> {
  const schema = schemaOf(store);
  const have = new Set((await store.pg.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')`, [schema])).rows.map((r) => r.name));
  const missing = REQUIRED_PG.filter((t) => !have.has(t));
  if (missing.length > 0) {
    throw storeError(`stores.${store.name}.postgres.schema: schema "${schema}" has no ${missing.join(', ')}: not a Mastra memory store (layout: mastra wants @mastra/pg PostgresStore's tables, its schemaName)`);
  }
}

/** The tables whose columns init stores uncompressed: the store's, and PgVector's wherever they are. */
export async function initMastraPg(store: PostgresStoreHandle): Promise<PostgresInit> {
  const created: string[] = [];
  const notes: string[] = [];
  const schema = schemaOf(store);
  await uncompress(store.pg, schema, [...STORE_TABLES], created, store.name);
  const v = await openVectorSide(store);
  try {
    if (v.tables.length === 0) notes.push(`no PgVector table in schema ${v.schema}${v.own ? ' of mastra.pgvector.url' : ''} yet (Mastra's Memory creates one with its first embedding; run init again after, for its storage)`);
    else await uncompress(v.pg, v.schema, v.tables, created, store.name);
  } finally {
    await v.close();
  }
  return { created, notes };
}

async function uncompress(pg: PostgresStoreHandle['pg'], schema: string, tables: string[], created: string[], name: string): Promise<void> {
  const c = await pg.connect();
  try {
    const cols = (await compressibleColumns(c, schema, tables)).filter((x) => x.relation === x.table);
    for (const t of tables) {
      const mine = cols.filter((x) => x.table === t).map((x) => x.column);
      if (mine.length === 0) continue;
      for (const sql of uncompressedStorageSql(schema, t, mine)) await c.query(sql);
      created.push(`uncompressed storage of ${t}.${mine.join(', ')}`);
    }
  } catch (err) {
    throw pg.explain(err, `init (stores.${name})`);
  } finally {
    c.release();
  }
}
