import { z } from '../vendor/zod.js';
import { timerDuration } from '../time/timer-duration.js';
import { pathField } from '../config/path-field.js';
import { secretField } from '../config/secret-fields.js';
import { mem0CollectionConflict, mem0PlaceIssues, mem0Schema } from '../layouts/mem0/config.js';
import { mastraPlaceIssues, mastraSchema } from '../layouts/mastra/config.js';
import { ENGINE_NAMES, postgresSchema } from '../engines/postgres/config.js';

/** How a SQLite row maps to its Qdrant point. */
export const pointIdModes = ['id', 'payload', 'uuid5'] as const;

export const qdrantSchema = z.strictObject({
  url: z.string().url().describe('Qdrant\'s URL.'),
  apiKey: secretField().optional().describe('From the environment only: `apiKey: ${QDRANT_API_KEY}`.'),
  collections: z.array(z.string().min(1)).min(1)
    .describe('Every collection holding this store\'s vectors: snapshotted, swept on erase, checked for consistency.'),
  pointId: z.enum(pointIdModes).default('payload')
    .describe('`id`: point id is the row id; `payload`: a payload key holds the row id; `uuid5`: point id = UUIDv5(row id).'),
  payloadKey: z.string().min(1).default('memory_id')
    .describe('Payload key holding the row id (payload mode; also read in uuid5 mode).'),
  textKey: z.string().min(1).optional()
    .describe('Payload key holding the fact text, compared with the row\'s fact by the consistency check.'),
  uuidNamespace: z.string().uuid().default('6ba7b811-9dad-11d1-80b4-00c04fd430c8')
    .describe('Namespace for `pointId: uuid5`.'),
  timeoutMs: timerDuration('ms').int().positive().default(30_000)
    .describe('Per Qdrant request (snapshot create, download and upload are not limited by it).'),
  expectPoints: z.enum(['every', 'any', 'none']).default('every')
    .describe('Which live rows the consistency check expects a point for: `every` collection (default), `any` one of them (collections partition the rows), or `none` (not every row is embedded; only orphans are looked for).'),
});

export const storeSchema = z.strictObject({
  engine: z.enum(ENGINE_NAMES).default('sqlite')
    .describe('`sqlite`: a file on one host (`db`); `postgres`: a schema in a PostgreSQL database reachable from every host (`postgres`), docs/postgres.md.'),
  layout: z.enum(['warden', 'mem0', 'mastra']).default('warden')
    .describe('`warden`: memory-warden\'s own `memory` table (docs/stores.md); `mem0`: a mem0 deployment (its history file, its vectors in Qdrant, SQLite files or pgvector); `mastra`: Mastra\'s store (LibSQLStore\'s file, or PostgresStore\'s tables).'),
  db: pathField().optional().describe('The SQLite file: the memory store, or mem0\'s history.db. Required for `engine: sqlite`; a PostgreSQL store has none.'),
  host: z.string().regex(/^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,62}$/, 'a host name of letters, digits, _ . - (at most 63)').optional()
    .describe('The machine that holds the file (its worker\'s host name); default: the machine reading the config.'),
  qdrant: qdrantSchema.optional(),
  /** `layout: mem0` only: mem0's collections and where its vectors live (src/layouts/mem0/config.ts). */
  mem0: mem0Schema.optional(),
  /** `layout: mastra` only: where its vectors are and what prune keeps (src/layouts/mastra/config.ts). */
  mastra: mastraSchema.optional(),
  /** `engine: postgres` only: the database and schema (src/engines/postgres/config.ts). */
  postgres: postgresSchema.optional(),
}).superRefine((store, ctx) => {
  const conflict = mem0CollectionConflict(store);
  if (conflict) ctx.addIssue({ code: 'custom', path: conflict.path, message: conflict.message });
  const issue = (path: string[], message: string) => ctx.addIssue({ code: 'custom', path, message });
  for (const i of mem0PlaceIssues(store)) issue(i.path, i.message);
  for (const i of mastraPlaceIssues(store)) issue(i.path, i.message);
  if (store.engine === 'sqlite') {
    if (store.db === undefined) issue(['db'], 'the SQLite file of the store is required (or engine: postgres with a postgres section)');
    if (store.postgres !== undefined) issue(['postgres'], 'only for engine: postgres');
    return;
  }
  if (store.postgres === undefined) issue(['postgres'], 'engine: postgres needs postgres: { url: ${SOME_VAR}, schema: NAME }');
  if (store.db !== undefined) issue(['db'], 'a PostgreSQL store has no SQLite file: leave db out');
  if (store.layout === 'mem0') issue(['layout'], `the ${store.layout} layout does not run on PostgreSQL yet (warden and mastra do)`);
  if (store.host !== undefined) issue(['host'], 'a PostgreSQL store is reachable from every host: leave host out');
  const taken = store.postgres?.vectors?.tables.find((t) => t === 'memory' || t === 'warden_runs');
  if (taken) issue(['postgres', 'vectors', 'tables'], `${taken} is memory-warden's own table, not a vector table`);
  if (store.postgres?.vectors && store.qdrant) issue(['postgres', 'vectors'], 'a store\'s vectors are in pgvector tables or in Qdrant, not both: leave one out');
}).transform(({ db, ...store }) => ({ ...store, db: db ?? '' }));

export type QdrantConfig = z.infer<typeof qdrantSchema>;
/**
 * One store as validated. `db` is the SQLite file; on a PostgreSQL store (`engine: postgres`) it is '' (there is no
 * file): only code that reaches the store through its engine (src/engines/) runs on one, every other command is
 * refused first (src/commands/common.ts).
 */
export type StoreConfig = z.infer<typeof storeSchema>;
