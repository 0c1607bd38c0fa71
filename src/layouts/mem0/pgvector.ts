import type { StoreHandle } from '../contract.js';
import type { ByteCheck } from '../../engines/contract.js';
import type { PointStore } from '../../vectors/contract.js';
import { VECTOR_STORES } from '../../vectors/registry.js';
import { storeError } from '../../core/errors.js';
import { openPgSession, type PgSession } from '../../engines/postgres/session.js';
import { scrubTables } from '../../engines/postgres/scrub.js';
import { quoteIdent as q } from '../../engines/postgres/copy-describe.js';
import type { Mem0Config } from './config.js';

/**
 * mem0's pgvector provider: the memory and entity collections are tables of a PostgreSQL schema
 * (`memories(id uuid PRIMARY KEY, vector vector(N), payload jsonb)`, `memories_entities` alike), read and written
 * through the pgvector PointStore (src/vectors/pgvector/) on a pool of their own, one per opened store. Erase's last
 * step on them is the PostgreSQL store's: VACUUM FULL of both tables, then their relation files read back for the
 * erased texts, their lower-cased copies (mem0's `textLemmatized`) and the ids. Before its first VACUUM FULL of a
 * table, erase stores its `payload` uncompressed (`SET STORAGE EXTERNAL`, as init does for a PostgreSQL store's
 * vector tables): a compressed value cannot be read back. mem0 reads and writes the column the same either way.
 */
export interface Mem0Pgvector {
  points: PointStore;
  unlink: EntityUnlink;
  scrub(needles: readonly string[]): Promise<{ vacuumed: boolean; bytes: ByteCheck }>;
}

/**
 * Every entity of `table` (but those in `skip`) loses its links to `ids`, each in one statement the server applies
 * to the row as it is then (not a payload read earlier and written back: an agent linking a memory to the entity
 * meanwhile keeps its link); an entity every link of which goes is deleted instead (first, so that a kill never
 * leaves one with an empty list), as is one an agent's change left with no link by the rewrite, checked again as it
 * goes (one an agent linked meanwhile stays). mem0's own delete rewrites the links from a read
 * (`_removeMemoryFromEntityStore`).
 */
export type EntityUnlink = (table: string, ids: readonly string[], skip: readonly string[]) => Promise<{ linksRemoved: number; entitiesDeleted: number }>;

/** The keys an entity's links are under: the Python SDK's and the TypeScript SDK's (memories.ts, LINKED_IDS_KEYS). */
const LINK_KEYS = ['linked_memory_ids', 'linkedMemoryIds'] as const;

function entityUnlink(sql: { query(sql: string, params?: unknown[]): Promise<{ rows: Record<string, unknown>[] }> }, schema: string): EntityUnlink {
  return async (table, ids, skip) => {
    const out = { linksRemoved: 0, entitiesDeleted: 0 };
    if (ids.length === 0) return out;
    const t = `${q(schema)}.${q(table)}`;
    for (const key of LINK_KEYS) {
      // First the entities every link of which goes (mem0 deletes those rather than write an empty list): a kill
      // after this leaves the others still linking, for the next run, never an entity with no link. An agent's link
      // added meanwhile keeps its entity (the condition is checked again on the row as it then is).
      const whole = await sql.query(
        `DELETE FROM ${t} WHERE jsonb_typeof(payload->$2::text) = 'array' AND jsonb_array_length(payload->$2::text) > 0
           AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(payload->$2::text) AS x(v) WHERE NOT coalesce(x.v #>> '{}' = ANY($1::text[]), false))
           AND NOT (id::text = ANY($3::text[]))
         RETURNING jsonb_array_length(payload->$2::text) AS n`,
        [[...ids], key, [...skip]]);
      for (const r of whole.rows) out.linksRemoved += Number(r.n);
      out.entitiesDeleted += whole.rows.length;
      const changed = await sql.query(
        `UPDATE ${t} AS e SET payload = jsonb_set(e.payload, ARRAY[$3::text], (SELECT coalesce(jsonb_agg(x.v ORDER BY x.o), '[]'::jsonb)
           FROM jsonb_array_elements(e.payload->$3::text) WITH ORDINALITY AS x(v, o) WHERE NOT coalesce(x.v #>> '{}' = ANY($1::text[]), false)))
         FROM (SELECT id, jsonb_array_length(payload->$3::text) AS n FROM ${t}
               WHERE jsonb_typeof(payload->$3::text) = 'array' AND payload->$3::text ?| $1::text[] AND NOT (id::text = ANY($2::text[]))) AS was
         WHERE e.id = was.id AND jsonb_typeof(e.payload->$3::text) = 'array'
         RETURNING e.id::text AS id, was.n - jsonb_array_length(e.payload->$3::text) AS removed, jsonb_array_length(e.payload->$3::text) AS remaining`,
        [[...ids], [...skip], key]);
      for (const r of changed.rows) out.linksRemoved += Number(r.removed);
      const emptied = changed.rows.filter((r) => Number(r.remaining) === 0).map((r) => String(r.id));
      if (emptied.length === 0) continue;
      const gone = await sql.query(
        `DELETE FROM ${t} WHERE id::text = ANY($1::text[]) AND jsonb_typeof(payload->$2::text) = 'array' AND jsonb_array_length(payload->$2::text) = 0 RETURNING id`,
        [emptied, key]);
      out.entitiesDeleted += gone.rows.length;
    }
    return out;
  };
}

const open = new WeakMap<StoreHandle, Mem0Pgvector>();

export function mem0Pgvector(store: StoreHandle, cfg: Mem0Config, tables: readonly string[]): Mem0Pgvector {
  const known = open.get(store);
  if (known) return known;
  const pgv = cfg.pgvector;
  if (!pgv) throw storeError(`${store.name}: mem0.vectorStore: pgvector needs mem0.pgvector.url (the config check requires it)`);
  const session: PgSession = openPgSession(store.name, pgv, { setting: `stores.${store.name}.mem0.pgvector`, exitOnIdle: true });
  const points = VECTOR_STORES.pgvector({ pg: { sql: session, schema: pgv.schema, tables } });
  const made: Mem0Pgvector = {
    points,
    unlink: entityUnlink(session, pgv.schema),
    async scrub(needles) {
      const present = await points.collections();
      const client = await session.connect();
      try {
        return await scrubTables(client, { schema: pgv.schema, tables: tables.filter((t) => present.includes(t)), needles, lockTimeoutMs: pgv.lockTimeoutMs, explain: session.explain, uncompress: true });
      } finally {
        client.release();
      }
    },
  };
  open.set(store, made);
  return made;
}
