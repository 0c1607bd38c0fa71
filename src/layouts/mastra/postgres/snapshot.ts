import type { SideTables } from '../../contract.js';
import { pgSideTables } from '../../../engines/postgres/snapshot-side.js';
import { VECTOR_TABLES } from './vectors.js';

/**
 * PgVector's tables beside a Mastra store whose PostgresStore tables are elsewhere (`mastra.pgvector.url`, or another
 * schema of the store's database), as a snapshot takes them (Layout.vectorTables, the engine's side tables:
 * src/engines/postgres/snapshot-side.ts): every table of that schema of PgVector's shape (`vector_id`, an `embedding`
 * of pgvector's type, `metadata jsonb`), read at one instant on a connection of their own, in the snapshot's
 * `pgvector/`, and put back by restore in place of those the artifact holds (others, a newer index's, stay).
 * `where`: the connection and schema (vectorsApart, src/layouts/mastra/index.ts).
 */
export function mastraVectorTables(storeName: string, where: { url: string; caFile?: string | undefined; schema: string; own: boolean }): SideTables {
  return pgSideTables(storeName, {
    pg: where,
    setting: `stores.${storeName}.mastra.pgvector`,
    describe: `PgVector's tables in postgres schema ${where.schema}${where.own ? ' of mastra.pgvector.url' : ''}`,
    find: async (client) => (await client.query<{ name: string }>(VECTOR_TABLES, [where.schema])).rows.map((r) => r.name),
    foreign: (t) => {
      const col = (name: string) => t.description.columns.find((c) => c.name === name);
      const shaped = col('vector_id') && /(^|\.)vector\(/.test(col('embedding')?.type ?? '') && col('metadata')?.type === 'jsonb';
      return shaped ? undefined : 'which is not of PgVector\'s shape (vector_id, embedding vector(N), metadata jsonb)';
    },
  });
}
