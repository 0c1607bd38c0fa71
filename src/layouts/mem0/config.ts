import { z } from '../../vendor/zod.js';
import { pathField } from '../../config/path-field.js';
import { secretField } from '../../config/secret-fields.js';
import { SCHEMA_NAME } from '../../engines/postgres/config.js';

/**
 * mem0's pgvector provider (`vectorStore: { provider: 'pgvector', config: { connectionString, collectionName,
 * embeddingModelDims } }`): the database its tables are in. The collection is the table (`memories`, its entities
 * `memories_entities`, both `(id uuid PRIMARY KEY, vector vector(N), payload jsonb)`); the URL carries the
 * credentials, so it comes from the environment only, as a PostgreSQL store's `postgres.url`.
 */
export const mem0PgvectorSchema = z.strictObject({
  url: secretField().describe('From the environment only: `url: ${MEM0_PG_URL}`, the `connectionString` mem0 is given (`postgres://user:password@host:5432/db`).'),
  schema: z.string().regex(SCHEMA_NAME, 'a schema name of lower-case letters, digits and _ (at most 63), not starting with a digit').default('public')
    .describe('The schema mem0\'s tables are in: mem0 creates them unqualified, in the connection\'s first schema (`public` by default).'),
  caFile: pathField().optional()
    .describe('A CA certificate file (PEM): the connection then uses TLS and verifies the server against it.'),
  lockTimeoutMs: z.number().int().positive().max(60_000).default(50)
    .describe('How long erase\'s VACUUM FULL of mem0\'s tables waits for its lock each time (mem0\'s statements queue behind a waiting VACUUM FULL), before trying again.'),
});

/**
 * Where a mem0 deployment keeps what memory-warden looks after. The history file is the store's `db`; the vectors
 * are in Qdrant (`qdrant.url`) or, the TypeScript SDK's default, in its own SQLite files (`vectorStore: sqlite`).
 * This section names mem0's collections and, for the tmpfs check, where the vectors live on this machine.
 * Defaults are mem0's own, for whichever SDK wrote the history file (docs/mem0-layout.md).
 */
export const mem0Schema = z.strictObject({
  collection: z.string().min(1).optional()
    .describe('mem0\'s `collection_name` (Python) or `collectionName` (TypeScript). Unset: the SDK\'s default, `mem0` for a Python history (`history` table) and `memories` for a TypeScript one (`memory_history`).'),
  entityCollection: z.string().min(1).optional()
    .describe('mem0 derives it as `<collection>_entities`; set it only if yours differs.'),
  historyTable: z.enum(['auto', 'history', 'memory_history']).default('auto')
    .describe('`auto` finds `history` (Python mem0) or `memory_history` (the TypeScript SDK).'),
  vectorStore: z.enum(['qdrant', 'sqlite', 'pgvector']).default('qdrant')
    .describe('Where the vectors are: `qdrant` (the store\'s `qdrant.url`), `sqlite`, the TypeScript SDK\'s default `memory` provider (a `vectors` table in `vectorDb`, its entities in `<vectorDb without .db>_entities.db`), or `pgvector`, the SDK\'s pgvector provider (tables named by the collections, in the database of `mem0.pgvector`).'),
  pgvector: mem0PgvectorSchema.optional()
    .describe('`vectorStore: pgvector`: the database and schema of mem0\'s tables (docs/mem0-layout.md#vectors-in-pgvector).'),
  vectorDb: pathField().default('~/.mem0/vector_store.db')
    .describe('`vectorStore: sqlite`: the SDK\'s `vectorStore.config.dbPath` (default `~/.mem0/vector_store.db`).'),
  entityVectorDb: pathField().optional()
    .describe('`vectorStore: sqlite`: the entity store\'s file; the SDK derives it from vectorDb, set it only if yours differs.'),
  vectorPaths: z.array(pathField()).default([])
    .describe('Folders on this machine that hold the vectors: mem0\'s local Qdrant `path` (default `/tmp/qdrant`) or the Qdrant server\'s storage folder. The integrity check reports any that sits on tmpfs (lost at reboot).'),
  pageSize: z.number().int().positive().max(10_000).default(256)
    .describe('Points read per Qdrant scroll page by prune, integrity, digest and erase.'),
});

export type Mem0Config = z.infer<typeof mem0Schema>;
export type Mem0PgvectorConfig = z.infer<typeof mem0PgvectorSchema>;

