import type { StoreConfig } from '../../store/config.js';
import type { RowVectors, SqlRunner } from '../../vectors/contract.js';
import { pgvectorRows, rowVectorsFor } from '../../vectors/registry.js';

/**
 * A PostgreSQL store's vector side: its Qdrant, or its pgvector tables (`postgres.vectors`) in `schema` on `sql`. The
 * tables are read where the handle's tables are: the configured schema on the store's pool, or a restore's staging
 * schema on the restore's own connection (the erase ledger re-applied there reaches the staged vectors).
 */
export function pgStoreVectors(store: StoreConfig, sql: SqlRunner, schema: string): RowVectors | undefined {
  const tables = store.postgres?.vectors;
  return tables ? pgvectorRows(sql, schema, tables) : rowVectorsFor(store);
}
