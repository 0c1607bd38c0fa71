import type { Mem0Point, PointId, PointRecord, PointStore, RowVectors, SqlRunner } from '../contract.js';
import type { PgvectorConfig } from './config.js';

export type { PgvectorConfig } from './config.js';

/**
 * Vectors in pgvector tables of a PostgreSQL schema, one table per collection, in the shape mem0's pgvector store
 * writes (`memories(id uuid PRIMARY KEY, vector vector(N), payload jsonb)`; an `id` of type text works the same).
 * Two faces over the same tables: the PointStore every layout reads and writes points through (the collections are
 * the tables of that shape), and the RowVectors of a warden store's `postgres.vectors` section (the tables keyed to
 * the memory rows by `pointId`). Statements run on the runner given: the store's pool, or one connection inside its
 * transaction (`inTransaction`), so a row and its vectors are deleted in one commit. Vectors themselves are never
 * read or written: only ids and payloads.
 */

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Ids per statement: one array parameter, bounded. */
const ID_CHUNK = 1000;

export const quoteIdent = (name: string): string => `"${name.replace(/"/g, '""')}"`;

/** The tables of `schema` in the vector-table shape (an `id`, a column of type `vector`, `payload jsonb`), by name. */
export const VECTOR_TABLES_SQL = `
SELECT c.relname AS name, format_type(i.atttypid, i.atttypmod) AS id_type
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_attribute i ON i.attrelid = c.oid AND i.attname = 'id' AND NOT i.attisdropped
 WHERE n.nspname = $1 AND c.relkind = 'r'
   AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'payload' AND a.atttypid = 'jsonb'::regtype AND NOT a.attisdropped)
   AND EXISTS (SELECT 1 FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid WHERE a.attrelid = c.oid AND t.typname = 'vector' AND NOT a.attisdropped)
 ORDER BY c.relname`;

/** One schema's vector tables on one runner: the SQL both faces share. */
class VectorTables {
  private idTypes: Map<string, string> | undefined;

  constructor(readonly sql: SqlRunner, readonly schema: string) {}

  async existing(): Promise<Map<string, string>> {
    if (!this.idTypes) {
      const r = await this.sql.query(VECTOR_TABLES_SQL, [this.schema]);
      this.idTypes = new Map(r.rows.map((row) => [String(row.name), String(row.id_type)]));
    }
    return this.idTypes;
  }

  /** The quoted table and how its id is cast: a uuid id takes only ids that are UUIDs (others name no point). */
  async table(name: string): Promise<{ t: string; cast: string; valid: (id: string) => boolean }> {
    const type = (await this.existing()).get(name);
    if (type === undefined) throw new Error(`no vector table ${this.schema}.${name} (id, a vector column, payload jsonb)`);
    const uuid = type === 'uuid';
    return { t: `${quoteIdent(this.schema)}.${quoteIdent(name)}`, cast: uuid ? 'uuid' : 'text', valid: (id) => !uuid || UUID.test(id) };
  }

  async page(name: string, after: string | null, limit: number): Promise<{ id: string; payload: Record<string, unknown> | null }[]> {
    const { t, cast } = await this.table(name);
    const r = await this.sql.query(`SELECT id::text AS id, payload FROM ${t} WHERE $1::${cast} IS NULL OR id > $1::${cast} ORDER BY id LIMIT $2`, [after, limit]);
    return r.rows as { id: string; payload: Record<string, unknown> | null }[];
  }

  async byIds(name: string, ids: readonly string[]): Promise<{ id: string; payload: Record<string, unknown> | null }[]> {
    const { t, cast, valid } = await this.table(name);
    const out: { id: string; payload: Record<string, unknown> | null }[] = [];
    const wanted = ids.filter(valid);
    for (let i = 0; i < wanted.length; i += ID_CHUNK) {
      const r = await this.sql.query(`SELECT id::text AS id, payload FROM ${t} WHERE id = ANY($1::${cast}[]) ORDER BY id`, [wanted.slice(i, i + ID_CHUNK)]);
      out.push(...(r.rows as typeof out));
    }
    return out;
  }

  async deleteIds(name: string, ids: readonly string[]): Promise<void> {
    const { t, cast, valid } = await this.table(name);
    const wanted = ids.filter(valid);
    for (let i = 0; i < wanted.length; i += ID_CHUNK) await this.sql.query(`DELETE FROM ${t} WHERE id = ANY($1::${cast}[])`, [wanted.slice(i, i + ID_CHUNK)]);
  }

  /** The rows whose payload `key` names one of `values` (as text). */
  async byPayload(name: string, key: string, values: readonly string[], del: boolean): Promise<string[]> {
    const { t } = await this.table(name);
    const out: string[] = [];
    for (let i = 0; i < values.length; i += ID_CHUNK) {
      const r = await this.sql.query(del
        ? `DELETE FROM ${t} WHERE payload->>$1 = ANY($2::text[]) RETURNING payload->>$1 AS v`
        : `SELECT DISTINCT payload->>$1 AS v FROM ${t} WHERE payload->>$1 = ANY($2::text[])`, [key, values.slice(i, i + ID_CHUNK)]);
      for (const row of r.rows) out.push(String(row.v));
    }
    return out;
  }
}

