import { storeError } from '../core/errors.js';
import type { CollectionSnapshots, RowVectors, VectorPlace, VectorStoreFactory } from './contract.js';
import { QdrantStore } from './qdrant/index.js';
import { qdrantPointStore } from './qdrant/points.js';
import { sqliteVectorStore } from './mem0-sqlite/index.js';
import { pgvectorPointStore } from './pgvector/index.js';

export type { CollectionSnapshots, VectorPlace, VectorStoreFactory } from './contract.js';

/**
 * Every vector store, by the name the config gives it (`mem0.vectorStore`). A test fails when a folder under
 * src/vectors/ is missing here, and every entry runs test/vectors/contract.test.ts.
 */
export const VECTOR_STORES = {
  qdrant: (place) => {
    const q = qdrantOf(place);
    if (!q) throw storeError('qdrant vector store: no qdrant.url configured');
    return qdrantPointStore(q);
  },
  sqlite: (place) => sqliteVectorStore(place.files ?? {}),
  pgvector: (place) => {
    if (!place.pg) throw storeError('pgvector vector store: no PostgreSQL schema to read its tables in');
    return pgvectorPointStore(place.pg.sql, place.pg.schema, place.pg.tables);
  },
} satisfies Record<string, VectorStoreFactory>;

/** The folder under src/vectors/ each registered store lives in (the registry test checks every folder has one). */
export const VECTOR_FOLDERS: Record<keyof typeof VECTOR_STORES, string> = { qdrant: 'qdrant', sqlite: 'mem0-sqlite', pgvector: 'pgvector' };

/** The store's Qdrant: the client already open (`place.open`) when it is one, else one for its config; none without. */
function qdrantOf(place: Pick<VectorPlace, 'qdrant' | 'open'>): QdrantStore | undefined {
  if (place.open instanceof QdrantStore) return place.open;
  return place.qdrant ? new QdrantStore(place.qdrant) : undefined;
}

/**
 * The server-side collection snapshots of a store's vector side (its Qdrant), or undefined when its vectors have
 * none (no vector side, or vectors in local files).
 */
export const collectionSnapshotsFor = (place: Pick<VectorPlace, 'qdrant' | 'open'>): CollectionSnapshots | undefined => qdrantOf(place);

/**
 * The row-keyed vector side of a store config (its Qdrant), or undefined when it has none. A PostgreSQL store's
 * pgvector tables are opened by its engine on its own connections (pgvectorRows, src/vectors/pgvector/).
 */
export const rowVectorsFor = (place: Pick<VectorPlace, 'qdrant' | 'open'>): RowVectors | undefined => qdrantOf(place);

export { pgvectorRows, VECTOR_TABLES_SQL, type PgvectorRows } from './pgvector/index.js';
export type { PgvectorConfig } from './pgvector/config.js';
