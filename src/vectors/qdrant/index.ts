import { createHash } from 'node:crypto';
import { openAsBlob } from 'node:fs';
import { Readable, Transform } from 'node:stream';
import { createRequire } from 'node:module';
import type { QdrantClient } from '@qdrant/js-client-rest';
import type { QdrantConfig } from '../../store/config.js';
import type { VectorSink } from '../sink.js';
import type { CollectionSnapshot, CollectionSnapshots, PointId, PointRecord, RowVectors } from '../contract.js';

export type { PointId, PointRecord } from '../contract.js';
import { networkCause, storeError, transientError, WardenError } from '../../core/errors.js';
import { streamToNewFile } from '../../core/write-file.js';


const require = createRequire(import.meta.url);


export type SnapshotInfo = CollectionSnapshot;

/** Ids per request: well under Qdrant's request size limit, small enough to keep memory flat. */
const ID_CHUNK = 1000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const UINT = /^(0|[1-9][0-9]*)$/;

/** RFC 4122 version 5 (SHA-1, name-based) UUID of `name` in `namespace`, with node:crypto only. */
export function uuid5(name: string, namespace: string): string {
  const ns = Buffer.from(namespace.replace(/-/g, ''), 'hex');
  const hash = createHash('sha1').update(ns).update(Buffer.from(name, 'utf8')).digest();
  hash[6] = (hash[6]! & 0x0f) | 0x50;
  hash[8] = (hash[8]! & 0x3f) | 0x80;
  const hex = hash.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * Qdrant failures in the project's terms: no answer, a timeout, 429 or 5xx are transient (the job is retried);
 * any other answer (404 no such collection, 400 bad request) is permanent, and retrying will not help.
 */
export function qdrantError(doing: string, err: unknown, url?: string, timeoutMs?: number): WardenError {
  if (err instanceof WardenError) return err;
  const e = err as { status?: number; message?: string; name?: string; data?: { status?: { error?: string } } };
  // The request's own timeout (`timeoutMs` given: no other signal could abort it; the client throws its own
  // QdrantClientTimeoutError, "This operation was aborted"): said as such.
  if (timeoutMs !== undefined && (e.name === 'AbortError' || e.name === 'TimeoutError' || e.name === 'QdrantClientTimeoutError')) {
    return transientError(`qdrant ${doing}: no answer from ${url ? shownUrl(url) : 'Qdrant'} within ${timeoutMs} ms (qdrant.timeoutMs)`, err);
  }
  // No answer at all (`fetch failed`): where it asked, and why (ECONNREFUSED, ENOTFOUND, a certificate, …).
  const why = e.message === 'fetch failed' ? networkCause(err) : undefined;
  if (e.message === 'fetch failed') return transientError(`qdrant ${doing}: no answer from ${url ? shownUrl(url) : 'Qdrant'}${why ? ` (${why})` : ''}`, err);
  const detail = e.data?.status?.error ?? e.message ?? String(err);
  const status = typeof e.status === 'number' ? e.status : Number(/Unexpected Response: (\d{3})/.exec(e.message ?? '')?.[1] ?? NaN);
  const line = `${doing}: ${String(detail).split('\n')[0]}`;
  if (Number.isNaN(status) || status === 429 || status >= 500) return transientError(`qdrant ${line}`, err);
  return storeError(`qdrant ${line} (HTTP ${status})`, err);
}

/** A service's URL as errors name it: scheme, host, port and path; never a user, password or query. */
function shownUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname === '/' ? '' : u.pathname}`;
  } catch {
    return 'Qdrant (its url does not parse)';
  }
}

/**
 * One store's Qdrant side: the collections that hold its rows' vectors and how a row maps to its points. Deletes
 * wait for Qdrant to apply them (`wait=true`), so a resolved delete means the vectors are gone.
 */
export class QdrantStore implements VectorSink, RowVectors, CollectionSnapshots {
  private qdrantClient: QdrantClient | undefined;
  readonly collections: readonly string[];
  readonly baseUrl: string;
  private readonly headers: Record<string, string>;

  constructor(readonly config: QdrantConfig) {
    this.collections = config.collections;
    this.baseUrl = config.url.replace(/\/+$/, '');
    // The API key goes as a header: the client would otherwise switch to https or warn on stdout.
    this.headers = config.apiKey ? { 'api-key': config.apiKey } : {};
  }

  /** Made on first use: the client and undici under it take ~100 ms to load, which a command that never talks to Qdrant need not pay. */
  get client(): QdrantClient {
    if (!this.qdrantClient) {
      const { QdrantClient: Client } = require('@qdrant/js-client-rest') as typeof import('@qdrant/js-client-rest');
      this.qdrantClient = new Client({ url: this.baseUrl, headers: this.headers, timeout: this.config.timeoutMs, checkCompatibility: false });
    }
    return this.qdrantClient;
  }

  /** The point id of a row, or null when the row id cannot be one (`id` mode needs an unsigned integer or a UUID). */
  pointIdFor(rowId: string): PointId | null {
    if (this.config.pointId === 'uuid5') return uuid5(rowId, this.config.uuidNamespace);
    if (this.config.pointId === 'id') {
      if (UINT.test(rowId) && Number.isSafeInteger(Number(rowId))) return Number(rowId);
      if (UUID.test(rowId)) return rowId.toLowerCase();
    }
    return null;
  }

  /**
   * The row ids a point may belong to (the SQLite spellings to look up), or [] when the point names no row.
   * Qdrant prints UUIDs in lower case, so an upper-case row id is looked up too.
   */
  rowIdsOf(point: PointRecord): string[] {
    const fromPayload = point.payload?.[this.config.payloadKey];
    const payloadId = typeof fromPayload === 'string' || typeof fromPayload === 'number' ? String(fromPayload) : null;
    switch (this.config.pointId) {
      case 'payload':
        return payloadId === null ? [] : [payloadId];
      case 'uuid5':
        return payloadId !== null && uuid5(payloadId, this.config.uuidNamespace) === String(point.id) ? [payloadId] : [];
      case 'id': {
        const id = String(point.id);
        return UUID.test(id) ? [...new Set([id, id.toUpperCase()])] : [id];
      }
    }
  }

  private async call<T>(doing: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw qdrantError(doing, err, this.baseUrl, this.config.timeoutMs); // the client's only abort is its timeout
    }
  }

  /** VectorSink: every point of these rows, in every collection, deleted and applied before this resolves. */
  async deleteForRows(rowIds: readonly string[]): Promise<void> {
    for (const collection of this.collections) {
      for (let i = 0; i < rowIds.length; i += ID_CHUNK) {
        const chunk = rowIds.slice(i, i + ID_CHUNK);
        if (this.config.pointId === 'payload') {
          const filter = { must: [{ key: this.config.payloadKey, match: { any: chunk } }] };
          await this.call(`delete points of ${chunk.length} row(s) from ${collection}`, () => this.client.delete(collection, { wait: true, filter }));
        } else {
          const points = chunk.map((id) => this.pointIdFor(id)).filter((p): p is PointId => p !== null);
          if (points.length > 0) await this.deletePoints(collection, points);
        }
      }
    }
  }

  async deletePoints(collection: string, points: readonly PointId[]): Promise<void> {
    for (let i = 0; i < points.length; i += ID_CHUNK) {
      const chunk = points.slice(i, i + ID_CHUNK);
      await this.call(`delete ${chunk.length} point(s) from ${collection}`, () => this.client.delete(collection, { wait: true, points: [...chunk] }));
    }
  }

  /** One page of points, in Qdrant's id order; `next` is null after the last page. */
  async scrollPage(collection: string, offset: PointId | null, limit: number, payloadKeys: string[]): Promise<{ points: PointRecord[]; next: PointId | null }> {
    const r = await this.call(`scroll ${collection}`, () =>
      this.client.scroll(collection, {
        limit,
        ...(offset !== null ? { offset } : {}),
        with_payload: payloadKeys.length > 0 ? payloadKeys : false,
        with_vector: false,
      }),
    );
    const next = r.next_page_offset;
    return { points: r.points as PointRecord[], next: typeof next === 'string' || typeof next === 'number' ? next : null };
  }

  async count(collection: string): Promise<number> {
    const r = await this.call(`count ${collection}`, () => this.client.count(collection, { exact: true }));
    return r.count;
  }

  async retrieve(collection: string, ids: readonly PointId[], payloadKeys: string[] = []): Promise<PointRecord[]> {
    if (ids.length === 0) return [];
    const r = await this.call(`retrieve ${ids.length} point(s) from ${collection}`, () =>
      this.client.retrieve(collection, { ids: [...ids], with_payload: payloadKeys.length > 0 ? payloadKeys : false, with_vector: false }),
    );
    return r as PointRecord[];
  }

  /** Of these rows, the ones that have at least one point in `collection`. */
  async rowsWithPoints(collection: string, rowIds: readonly string[]): Promise<Set<string>> {
    const found = new Set<string>();
    if (this.config.pointId === 'payload') {
      const key = this.config.payloadKey;
      for (let i = 0; i < rowIds.length; i += ID_CHUNK) {
        const filter = { must: [{ key, match: { any: rowIds.slice(i, i + ID_CHUNK) } }] };
        let offset: PointId | null = null;
        do {
          const page: { points: PointRecord[]; next_page_offset?: unknown } = await this.call(`scroll ${collection} by ${key}`, () =>
            this.client.scroll(collection, { filter, limit: ID_CHUNK, with_payload: [key], with_vector: false, ...(offset !== null ? { offset } : {}) }),
          ) as { points: PointRecord[]; next_page_offset?: unknown };
          for (const p of page.points) for (const id of this.rowIdsOf(p)) found.add(id);
          const next = page.next_page_offset;
          offset = typeof next === 'string' || typeof next === 'number' ? next : null;
        } while (offset !== null);
      }
      return found;
    }
    const byPoint = new Map<string, string>();
    for (const id of rowIds) {
      const p = this.pointIdFor(id);
      if (p !== null) byPoint.set(String(p), id);
    }
    const points = [...byPoint.keys()].map((k) => (UINT.test(k) ? Number(k) : k));
    for (let i = 0; i < points.length; i += ID_CHUNK) {
      for (const p of await this.retrieve(collection, points.slice(i, i + ID_CHUNK))) {
        const row = byPoint.get(String(p.id));
        if (row !== undefined) found.add(row);
      }
    }
    return found;
  }

  async collectionExists(collection: string): Promise<boolean> {
    const r = await this.call(`look up collection ${collection}`, () => this.client.collectionExists(collection));
    return r.exists;
  }

  /**
   * Plain JSON request, for the endpoints where the client library sends what Qdrant's OpenAPI description does
   * not allow (it posts `{}` to the body-less snapshot endpoints).
   */
  private async request<T>(doing: string, method: string, path: string, query: Record<string, string> = {}, signal?: AbortSignal): Promise<T> {
    try {
      const res = await fetch(this.url(path, query), { method, headers: this.headers, signal: signal ?? AbortSignal.timeout(this.config.timeoutMs) });
      const body = (await res.json().catch(() => null)) as { result?: T; status?: { error?: string } } | null;
      if (!res.ok) throw Object.assign(new Error(`HTTP ${res.status} ${body?.status?.error ?? ''}`.trim()), { status: res.status });
      return body?.result as T;
    } catch (err) {
      throw qdrantError(doing, err, this.baseUrl, signal ? undefined : this.config.timeoutMs);
    }
  }

  private snapshotsPath(collection: string, name?: string): string {
    return `/collections/${encodeURIComponent(collection)}/snapshots${name === undefined ? '' : `/${encodeURIComponent(name)}`}`;
  }

  /** Creating a large collection's snapshot can take longer than `timeoutMs`: only the job's signal stops it. */
  async createSnapshot(collection: string, signal?: AbortSignal): Promise<SnapshotInfo> {
    const doing = `create snapshot of ${collection}`;
    const r = await this.request<SnapshotInfo | undefined>(doing, 'POST', this.snapshotsPath(collection), { wait: 'true' }, signal ?? new AbortController().signal);
    if (!r || typeof r.name !== 'string') throw transientError(`qdrant ${doing}: no snapshot description in the answer`);
    return r;
  }

  async deleteSnapshot(collection: string, name: string): Promise<void> {
    await this.request(`delete snapshot ${name} of ${collection}`, 'DELETE', this.snapshotsPath(collection, name), { wait: 'true' });
  }

  async listSnapshots(collection: string): Promise<SnapshotInfo[]> {
    return this.request(`list snapshots of ${collection}`, 'GET', this.snapshotsPath(collection));
  }

  private url(path: string, query: Record<string, string> = {}): string {
    const qs = new URLSearchParams(query).toString();
    return `${this.baseUrl}${path}${qs ? `?${qs}` : ''}`;
  }

  /**
   * Stream a snapshot from Qdrant into `dest` (created 0600, never held in memory whole), hashing as it goes.
   * The client library has no streaming download, so this one request is plain fetch.
   */
  async downloadSnapshot(collection: string, name: string, dest: string, signal?: AbortSignal): Promise<{ bytes: number; sha256: string }> {
    const doing = `download snapshot ${name} of ${collection}`;
    const hash = createHash('sha256');
    let bytes = 0;
    // No limit on the whole download (snapshots can be large), but `timeoutMs` without a byte arriving aborts it.
    const idle = new AbortController();
    let timer = setTimeout(() => idle.abort(new Error(`no data for ${this.config.timeoutMs} ms`)), this.config.timeoutMs);
    const stillAlive = () => {
      clearTimeout(timer);
      timer = setTimeout(() => idle.abort(new Error(`no data for ${this.config.timeoutMs} ms`)), this.config.timeoutMs);
    };
    try {
      const res = await fetch(this.url(this.snapshotsPath(collection, name)), {
        headers: this.headers,
        signal: signal ? AbortSignal.any([idle.signal, signal]) : idle.signal,
      });
      if (!res.ok || !res.body) {
        const text = await res.text().catch(() => '');
        throw Object.assign(new Error(`HTTP ${res.status} ${text.slice(0, 200)}`), { status: res.status });
      }
      const tap = new Transform({
        transform(chunk: Buffer, _enc, done) {
          stillAlive();
          hash.update(chunk);
          bytes += chunk.length;
          done(null, chunk);
        },
      });
      await streamToNewFile(dest, { mode: 0o600 }, Readable.fromWeb(res.body as import('node:stream/web').ReadableStream), tap);
    } catch (err) {
      throw qdrantError(doing, idle.signal.aborted ? idle.signal.reason : err, this.baseUrl);
    } finally {
      clearTimeout(timer);
    }
    return { bytes, sha256: hash.digest('hex') };
  }

  /**
   * Replace a collection with an uploaded snapshot file (`priority=snapshot`: the snapshot wins over what the
   * server holds), Qdrant verifying `checksum` before it applies anything. The file is streamed from disk. Qdrant
   * keeps the upload in the collection's snapshot list under `uploadName`: the caller deletes it afterwards.
   */
  async recoverFromFile(collection: string, file: string, checksum: string, uploadName = `${collection}.snapshot`): Promise<void> {
    const doing = `recover ${collection} from uploaded snapshot`;
    try {
      const form = new FormData();
      form.set('snapshot', await openAsBlob(file), uploadName);
      const res = await fetch(this.url(`${this.snapshotsPath(collection)}/upload`, { wait: 'true', priority: 'snapshot', checksum }), {
        method: 'POST',
        headers: this.headers,
        body: form,
      });
      const body = (await res.json().catch(() => null)) as { result?: unknown; status?: { error?: string } } | null;
      if (!res.ok) throw Object.assign(new Error(`HTTP ${res.status} ${body?.status?.error ?? ''}`.trim()), { status: res.status });
      if (body?.result !== true) throw new Error(`unexpected answer ${JSON.stringify(body).slice(0, 200)}`);
    } catch (err) {
      throw qdrantError(doing, err, this.baseUrl);
    }
  }
}