function pick(payload: Record<string, unknown> | null, keys: boolean | readonly string[]): Record<string, unknown> {
  const all = payload && typeof payload === 'object' && !Array.isArray(payload) ? payload : {};
  if (keys === true) return all;
  if (keys === false) return {};
  return Object.fromEntries(keys.filter((k) => k in all).map((k) => [k, all[k]]));
}

/** The PointStore over a schema's vector tables: the collections are the tables of that shape (`tables` limits them). */
export function pgvectorPointStore(sql: SqlRunner, schema: string, tables?: readonly string[]): PointStore {
  const fresh = () => new VectorTables(sql, schema); // the tables are looked up again by each call: one may appear
  return {
    async collections() {
      const names = [...(await fresh().existing()).keys()];
      return tables ? names.filter((n) => tables.includes(n)) : names;
    },
    async scroll(collection, opts) {
      const rows = await fresh().page(collection, opts.offset === null || opts.offset === undefined ? null : String(opts.offset), opts.limit);
      const points: Mem0Point[] = rows.map((r) => ({ id: r.id, payload: pick(r.payload, opts.payload ?? true) }));
      return { points, next: rows.length === opts.limit ? rows[rows.length - 1]!.id : null };
    },
    async retrieve(collection, ids, payload = true) {
      if (ids.length === 0) return [];
      return (await fresh().byIds(collection, ids)).map((r) => ({ id: r.id, payload: pick(r.payload, payload) }));
    },
    delete: async (collection, ids) => (ids.length === 0 ? undefined : fresh().deleteIds(collection, ids)),
    async setPayload(collection, id, patch) {
      const v = fresh();
      const { t, cast, valid } = await v.table(collection);
      if (!valid(id)) return; // no such point: as Qdrant, nothing to set
      // One statement: the keys set, the others kept (jsonb ||), whatever an agent wrote to the row meanwhile.
      await sql.query(`UPDATE ${t} SET payload = coalesce(payload, '{}'::jsonb) || $2::jsonb WHERE id = $1::${cast}`, [id, JSON.stringify(patch)]);
    },
  };
}

export interface PgvectorRows extends RowVectors {
  readonly schema: string;
}

/**
 * The vector tables of a warden store (`postgres.vectors`), keyed to its rows: by id (the vector row's id is the
 * memory's; a uuid id column matches a memory id written in either case) or by the payload key naming the row.
 */
export function pgvectorRows(sql: SqlRunner, schema: string, cfg: PgvectorConfig): PgvectorRows {
  const tables = new VectorTables(sql, schema);
  const byId = cfg.pointId === 'id';
  const rows: PgvectorRows = {
    schema,
    collections: cfg.tables,
    config: { pointId: cfg.pointId, payloadKey: cfg.payloadKey, textKey: cfg.textKey, expectPoints: cfg.expectPoints },
    pointIdFor: (rowId) => (byId ? rowId : null),
    rowIdsOf(point: PointRecord) {
      if (byId) {
        const id = String(point.id);
        return UUID.test(id) ? [...new Set([id, id.toLowerCase(), id.toUpperCase()])] : [id];
      }
      const v = point.payload?.[cfg.payloadKey];
      return typeof v === 'string' || typeof v === 'number' ? [String(v)] : [];
    },
    async scrollPage(collection, offset, limit, payloadKeys) {
      const page = await tables.page(collection, offset === null ? null : String(offset), limit);
      return {
        points: page.map((r) => ({ id: r.id, payload: pick(r.payload, payloadKeys) })),
        next: page.length === limit ? page[page.length - 1]!.id : null,
      };
    },
    async rowsWithPoints(collection, rowIds) {
      const found = new Set<string>();
      if (!byId) {
        for (const v of await tables.byPayload(collection, cfg.payloadKey, rowIds, false)) found.add(v);
        return found;
      }
      const present = new Set((await tables.byIds(collection, rowIds)).map((r) => r.id.toLowerCase()));
      for (const id of rowIds) if (present.has(id.toLowerCase())) found.add(id);
      return found;
    },
    deletePoints: (collection, points: readonly PointId[]) => tables.deleteIds(collection, points.map(String)),
    async deleteForRows(rowIds) {
      if (rowIds.length === 0) return;
      for (const t of cfg.tables) {
        if (byId) await tables.deleteIds(t, rowIds);
        else await tables.byPayload(t, cfg.payloadKey, rowIds, true);
      }
    },
    inTransaction: (client) => pgvectorRows(client, schema, cfg),
  };
  return rows;
}
