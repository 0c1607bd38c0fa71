import type { QdrantConfig } from '../../store/config.js';
import type { Mem0Point, PointStore } from '../contract.js';
import { QdrantStore, qdrantError } from './index.js';

function asPoint(r: { id: string | number; payload?: Record<string, unknown> | null }): Mem0Point {
  return { id: String(r.id), payload: (r.payload ?? {}) as Record<string, unknown> };
}

/** Qdrant ids are unsigned integers or UUIDs: an all-digit id goes back as the integer it was. */
const pointKey = (id: string): string | number => (/^(0|[1-9][0-9]*)$/.test(id) && Number.isSafeInteger(Number(id)) ? Number(id) : id);

/** The PointStore over the project's Qdrant store (src/vectors/qdrant/index.ts): same client, same error classes. */
export function qdrantPointStore(q: QdrantStore | QdrantConfig): PointStore {
  const store = q instanceof QdrantStore ? q : new QdrantStore(q);
  const client = store.client;
  const call = async <T>(doing: string, fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (err) {
      throw qdrantError(doing, err, store.baseUrl, store.config.timeoutMs); // the client's only abort is its timeout
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
