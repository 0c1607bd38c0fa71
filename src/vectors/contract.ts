import type { QdrantConfig } from '../store/config.js';
import type { VectorSink } from './sink.js';

/**
 * The vector-store plug point, whole: what a layout reads and writes points through (Qdrant, mem0's TypeScript SDK
 * SQLite files). Implementations live in src/vectors/<name>/ and are registered in src/vectors/registry.ts; every
 * one runs test/vectors/contract.test.ts.
 */

/** A Qdrant point as mem0 leaves it: the point id is the memory id, the payload is mem0's (docs/mem0-layout.md). */
export interface Mem0Point {
  id: string;
  payload: Record<string, unknown>;
}

export interface ScrollPage {
  points: Mem0Point[];
  next: string | number | null;
}

/**
 * The few Qdrant operations the mem0 layout needs, on any collection. Every write waits until Qdrant applied it
 * (`wait=true`), so what follows it (a history row, a SQLite delete) never runs ahead of the vector store.
 */
export interface PointStore {
  collections(): Promise<string[]>;
  scroll(collection: string, opts: { offset?: string | number | null; limit: number; payload?: boolean | string[] }): Promise<ScrollPage>;
  retrieve(collection: string, ids: readonly string[], payload?: boolean): Promise<Mem0Point[]>;
  delete(collection: string, ids: readonly string[]): Promise<void>;
  /** Set these payload keys (others stay), as mem0's own update does for the keys it changes. */
  setPayload(collection: string, id: string, payload: Record<string, unknown>): Promise<void>;
  /** A store in local files (the TypeScript SDK's SQLite vector store): the files, for the tmpfs check. */
  files?(): string[];
  /** A store in local files: rewrite them so deleted payloads leave no free page behind (erase). */
  compact?(): Promise<void>;
}

/** Every page of a collection, one at a time (bounded memory whatever the collection's size). */
export async function* scrollAll(points: PointStore, collection: string, pageSize: number, payload: boolean | string[] = true): AsyncGenerator<Mem0Point[]> {
  let offset: string | number | null = null;
  do {
    const page: ScrollPage = await points.scroll(collection, { offset, limit: pageSize, payload });
    if (page.points.length > 0) yield page.points;
    offset = page.next;
  } while (offset !== null && offset !== undefined);
}

/**
 * What a vector store in the store's own database runs its statements on: a pool, or one connection (then inside that
 * connection's transaction). Errors come back as the driver threw them (their SQLSTATE tells a lock timeout).
 */
export interface SqlRunner {
  query(sql: string, params?: unknown[]): Promise<{ rows: Record<string, unknown>[]; rowCount?: number | null }>;
}

/** Where a store's vectors are: its Qdrant (a client already open, or its config), files by collection, or tables. */
export interface VectorPlace {
  qdrant?: QdrantConfig;
  /** Tables of a PostgreSQL schema (pgvector), one per collection; `tables` limits which (default: every one of that shape). */
  pg?: { sql: SqlRunner; schema: string; tables?: readonly string[] };
  /** The store's vector side already open (StoreHandle.vectors): reused when it is this kind's client. */
  open?: unknown;
  /** Collection name → SQLite file (mem0's TypeScript SDK keeps one file per collection). */
  files?: Record<string, string>;
}

/** Opens a PointStore on a place; throws a store error naming what is missing. */
export type VectorStoreFactory = (place: VectorPlace) => PointStore;

/** A snapshot of one collection, as the vector store's server keeps it. */
export interface CollectionSnapshot {
  name: string;
  size: number;
  checksum?: string | null;
  creation_time?: string | null;
}

/**
 * A vector store whose collections are snapshotted by its own server (Qdrant): the coordinated snapshot takes them
 * beside the SQLite file, restore recovers them, erase finds and deletes those holding erased memories. Vector
 * stores in local files have none: their files are copied with the store (Layout.vectorFiles).
 */
export interface CollectionSnapshots {
  collectionExists(collection: string): Promise<boolean>;
  count(collection: string): Promise<number>;
  /** Taking a large collection's snapshot can outlast any timeout: only `signal` stops it. */
  createSnapshot(collection: string, signal?: AbortSignal): Promise<CollectionSnapshot>;
  deleteSnapshot(collection: string, name: string): Promise<void>;
  listSnapshots(collection: string): Promise<CollectionSnapshot[]>;
  /** Streams it to `dest`, hashing as it goes. */
  downloadSnapshot(collection: string, name: string, dest: string, signal?: AbortSignal): Promise<{ bytes: number; sha256: string }>;
  /** Replaces the collection with the snapshot in `file`, whose sha256 is `checksum`. */
  recoverFromFile(collection: string, file: string, checksum: string, uploadName?: string): Promise<void>;
}

export type PointId = string | number;

export interface PointRecord {
  id: PointId;
  payload?: Record<string, unknown> | null;
}

/** How a row-keyed vector side names its rows (config `qdrant.pointId`, `payloadKey`, `textKey`, `expectPoints`). */
export interface RowKeying {
  /** payload: the payload's `payloadKey` holds the row id; uuid5: the point id is uuid5(row id), the payload names it; id: the point id is the row id. */
  pointId: 'payload' | 'uuid5' | 'id';
  payloadKey: string;
  /** The payload key holding the memory's text, compared with the row's fact; none: texts are not compared. */
  textKey?: string | undefined;
  /** Whether every live row should have a point in every collection, in at least one, or need none. */
  expectPoints: 'every' | 'any' | 'none';
}

/**
 * A vector side keyed by the store's rows, one or more points per memory row (Qdrant as the warden layout uses it):
 * what its consistency check, repair and erase read and delete through.
 */
export interface RowVectors extends VectorSink {
  readonly collections: readonly string[];
  readonly config: RowKeying;
  /** The point id of a row, or null when the row id cannot be one. */
  pointIdFor(rowId: string): PointId | null;
  /** The row ids a point may belong to, or [] when it names no row. */
  rowIdsOf(point: PointRecord): string[];
  /** One page of points in the store's id order, with only `payloadKeys`; `next` is null after the last page. */
  scrollPage(collection: string, offset: PointId | null, limit: number, payloadKeys: string[]): Promise<{ points: PointRecord[]; next: PointId | null }>;
  /** Of these rows, the ones that have at least one point in `collection`. */
  rowsWithPoints(collection: string, rowIds: readonly string[]): Promise<Set<string>>;
  deletePoints(collection: string, points: readonly PointId[]): Promise<void>;
  /**
   * A vector side in the store's own database (pgvector): the same deletes on the caller's connection, so they join
   * its transaction (the rows and their vectors go in one commit, or neither). Absent for a vector store elsewhere.
   */
  inTransaction?(client: SqlRunner): VectorSink;
}
