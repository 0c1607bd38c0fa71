import { z } from '../../vendor/zod.js';

/** A table name memory-warden writes into SQL itself (quoted, but kept to the plain form people type). */
export const TABLE_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * A PostgreSQL store's vectors in pgvector tables of its own schema, beside `memory` (`stores.NAME.postgres.vectors`):
 * one table per collection, each `(id, vector, payload jsonb)` as mem0's pgvector store writes it, keyed to the
 * store's rows as the `qdrant` section keys points (`pointId`, `payloadKey`, `textKey`, `expectPoints`).
 */
export const pgvectorSchema = z.strictObject({
  tables: z.array(z.string().regex(TABLE_NAME, 'a table name of lower-case letters, digits and _ (at most 63), not starting with a digit')).min(1)
    .describe('Every table of the store\'s schema holding its vectors (`id` text or uuid, a `vector` column, `payload jsonb`): pruned and erased with the rows, vacuumed and read back by erase, compared by check.'),
  pointId: z.enum(['id', 'payload']).default('id')
    .describe('`id`: the vector row\'s id is the memory row\'s id; `payload`: the payload key `payloadKey` holds it.'),
  payloadKey: z.string().min(1).default('memory_id')
    .describe('Payload key holding the row id (`pointId: payload`).'),
  textKey: z.string().min(1).optional()
    .describe('Payload key holding the fact text, compared with the row\'s fact by check.'),
  expectPoints: z.enum(['every', 'any', 'none']).default('every')
    .describe('Which live rows check expects a vector for: in `every` table (default), in `any` one of them, or `none` (only vectors with no row are looked for).'),
});

export type PgvectorConfig = z.infer<typeof pgvectorSchema>;
