import { z } from '../../vendor/zod.js';
import { pathField } from '../../config/path-field.js';

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
  vectorStore: z.enum(['qdrant', 'sqlite']).default('qdrant')
    .describe('Where the vectors are: `qdrant` (the store\'s `qdrant.url`), or `sqlite`, the TypeScript SDK\'s default `memory` provider (a `vectors` table in `vectorDb`, its entities in `<vectorDb without .db>_entities.db`).'),
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
  if (store.layout !== 'mem0' || !store.qdrant || store.mem0?.vectorStore === 'sqlite') return undefined;
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
 * The section's files and folders, relative ones made the config file's (src/config/config.ts resolveRelativePaths); the
 * mastra section's `vectorDb` is the same field and goes through here too.
 */
export function resolveMem0Paths(mem0: unknown, abs: (p: unknown) => unknown): unknown {
  if (typeof mem0 !== 'object' || mem0 === null || Array.isArray(mem0)) return mem0;
  const m = { ...(mem0 as Record<string, unknown>) };
  for (const key of ['vectorDb', 'entityVectorDb'] as const) if (m[key] !== undefined) m[key] = abs(m[key]);
  if (Array.isArray(m.vectorPaths)) m.vectorPaths = m.vectorPaths.map(abs);
  return m;
}

// The defaults and the names derived from this section are in ./names.ts, without zod (the layout's sync methods
// run for every store that is opened).
