import { z } from '../../vendor/zod.js';
import { pathField } from '../../config/path-field.js';
import { secretField } from '../../config/secret-fields.js';
import { SCHEMA_NAME } from '../../engines/postgres/config.js';

/**
 * `engine: postgres`: where `@mastra/pg`'s PgVector keeps the semantic-recall tables (`memory_messages[_<dim>]`,
 * `memory_observations_<dim>`): the store's own database and schema by default, or another database (`url`, from the
 * environment only, as the store's). PostgresStore and PgVector are given connection strings of their own.
 */
export const mastraPgvectorSchema = z.strictObject({
  url: secretField().optional()
    .describe('From the environment only: `url: ${MASTRA_VECTOR_URL}`, PgVector\'s `connectionString` when it is not the store\'s database. Unset: the store\'s database (`postgres.url`).'),
  schema: z.string().regex(SCHEMA_NAME, 'a schema name of lower-case letters, digits and _ (at most 63), not starting with a digit').optional()
    .describe('PgVector\'s `schemaName`. Unset: `postgres.schema` when the vectors are in the store\'s database, else `public`.'),
  caFile: pathField().optional()
    .describe('A CA certificate file (PEM) for `url`: the connection then uses TLS and verifies the server against it.'),
  lockTimeoutMs: z.number().int().positive().max(60_000).default(50)
    .describe('How long erase\'s VACUUM FULL of the vector tables waits for its lock each time, before trying again.'),
});

/**
 * A Mastra store (`@mastra/libsql`'s LibSQLStore file, docs/mastra-layout.md): the store's `db` is that file. This
 * section says where the semantic-recall vectors are (LibSQLVector's file, when not the same) and what prune keeps.
 */
export const mastraSchema = z.strictObject({
  vectorDb: pathField().optional()
    .describe('LibSQLVector\'s `url` as a path, when it is another file than `db`. Unset: the vectors are in `db`.'),
  pgvector: mastraPgvectorSchema.optional()
    .describe('`engine: postgres` only: where PgVector\'s tables are, when not in the store\'s schema (docs/mastra-layout.md#on-postgresql).'),
  retention: z.strictObject({
    messageDays: z.number().int().positive().optional()
      .describe('Messages created more than this many days ago go, each with its embeddings.'),
    threadIdleDays: z.number().int().positive().optional()
      .describe('Threads whose last activity (updatedAt) is older than this go whole: messages, embeddings, thread memory.'),
    maxMessagesPerThread: z.number().int().positive().optional()
      .describe('At most this many messages per thread: the oldest beyond go.'),
  }).default({})
    .describe('Retention for prune; an unset rule deletes nothing. Resource working memory is never pruned.'),
  workingMemoryMaxBytes: z.number().int().positive().default(16_384)
    .describe('A working memory longer than this (UTF-8 bytes) is reported by check: a prompt carries it every turn.'),
  batch: z.number().int().positive().max(10_000).default(200)
    .describe('Rows each of prune\'s and erase\'s transactions deletes: short, beside a live agent.'),
});

export type MastraConfig = z.infer<typeof mastraSchema>;
export type MastraPgvectorConfig = z.infer<typeof mastraPgvectorSchema>;

/** The section's rules across the store's fields, each as one error at the field to fix. */
export function mastraPlaceIssues(store: { engine: string; layout: string; mastra?: MastraConfig | undefined; postgres?: { vectors?: unknown } | undefined }): { path: string[]; message: string }[] {
  const m = store.mastra;
  const out: { path: string[]; message: string }[] = [];
  if (store.layout !== 'mastra') return out;
  if (store.engine === 'postgres') {
    if (m?.vectorDb !== undefined) out.push({ path: ['mastra', 'vectorDb'], message: 'a file of LibSQLVector: on engine: postgres the vectors are PgVector\'s tables (mastra.pgvector)' });
    if (store.postgres?.vectors !== undefined) out.push({ path: ['postgres', 'vectors'], message: 'layout: mastra finds PgVector\'s tables itself: leave postgres.vectors out (mastra.pgvector says where they are)' });
  } else if (m?.pgvector !== undefined) {
    out.push({ path: ['mastra', 'pgvector'], message: 'only for engine: postgres (a libsql store\'s vectors: mastra.vectorDb)' });
  }
  return out;
}
