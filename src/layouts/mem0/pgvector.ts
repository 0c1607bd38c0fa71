import type { StoreHandle } from '../contract.js';
import type { ByteCheck } from '../../engines/contract.js';
import type { PointStore } from '../../vectors/contract.js';
import { VECTOR_STORES } from '../../vectors/registry.js';
import { storeError } from '../../core/errors.js';
import { openPgSession, type PgSession } from '../../engines/postgres/session.js';
import { scrubTables } from '../../engines/postgres/scrub.js';
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
  scrub(needles: readonly string[]): Promise<{ vacuumed: boolean; bytes: ByteCheck }>;
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
