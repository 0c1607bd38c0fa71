import type { SideTables } from '../contract.js';
import { pgSideTables } from '../../engines/postgres/snapshot-side.js';
import type { Mem0PgvectorConfig } from './config.js';

/**
 * mem0's pgvector tables as a snapshot takes them beside the history file (Layout.vectorTables): the memory and the
 * entity collections' tables (`memories`, `memories_entities`, named by the collection), read at one instant by the
 * PostgreSQL engine's table artifact on a connection of their own, and restored by it into the configured schema,
 * replacing only the tables the artifact holds, which must be among the configured ones (snapshot-side.ts).
 * `memory_migrations` (a telemetry id, its `id serial`) is not taken: nothing in it is a memory.
 */
export function mem0VectorTables(storeName: string, cfg: Mem0PgvectorConfig, tables: readonly string[]): SideTables {
  return pgSideTables(storeName, {
    pg: cfg,
    setting: `stores.${storeName}.mem0.pgvector`,
    describe: `postgres schema ${cfg.schema}: ${tables.join(', ')}`,
    find: async (client) => (await client.query<{ name: string }>(
      `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname = ANY($2) ORDER BY c.relname`,
      [cfg.schema, [...tables]])).rows.map((r) => r.name),
    foreign: (t) => (tables.includes(t.name) ? undefined : `which is not one of mem0's configured tables (${tables.join(', ')})`),
  });
}
