import { z } from '../../vendor/zod.js';
import { pathField } from '../../config/path-field.js';
import { secretField } from '../../config/secret-fields.js';
import { pgvectorSchema } from '../../vectors/pgvector/config.js';

/** A PostgreSQL identifier memory-warden writes into SQL itself (quoted, but kept to the plain form people type). */
export const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * Where a store on PostgreSQL lives: a database reachable from every host, a schema in it. The URL carries the
 * credentials, so it comes from the environment only (`url: ${FLEET_PG_URL}`), never from the file, and is never
 * printed. `caFile` makes the connection TLS, verified against that CA file.
 */
export const postgresSchema = z.strictObject({
  url: secretField().describe('From the environment only: `url: ${FLEET_PG_URL}`, a `postgres://user:password@host:5432/db` URL.'),
  schema: z.string().regex(SCHEMA_NAME, 'a schema name of lower-case letters, digits and _ (at most 63), not starting with a digit')
    .describe('The schema that holds the store\'s tables (`memory`, the `live_memory` view); `init` creates it.'),
  caFile: pathField().optional()
    .describe('A CA certificate file (PEM): the connection then uses TLS and verifies the server against it.'),
  lockTimeoutMs: z.number().int().positive().max(60_000).default(50)
    .describe('`SET lock_timeout` of each of prune\'s and erase\'s short transactions (and of each wait of erase\'s VACUUM FULL for its lock): a lock an agent holds longer makes that batch retry, never wait.'),
  batchSize: z.number().int().positive().max(100_000).default(500)
    .describe('Rows prune deletes per transaction at first (then sized by `batchMs`); erase: roots per transaction, each with its older versions.'),
  batchMs: z.number().positive().max(10_000).default(20)
    .describe('Prune sizes its batches so each transaction lasts about this long (an agent touching a row prune is deleting waits at most that): larger is faster, and makes that agent wait longer.'),
  vectors: pgvectorSchema.optional()
    .describe('The store\'s vectors in pgvector tables of its schema, beside `memory` (instead of a `qdrant` section): docs/postgres.md#vectors-in-pgvector.'),
});

export type PostgresConfig = z.infer<typeof postgresSchema>;

/** The store engines a store's `engine:` names (src/engines/registry.ts has one of each). */
export const ENGINE_NAMES = ['sqlite', 'postgres'] as const;
export type EngineName = (typeof ENGINE_NAMES)[number];
