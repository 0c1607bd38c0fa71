import type pg from 'pg';
import { schemaOf } from './names.js';
import type { PostgresStoreHandle } from '../../contract.js';
import { openPgSession, quoteIdent, sqlState, type PgSession } from '../../../engines/postgres/session.js';

const LOCK_RETRIES = 50;
import { mastraOf } from '../names.js';

/**
 * Where @mastra/pg's PgVector keeps a Mastra store's semantic-recall tables: the store's own schema (the default),
 * another schema of its database, or another database (`mastra.pgvector.url`: PgVector on a server with pgvector,
 * PostgresStore on one without). Its tables are found by their shape (`vector_id`, an `embedding` of pgvector's type,
 * `metadata jsonb`), as LibSQLVector's are: Mastra names them per index and dimension.
 */
export interface VectorSide {
  pg: PgSession;
  /** The schema's name, unquoted. */
  schema: string;
  /** In the store's schema, on its connections: deleted in the store's transactions, scrubbed by the engine. */
  together: boolean;
  /** Its own connections (another database): ended by close(). */
  own: boolean;
  tables: string[];
  /** `schema.table` quoted. */
  table(name: string): string;
  close(): Promise<void>;
}

/** PgVector's tables of schema $1, by their shape. */
export const VECTOR_TABLES = `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = $1 AND c.relkind = 'r'
    AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'vector_id' AND NOT a.attisdropped)
    AND EXISTS (SELECT 1 FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid WHERE a.attrelid = c.oid AND a.attname = 'embedding' AND t.typname = 'vector' AND NOT a.attisdropped)
    AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'metadata' AND a.atttypid = 'jsonb'::regtype AND NOT a.attisdropped)
  ORDER BY c.relname`;

export async function openVectorSide(store: PostgresStoreHandle): Promise<VectorSide> {
  const cfg = mastraOf(store.config).pgvector;
  const storeSchema = schemaOf(store);
  const own = cfg?.url !== undefined;
  const pg = own ? openPgSession(store.name, { url: cfg!.url!, ...(cfg!.caFile ? { caFile: cfg!.caFile } : {}) }, { max: 2, setting: `stores.${store.name}.mastra.pgvector` }) : store.pg;
  // Configured as the store's own schema: the schema the handle reads (a restore's staging schema, while it is one).
  const same = !own && (cfg?.schema === undefined || cfg.schema === store.config.postgres!.schema);
  const schema = same ? storeSchema : cfg?.schema ?? 'public';
  try {
    const tables = (await pg.query<{ name: string }>(VECTOR_TABLES, [schema])).rows.map((r) => r.name);
    return {
      pg, schema, own, tables, together: same,
      table: (name) => `${quoteIdent(schema)}.${quoteIdent(name)}`,
      close: async () => { if (own) await pg.end(); },
    };
  } catch (err) {
    if (own) await pg.end().catch(() => {});
    throw err;
  }
}

/**
 * Whether two connection settings reach the same database of the same running server. Asked of the servers, not read
 * from the URLs: two URLs name one database in many ways (`localhost` or `127.0.0.1` or a DNS name, the port left
 * out, a proxy or a forwarded port, the database name left to default to the user's), and two servers can look alike
 * in every address they report (`inet_server_addr()` and its port are the address of the server's side of this
 * connection: 127.0.0.1:5432 for every server behind its own forwarded port, NULL over a Unix socket). What tells one
 * server from another is its cluster's `system_identifier` (`pg_control_system()`, made by initdb; a copy made from a
 * base backup, or a replica, has the same) together with `pg_postmaster_start_time()` (each running server's own, to
 * the microsecond: two copies of one cluster never share it), and, within the server, `current_database()`. Where an
 * administrator revoked `pg_control_system()` from this role, the start time and the database name decide.
 */
