import type { Mem0Config } from './config.js';

/**
 * mem0Schema.parse({}): the section of a store that names none (test/layouts/mem0.test.ts compares the two), for
 * the layout's sync methods, which must not load zod: `check` of a warden store loads this layout too.
 */
export const MEM0_DEFAULTS: Readonly<Mem0Config> = Object.freeze({
  historyTable: 'auto', vectorStore: 'qdrant', vectorDb: '~/.mem0/vector_store.db', vectorPaths: [], pageSize: 256,
});

/** The section as validated, or the defaults (what mem0Schema.parse(store.mem0 ?? {}) gives: a parsed section parses to itself). */
export const mem0Of = (store: { mem0?: Mem0Config | undefined }): Mem0Config => store.mem0 ?? { ...MEM0_DEFAULTS, vectorPaths: [] };

/** Each SDK's default collection, by the history table it writes. */
export const DEFAULT_COLLECTION = { history: 'mem0', memory_history: 'memories' } as const;

export function collectionOf(cfg: Mem0Config, table: keyof typeof DEFAULT_COLLECTION): string {
  return cfg.collection ?? DEFAULT_COLLECTION[table];
}

export function entityCollectionOf(cfg: Mem0Config, table: keyof typeof DEFAULT_COLLECTION): string {
  return cfg.entityCollection ?? `${collectionOf(cfg, table)}_entities`;
}

/** The TypeScript SDK's entity file: `vector_store.db` → `vector_store_entities.db` (its `getEntityStore`). */
export function entityVectorDbOf(cfg: Mem0Config): string {
  return cfg.entityVectorDb ?? cfg.vectorDb.replace(/\.db$/, '_entities.db');
}
