import type { QdrantConfig } from '../store/config.js';
import { QdrantStore, qdrantError } from '../store/qdrant.js';

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

function asPoint(r: { id: string | number; payload?: Record<string, unknown> | null }): Mem0Point {
  return { id: String(r.id), payload: (r.payload ?? {}) as Record<string, unknown> };
}

/** Qdrant ids are unsigned integers or UUIDs: an all-digit id goes back as the integer it was. */
const pointKey = (id: string): string | number => (/^(0|[1-9][0-9]*)$/.test(id) && Number.isSafeInteger(Number(id)) ? Number(id) : id);

/** The PointStore over the project's Qdrant store (src/store/qdrant.ts): same client, same error classes. */
export function qdrantPointStore(q: QdrantStore | QdrantConfig): PointStore {
  const store = q instanceof QdrantStore ? q : new QdrantStore(q);
  const client = store.client;
  const call = async <T>(doing: string, fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (err) {
      throw qdrantError(doing, err);
    }
  };
  return {
    collections: () => call('list collections', async () => (await client.getCollections()).collections.map((c) => c.name)),
    async scroll(collection, opts) {
      const r = await call(`scroll ${collection}`, () =>
        client.scroll(collection, {
          limit: opts.limit,
          with_payload: opts.payload ?? true,
          with_vector: false,
          ...(opts.offset !== null && opts.offset !== undefined ? { offset: opts.offset } : {}),
        }));
      const next = r.next_page_offset;
      return { points: r.points.map(asPoint), next: typeof next === 'string' || typeof next === 'number' ? next : null };
    },
    async retrieve(collection, ids, payload = true) {
      if (ids.length === 0) return [];
      const r = await call(`retrieve ${ids.length} point(s) from ${collection}`, () =>
        client.retrieve(collection, { ids: ids.map(pointKey), with_payload: payload, with_vector: false }));
      return r.map(asPoint);
    },
    delete: (collection, ids) => store.deletePoints(collection, ids.map(pointKey)),
    async setPayload(collection, id, payload) {
      await call(`set payload of point ${id} in ${collection}`, () => client.setPayload(collection, { wait: true, points: [pointKey(id)], payload }));
    },
  };
}