export async function sameDatabase(storeName: string, store: { url: string; caFile?: string | undefined }, vectors: { url: string; caFile?: string | undefined }): Promise<boolean> {
  if (store.url === vectors.url) return true; // one URL reaches one database: nothing to ask
  const IDENTITY = `SELECT current_database() AS db, pg_postmaster_start_time()::text AS started,
    CASE WHEN has_function_privilege('pg_control_system()', 'EXECUTE') THEN (SELECT system_identifier::text FROM pg_control_system()) END AS cluster`;
  const ask = async (cfg: { url: string; caFile?: string | undefined }, setting: string) => {
    const session = openPgSession(storeName, { url: cfg.url, ...(cfg.caFile !== undefined ? { caFile: cfg.caFile } : {}) }, { max: 1, setting });
    try {
      return (await session.query<{ db: string; started: string; cluster: string | null }>(IDENTITY)).rows[0]!;
    } finally {
      await session.end();
    }
  };
  const a = await ask(store, `stores.${storeName}.postgres`);
  const b = await ask(vectors, `stores.${storeName}.mastra.pgvector`);
  return a.db === b.db && a.started === b.started && (a.cluster === null || b.cluster === null || a.cluster === b.cluster);
}

/** A connection or a session: both take a query with parameters. */
export type Queryable = { query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<pg.QueryResult<R>> };

/** Embeddings whose metadata names one of `values` under `key` (message_id, thread_id, resource_id), in every table. */
export async function deleteEmbeddings(q: Queryable, v: VectorSide, key: 'message_id' | 'thread_id' | 'resource_id', values: readonly string[]): Promise<number> {
  if (values.length === 0) return 0;
  let n = 0;
  for (const t of v.tables) n += (await q.query(`DELETE FROM ${v.table(t)} WHERE metadata->>'${key}' = ANY($1::text[])`, [values])).rowCount ?? 0;
  return n;
}

/**
 * `vectors` then `rows`: in one transaction of the store when the vectors are in its schema; else the vectors'
 * transaction commits first (a crash leaves a message without its embedding, never an embedding, with the message's
 * full text, without its message). `rows` returning null rolls back its transaction (and the vectors' with it when
 * they share one). `guard`, when given, runs first in the store's transaction (its locks taken, its condition asked):
 * false and nothing is deleted; in the other database the vectors' transaction then commits while the store's locks
 * are held, so that what the guard saw still holds when the rows go.
 */
export async function together<T>(store: PostgresStoreHandle, v: VectorSide, lockTimeoutMs: number,
  vectors: (q: Queryable) => Promise<number>, rows: (q: Queryable) => Promise<T | null>,
  guard?: (q: Queryable) => Promise<boolean>): Promise<{ embeddings: number; result: T | null }> {
  const tx = async <R>(session: PgSession, fn: (c: pg.PoolClient) => Promise<R | null>): Promise<R | null> => {
    const c = await session.connect();
    try {
      for (let locked = 0; ; locked++) {
        try {
          await c.query('BEGIN');
          await c.query(`SET LOCAL lock_timeout = ${Math.floor(lockTimeoutMs)}`);
          const r = await fn(c);
          await c.query(r === null ? 'ROLLBACK' : 'COMMIT');
          return r;
        } catch (err) {
          await c.query('ROLLBACK').catch(() => {});
          // An agent held a row's lock past lock_timeout, or a deadlock was broken: let it finish, then again.
          if ((sqlState(err) === '55P03' || sqlState(err) === '40P01') && locked < LOCK_RETRIES) {
            await new Promise((res) => setTimeout(res, 5 + Math.random() * 20));
            continue;
          }
          throw session.explain(err, 'delete');
        }
      }
    } finally {
      c.release();
    }
  };
  if (v.together) {
    let embeddings = 0;
    const result = await tx(store.pg, async (c) => {
      if (guard && !(await guard(c))) return null;
      embeddings = await vectors(c);
      return rows(c);
    });
    return { embeddings: result === null ? 0 : embeddings, result };
  }
  if (!guard) {
    const embeddings = (await tx(v.pg, async (c) => vectors(c))) ?? 0;
    return { embeddings, result: await tx(store.pg, rows) };
  }
  // Counted across the store transaction's tries: a try that fails after the vectors' commit leaves them gone.
  let embeddings = 0;
  const result = await tx(store.pg, async (c) => {
    if (!(await guard(c))) return null;
    embeddings += (await tx(v.pg, async (vc) => vectors(vc))) ?? 0;
    return rows(c);
  });
  return { embeddings, result };
}
