import { quoteIdent } from '../../../engines/postgres/session.js';
import { MESSAGES, OBSERVATIONS, RESOURCES, THREADS } from '../names.js';

// @mastra/pg's PostgresStore tables as this layout reads them (docs/mastra-layout.md#on-postgresql): the same names
// as LibSQLStore's, camel-case columns (quoted), times as `timestamp` (UTC wall time, as Mastra writes `toISOString()`)
// with a `timestamptz` mirror (`createdAtZ`, `updatedAtZ`) that newer versions fill.

export { MESSAGES, OBSERVATIONS, RESOURCES, THREADS };

/** The tables erase deletes from, and the byte check reads back. */
export const STORE_TABLES = [THREADS, MESSAGES, RESOURCES, OBSERVATIONS] as const;
export const REQUIRED_PG = [THREADS, MESSAGES, RESOURCES] as const;

/** `schema.table`, both quoted. */
export const tableOf = (schema: string, table: string) => `${quoteIdent(schema)}.${quoteIdent(table)}`;

/** A time column as an instant: the timestamptz mirror where Mastra wrote one, else the UTC wall time. */
export const instant = (col: string, alias = '') => {
  const a = alias ? `${alias}.` : '';
  return `coalesce(${a}"${col}Z", ${a}"${col}" AT TIME ZONE 'UTC')`;
};

/**
 * The schema a handle reads, unquoted: the configured one, or a restore's staging schema while the erase ledger is
 * re-applied to the restored tables (the handle's `schema` says which; its config still names the configured one).
 */
export const schemaOf = (store: { schema: string }): string => store.schema.slice(1, -1).replace(/""/g, '"');