/**
 * The mem0 section's own rules across fields: `vectorStore: pgvector` and `pgvector:` go together, and a store has its
 * vectors in one place (no `qdrant` section beside pgvector). Each as one error at the field to fix.
 */
export function mem0PlaceIssues(store: { layout: string; qdrant?: unknown; mem0?: { vectorStore?: string; pgvector?: unknown } | undefined }): { path: string[]; message: string }[] {
  const m = store.mem0;
  if (!m) return [];
  const out: { path: string[]; message: string }[] = [];
  if (store.layout !== 'mem0') return out;
  if (m.vectorStore === 'pgvector' && m.pgvector === undefined) out.push({ path: ['mem0', 'pgvector'], message: 'mem0.vectorStore: pgvector needs pgvector: { url: ${SOME_VAR} } (the connectionString mem0 is given)' });
  if (m.vectorStore !== 'pgvector' && m.pgvector !== undefined) out.push({ path: ['mem0', 'pgvector'], message: 'only for mem0.vectorStore: pgvector' });
  if (m.vectorStore === 'pgvector' && store.qdrant !== undefined) out.push({ path: ['qdrant'], message: 'a mem0 store\'s vectors are in pgvector or in Qdrant, not both: leave the qdrant section out' });
  return out;
}

/**
 * mem0's memory collection is named in two places, `qdrant.collections` (what is snapshotted, swept, checked) and
 * `mem0.collection` (what prune, erase and check read): they must agree. A collection named in one and not the
 * other, or a list holding none of `defaults` while mem0.collection is unset, is one error naming both fields, at
 * the field it returns. Config load passes both SDKs' defaults; opening the store (mem0Handle) passes the one of
 * the SDK that wrote the history file, which only the file tells.
 */
export function mem0CollectionConflict(
  store: { layout: string; qdrant?: { collections: string[] } | undefined; mem0?: { collection?: string | undefined; vectorStore?: string } | undefined },
  defaults: readonly string[] = ['mem0', 'memories'],
): { path: string[]; message: string } | undefined {
  if (store.layout !== 'mem0' || !store.qdrant || (store.mem0?.vectorStore ?? 'qdrant') !== 'qdrant') return undefined;
  const listed = store.qdrant.collections;
  const named = store.mem0?.collection;
  if (named !== undefined && !listed.includes(named)) {
    return { path: ['mem0', 'collection'], message: `"${named}" is not in this store's qdrant.collections (${listed.join(', ')}): name mem0's memory collection the same in both` };
  }
  if (named === undefined && !defaults.some((d) => listed.includes(d))) {
    return {
      path: ['qdrant', 'collections'],
      message: `(${listed.join(', ')}) holds no ${defaults.map((d) => `"${d}"`).join(' or ')}, the SDK's default memory collection, and this store's mem0.collection is unset: set mem0.collection to the collection that holds the memories`,
    };
  }
  return undefined;
}

/**
 * The section as `memory-warden config` shows it: what the store really uses. `vectorDb` (and `entityVectorDb`) name
 * the TypeScript SDK's own SQLite vector files, read only with `vectorStore: sqlite`; with Qdrant or pgvector their
 * default is no file of the store and is left out.
 */
export function mem0Shown(m: Mem0Config): Partial<Mem0Config> {
  if (m.vectorStore === 'sqlite') return m;
  const { vectorDb: _v, entityVectorDb: _e, ...used } = m;
  return used;
}

/**
 * The section's files and folders, relative ones made the config file's (src/config/config.ts resolveRelativePaths); the
 * mastra section's `vectorDb` is the same field and goes through here too.
 */
export function resolveMem0Paths(mem0: unknown, abs: (p: unknown) => unknown): unknown {
  if (typeof mem0 !== 'object' || mem0 === null || Array.isArray(mem0)) return mem0;
  const m = { ...(mem0 as Record<string, unknown>) };
  for (const key of ['vectorDb', 'entityVectorDb'] as const) if (m[key] !== undefined) m[key] = abs(m[key]);
  if (Array.isArray(m.vectorPaths)) m.vectorPaths = m.vectorPaths.map(abs);
  const pgv = m.pgvector as Record<string, unknown> | undefined;
  if (pgv && typeof pgv === 'object' && !Array.isArray(pgv) && pgv.caFile !== undefined) m.pgvector = { ...pgv, caFile: abs(pgv.caFile) };
  return m;
}

// The defaults and the names derived from this section are in ./names.ts, without zod (the layout's sync methods
// run for every store that is opened).
