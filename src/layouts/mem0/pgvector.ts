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
 * meanwhile keeps its link). An entity left with no link is deleted, as mem0's own cleanup
 * (`_removeMemoryFromEntityStore`) does, but only ENTITY_GRACE_MS later and only if it still has none: mem0 links a
 * memory by reading the entity and writing it back (`_linkEntitiesForMemory`), so an agent that read it before it was
 * emptied writes its link back onto it, and that write would be lost on a row deleted meanwhile. An entity found with
 * an empty list (a run killed in its grace) goes the same way.
 */
export type EntityUnlink = (table: string, ids: readonly string[], skip: readonly string[]) => Promise<{ linksRemoved: number; entitiesDeleted: number }>;

/** The keys an entity's links are under: the Python SDK's and the TypeScript SDK's (memories.ts, LINKED_IDS_KEYS). */
const LINK_KEYS = ['linked_memory_ids', 'linkedMemoryIds'] as const;

/** How long an emptied entity is left for an agent's read-then-write of its links to land (mem0 embeds between the two). */
export const ENTITY_GRACE_MS = 5000;

function entityUnlink(sql: { query(sql: string, params?: unknown[]): Promise<{ rows: Record<string, unknown>[] }> }, schema: string): EntityUnlink {
  return async (table, ids, skip) => {
    const out = { linksRemoved: 0, entitiesDeleted: 0 };
    const t = `${q(schema)}.${q(table)}`;
    const emptied = new Set<string>();
    for (const key of LINK_KEYS) {
      const changed = await sql.query(
        `UPDATE ${t} AS e SET payload = jsonb_set(e.payload, ARRAY[$3::text], (SELECT coalesce(jsonb_agg(x.v ORDER BY x.o), '[]'::jsonb)
           FROM jsonb_array_elements(e.payload->$3::text) WITH ORDINALITY AS x(v, o) WHERE NOT coalesce(x.v #>> '{}' = ANY($1::text[]), false)))
         FROM (SELECT id, jsonb_array_length(payload->$3::text) AS n FROM ${t}
               WHERE jsonb_typeof(payload->$3::text) = 'array' AND payload->$3::text ?| $1::text[] AND NOT (id::text = ANY($2::text[]))) AS was
         WHERE e.id = was.id AND jsonb_typeof(e.payload->$3::text) = 'array'
         RETURNING e.id::text AS id, was.n - jsonb_array_length(e.payload->$3::text) AS removed, jsonb_array_length(e.payload->$3::text) AS remaining`,
        [[...ids], [...skip], key]);
      for (const r of changed.rows) out.linksRemoved += Number(r.removed);
      for (const r of changed.rows) if (Number(r.remaining) === 0) emptied.add(String(r.id));
      const before = await sql.query(`SELECT id::text AS id FROM ${t} WHERE payload->$1::text = '[]'::jsonb AND NOT (id::text = ANY($2::text[]))`, [key, [...skip]]);
      for (const r of before.rows) emptied.add(String(r.id));
    }
    if (emptied.size === 0) return out;
    await new Promise((r) => setTimeout(r, ENTITY_GRACE_MS));
    for (const key of LINK_KEYS) {
      const gone = await sql.query(`DELETE FROM ${t} WHERE id::text = ANY($1::text[]) AND payload->$2::text = '[]'::jsonb RETURNING id`, [[...emptied], key]);
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
