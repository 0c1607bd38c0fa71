/**
 * A small Qdrant-compatible HTTP server for tests, on a loopback port: the endpoints memory-warden uses
 * (collections, points upsert/retrieve/scroll/count/delete/payload/query, collection snapshots
 * create/list/download/delete, recover from upload). Every request it receives and every response it sends is
 * validated against Qdrant's OpenAPI description; a mismatch is recorded and `assertConforms()` fails the test.
 *
 * `qdrantTarget()` gives the same tests a real Qdrant instead when QDRANT_URL is set (QDRANT_API_KEY optional).
 * `startFaultProxy()` sits in front of either and fails chosen requests, for "Qdrant fails mid-job" tests.
 */
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createHash, randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { OpenApiValidator } from './openapi.js';

type PointId = string | number;
type Payload = Record<string, unknown>;
interface Point { id: PointId; vector: number[]; payload: Payload; docs?: Record<string, string> }
interface Collection { size: number; distance: string; points: Map<string, Point>; sparse?: Record<string, unknown> }
interface Snap { name: string; bytes: Buffer; checksum: string; created: string }

class HttpError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

let sharedValidator: OpenApiValidator | undefined;
const validator = () => (sharedValidator ??= new OpenApiValidator());

const key = (id: PointId) => (typeof id === 'number' ? `n:${id}` : `u:${id.toLowerCase()}`);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Qdrant's scroll order: integer ids ascending, then UUIDs (fixed-width lower-case hex sorts numerically). */
function compareIds(a: PointId, b: PointId): number {
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  if (typeof a === 'number') return -1;
  if (typeof b === 'number') return 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

function normaliseId(id: unknown): PointId {
  if (typeof id === 'number' && Number.isInteger(id) && id >= 0) return id;
  if (typeof id === 'string' && UUID.test(id)) return id.toLowerCase();
  throw new HttpError(400, `Format error in JSON body: value ${JSON.stringify(id)} is not a valid point ID`);
}

function asArray<T>(v: T | T[] | null | undefined): T[] {
  return v === null || v === undefined ? [] : Array.isArray(v) ? v : [v];
}

function matches(point: Point, filter: any): boolean {
  if (!filter) return true;
  const cond = (c: any): boolean => {
    if (c.has_id) return (c.has_id as unknown[]).some((id) => key(normaliseId(id)) === key(point.id));
    if (c.must || c.should || c.must_not) return matches(point, c);
    if (c.key !== undefined && c.match) {
      const v = point.payload[c.key];
      const values = Array.isArray(v) ? v : [v];
      if ('value' in c.match) return values.some((x) => x === c.match.value);
      if ('any' in c.match) return values.some((x) => (c.match.any as unknown[]).includes(x as never));
      if ('except' in c.match) return !values.some((x) => (c.match.except as unknown[]).includes(x as never));
    }
    throw new HttpError(400, `test server: unsupported condition ${JSON.stringify(c)}`);
  };
  if (!asArray(filter.must).every(cond)) return false;
  if (asArray(filter.must_not).some(cond)) return false;
  const should = asArray(filter.should);
  return should.length === 0 || should.some(cond);
}

/**
 * A point's dense vector: the plain array, or the unnamed `""` entry of named vectors whose other entries are
 * server-side inference documents for the collection's sparse vectors (BM25 text, as mem0's TypeScript SDK sends).
 * The sparse part changes nothing a test reads, so it is not kept.
 */
function denseOf(v: any, c: Collection): unknown {
  if (Array.isArray(v) || !v || typeof v !== 'object') return v;
  for (const name of Object.keys(v)) {
    if (name !== '' && !(c.sparse && name in c.sparse)) throw new HttpError(400, `Wrong input: Not existing vector name error: ${name}`);
  }
  return v[''];
}

/** The text of each inference document of named vectors (kept so a query by text can score against it). */
function docsOf(v: any): { docs?: Record<string, string> } {
  if (Array.isArray(v) || !v || typeof v !== 'object') return {};
  const docs = Object.fromEntries(Object.entries(v).filter(([, d]: [string, any]) => typeof d?.text === 'string').map(([k, d]: [string, any]) => [k, d.text as string]));
  return Object.keys(docs).length > 0 ? { docs } : {};
}

function selectPayload(p: Payload, withPayload: unknown): Payload | undefined {
  if (withPayload === undefined || withPayload === null || withPayload === true) return { ...p };
  if (withPayload === false) return undefined;
  if (Array.isArray(withPayload)) return Object.fromEntries(Object.entries(p).filter(([k]) => withPayload.includes(k)));
  const sel = withPayload as { include?: string[]; exclude?: string[] };
  if (sel.include) return Object.fromEntries(Object.entries(p).filter(([k]) => sel.include!.includes(k)));
  if (sel.exclude) return Object.fromEntries(Object.entries(p).filter(([k]) => !sel.exclude!.includes(k)));
  return { ...p };
}

function record(p: Point, withPayload: unknown, withVector: unknown): Record<string, unknown> {
  const out: Record<string, unknown> = { id: p.id };
  const payload = selectPayload(p.payload, withPayload);
  if (payload !== undefined) out.payload = payload;
  if (withVector === true) out.vector = p.vector;
  return out;
}

export interface QdrantTestServer {
  url: string;
  /** Every OpenAPI violation seen so far (requests and responses). */
  violations: string[];
  /** Throws listing the violations, if any. */
  assertConforms(): void;
  /** Server-side snapshots still held, per collection (tests check they were deleted after download). */
  snapshotNames(collection: string): string[];
  /** Corrupt the next snapshot download of this collection (its bytes no longer match the checksum). */
  corruptNextDownload(collection: string): void;
  /**
   * A slow recovery: the next upload to this collection is received, then held before it is applied. `reached`
   * resolves once it is held; `release()` applies it and answers (as Qdrant finishes a recovery whose client died).
   */
  holdNextRecovery(collection: string): { reached: Promise<void>; release(): void };
  close(): Promise<void>;
}

export interface QdrantTestServerOptions {
  /**
   * Validate every request and response against the OpenAPI description (default true, always in tests). Only a
   * benchmark turns it off, to time the client rather than ajv; the tests keep the project honest.
   */
  validate?: boolean;
}

export async function startQdrantTestServer(opts: QdrantTestServerOptions = {}): Promise<QdrantTestServer> {
  const validate = opts.validate ?? true;
  const collections = new Map<string, Collection>();
  const snapshots = new Map<string, Map<string, Snap>>();
  const violations: string[] = [];
  const corrupt = new Set<string>();
  const holds = new Map<string, { reached: () => void; released: Promise<void> }>();
  let opId = 0;
  let snapSeq = 0;

  const coll = (name: string): Collection => {
    const c = collections.get(name);
    if (!c) throw new HttpError(404, `Not found: Collection \`${name}\` doesn't exist!`);
    return c;
  };
  const updated = () => ({ operation_id: ++opId, status: 'completed' });
  // Sorted once per change, not once per scroll page: big stores stay cheap to page through.
  const sorted = new WeakMap<Collection, { version: number; points: Point[] }>();
  let version = 0;
  const ordered = (c: Collection): Point[] => {
    const hit = sorted.get(c);
    if (hit && hit.version === version) return hit.points;
    const points = [...c.points.values()].sort((a, b) => compareIds(a.id, b.id));
    sorted.set(c, { version, points });
    return points;
  };
  // Payload value → points, per key, also rebuilt only after a change: a `match` filter on one key (how
  // memory-warden looks rows' points up in payload mode) costs its matches, not a scan of the collection.
  const indexes = new WeakMap<Collection, { version: number; byKey: Map<string, Map<unknown, Point[]>> }>();
  const indexed = (c: Collection, k: string): Map<unknown, Point[]> => {
    let hit = indexes.get(c);
    if (!hit || hit.version !== version) indexes.set(c, (hit = { version, byKey: new Map() }));
    let index = hit.byKey.get(k);
    if (!index) {
      index = new Map();
      for (const p of c.points.values()) {
        const v = p.payload[k];
        for (const x of new Set(Array.isArray(v) ? v : [v])) {
          if (x === null || typeof x === 'object') continue; // matches() compares with ===: never equal to JSON
          const list = index.get(x);
          if (list) list.push(p);
          else index.set(x, [p]);
        }
      }
      hit.byKey.set(k, index);
    }
    return index;
  };
  /** The points a filter of exactly one `must` key match (value or any) selects, in id order; else undefined. */
  const byIndex = (c: Collection, filter: any): Point[] | undefined => {
    if (!filter || filter.should || filter.must_not || asArray(filter.must).length !== 1) return undefined;
    const cond = asArray(filter.must)[0];
    if (typeof cond?.key !== 'string' || !cond.match || Object.keys(cond).length !== 2) return undefined;
    const wanted: unknown[] | undefined = 'value' in cond.match ? [cond.match.value] : Array.isArray(cond.match.any) ? cond.match.any : undefined;
    if (!wanted) return undefined;
    const index = indexed(c, cond.key);
    const found = new Set<Point>();
    for (const w of wanted) for (const p of index.get(w) ?? []) found.add(p);
    return [...found].sort((a, b) => compareIds(a.id, b.id));
  };

  function snapshotBytes(name: string, c: Collection): Buffer {
    const body = JSON.stringify({ format: 'qdrant-test-server/1', collection: name, size: c.size, distance: c.distance, ...(c.sparse ? { sparse: c.sparse } : {}), points: ordered(c) });
    return Buffer.from(body, 'utf8');
  }

  function restoreFrom(name: string, bytes: Buffer): void {
    let data: { format?: string; size: number; distance: string; sparse?: Record<string, unknown>; points: Point[] };
    try {
      data = JSON.parse(bytes.toString('utf8'));
    } catch {
      throw new HttpError(400, 'Bad request: snapshot is not a valid snapshot file');
    }
    if (data.format !== 'qdrant-test-server/1') throw new HttpError(400, 'Bad request: unknown snapshot format');
    collections.set(name, { size: data.size, distance: data.distance, ...(data.sparse ? { sparse: data.sparse } : {}), points: new Map(data.points.map((p) => [key(p.id), p])) });
  }

  type Handler = (m: RegExpExecArray, q: URLSearchParams, body: any, raw: Buffer, req: IncomingMessage) => Promise<{ status?: number; json?: unknown; binary?: Buffer }> | { status?: number; json?: unknown; binary?: Buffer };
  const routes: [string, RegExp, Handler][] = [
    ['GET', /^\/$/, () => ({ json: { title: 'qdrant - vector search engine (memory-warden test server)', version: '1.18.0' } })],
    ['GET', /^\/collections$/, () => ({ json: { collections: [...collections.keys()].map((name) => ({ name })) } })],
    ['GET', /^\/collections\/([^/]+)\/exists$/, (m) => ({ json: { exists: collections.has(dec(m[1])) } })],
    ['PUT', /^\/collections\/([^/]+)$/, (m, _q, body) => {
      const name = dec(m[1]);
      if (collections.has(name)) throw new HttpError(409, `Wrong input: Collection \`${name}\` already exists!`);
      const v = body?.vectors;
      if (!v || typeof v.size !== 'number') throw new HttpError(400, 'test server: only a single unnamed vector config is supported');
      collections.set(name, { size: v.size, distance: v.distance, points: new Map(), ...(body.sparse_vectors ? { sparse: body.sparse_vectors } : {}) });
      return { json: true };
    }],
    ['GET', /^\/collections\/([^/]+)$/, (m) => {
      const c = coll(dec(m[1]));
      return {
        json: {
          status: 'green', optimizer_status: 'ok', segments_count: 1, points_count: c.points.size, indexed_vectors_count: 0, payload_schema: {},
          config: {
            params: { vectors: { size: c.size, distance: c.distance }, ...(c.sparse ? { sparse_vectors: c.sparse } : {}) },
            hnsw_config: { m: 16, ef_construct: 100, full_scan_threshold: 10000 },
            optimizer_config: { default_segment_number: 0, flush_interval_sec: 5 },
            wal_config: { wal_capacity_mb: 32, wal_segments_ahead: 0 },
          },
        },
      };
    }],
    // Payload indexes change no result here: accepted, as Qdrant does, for a collection that exists.
    ['PUT', /^\/collections\/([^/]+)\/index$/, (m) => {
      coll(dec(m[1]));
      return { json: updated() };
    }],
    ['DELETE', /^\/collections\/([^/]+)$/, (m) => {
      const existed = collections.delete(dec(m[1]));
      snapshots.delete(dec(m[1]));
      return { json: existed };
    }],
    ['PUT', /^\/collections\/([^/]+)\/points$/, (m, _q, body) => {
      const c = coll(dec(m[1]));
      const incoming: Point[] = body.points
        ? body.points.map((p: any) => ({ id: normaliseId(p.id), vector: denseOf(p.vector, c), payload: p.payload ?? {}, ...docsOf(p.vector) }))
        : body.batch.ids.map((id: unknown, i: number) => ({ id: normaliseId(id), vector: body.batch.vectors[i], payload: body.batch.payloads?.[i] ?? {} }));
      for (const p of incoming) {
        if (!Array.isArray(p.vector) || p.vector.length !== c.size) throw new HttpError(400, `Wrong input: Vector dimension error: expected dim: ${c.size}`);
        c.points.set(key(p.id), p);
      }
      return { json: updated() };
    }],
    ['POST', /^\/collections\/([^/]+)\/points$/, (m, _q, body) => {
      const c = coll(dec(m[1]));
      const out = (body.ids as unknown[]).map((id) => c.points.get(key(normaliseId(id)))).filter((p): p is Point => !!p);
      return { json: out.map((p) => record(p, body.with_payload, body.with_vector)) };
    }],
    ['POST', /^\/collections\/([^/]+)\/points\/delete$/, (m, _q, body) => {
      const c = coll(dec(m[1]));
      if (body.points) for (const id of body.points as unknown[]) c.points.delete(key(normaliseId(id)));
      else for (const p of [...c.points.values()]) if (matches(p, body.filter)) c.points.delete(key(p.id));
      return { json: updated() };
    }],
    ['POST', /^\/collections\/([^/]+)\/points\/payload$/, (m, _q, body) => {
      const c = coll(dec(m[1]));
      const targets = body.points ? (body.points as unknown[]).map((id) => c.points.get(key(normaliseId(id)))) : [...c.points.values()].filter((p) => matches(p, body.filter));
      for (const p of targets) if (p) Object.assign(p.payload, body.payload);
      return { json: updated() };
    }],
    ['POST', /^\/collections\/([^/]+)\/points\/scroll$/, (m, _q, body) => {
      const c = coll(dec(m[1]));
      const limit = body.limit ?? 10;
      const points = byIndex(c, body.filter) ?? ordered(c);
      let start = 0;
      if (body.offset !== undefined && body.offset !== null) {
        const from = normaliseId(body.offset);
        let hi = points.length;
        while (start < hi) {
          const mid = (start + hi) >> 1;
          if (compareIds(points[mid]!.id, from) < 0) start = mid + 1;
          else hi = mid;
        }
      }
      const page: Point[] = [];
      let next: PointId | null = null;
      for (let i = start; i < points.length; i++) {
        if (!matches(points[i]!, body.filter)) continue;
        if (page.length === limit) {
          next = points[i]!.id;
          break;
        }
        page.push(points[i]!);
      }
      return { json: { points: page.map((p) => record(p, body.with_payload, body.with_vector)), next_page_offset: next } };
    }],
    ['POST', /^\/collections\/([^/]+)\/points\/count$/, (m, _q, body) => {
      const c = coll(dec(m[1]));
      return { json: { count: [...c.points.values()].filter((p) => matches(p, body?.filter)).length } };
    }],
    ['POST', /^\/collections\/([^/]+)\/points\/query$/, (m, _q, body) => {
      const c = coll(dec(m[1]));
      const candidates = ordered(c).filter((p) => matches(p, body.filter));
      if (typeof body.query?.text === 'string' && typeof body.using === 'string') {
        // Inference by text on a sparse vector (BM25): scored by how many query words the point's document holds.
        const words = new Set(body.query.text.toLowerCase().split(/\W+/).filter(Boolean));
        const scored = candidates.map((p) => ({ p, s: (p.docs?.[body.using] ?? '').toLowerCase().split(/\W+/).filter((w) => words.has(w)).length }))
          .filter((x) => x.s > 0).sort((a, b) => b.s - a.s);
        return { json: { points: scored.slice(0, body.limit ?? 10).map(({ p, s }) => ({ ...record(p, body.with_payload ?? false, body.with_vector), score: s, version: 0 })) } };
      }
      const q = Array.isArray(body.query) ? (body.query as number[]) : Array.isArray(body.query?.nearest) ? (body.query.nearest as number[]) : null;
      if (body.query && !q) throw new HttpError(400, 'test server: only dense nearest-vector queries are supported');
      const norm = (v: number[]) => Math.sqrt(v.reduce((s, x) => s + x * x, 0)) || 1;
      const score = (v: number[]) => (q ? v.reduce((s, x, i) => s + x * q[i]!, 0) / (c.distance === 'Cosine' ? norm(v) * norm(q) : 1) : 0);
      const scored = candidates.map((p) => ({ p, s: score(p.vector) }));
      if (q) scored.sort((a, b) => b.s - a.s);
      const points = scored.slice(body.offset ?? 0, (body.offset ?? 0) + (body.limit ?? 10)).map(({ p, s }) => ({ ...record(p, body.with_payload ?? false, body.with_vector), score: s, version: 0 }));
      return { json: { points } };
    }],
    ['POST', /^\/collections\/([^/]+)\/snapshots$/, (m) => {
      const name = dec(m[1]);
      const c = coll(name);
      const bytes = snapshotBytes(name, c);
      const created = new Date().toISOString().slice(0, 19);
      const snapName = `${name}-${++snapSeq}-${created.replace(/:/g, '-')}.snapshot`;
      const snap: Snap = { name: snapName, bytes, checksum: createHash('sha256').update(bytes).digest('hex'), created };
      if (!snapshots.has(name)) snapshots.set(name, new Map());
      snapshots.get(name)!.set(snapName, snap);
      return { json: { name: snapName, creation_time: created, size: bytes.length, checksum: snap.checksum } };
    }],
    ['GET', /^\/collections\/([^/]+)\/snapshots$/, (m) => {
      coll(dec(m[1]));
      return { json: [...(snapshots.get(dec(m[1]))?.values() ?? [])].map((s) => ({ name: s.name, creation_time: s.created, size: s.bytes.length, checksum: s.checksum })) };
    }],
    ['POST', /^\/collections\/([^/]+)\/snapshots\/upload$/, async (m, q, _body, raw, req) => {
      const name = dec(m[1]);
      const form = await new Request('http://local/', { method: 'POST', headers: { 'content-type': req.headers['content-type'] ?? '' }, body: raw }).formData();
      const file = form.get('snapshot');
      if (!file || typeof file === 'string') throw new HttpError(400, 'Bad request: no snapshot file in the upload');
      const bytes = Buffer.from(await file.arrayBuffer());
      const sum = createHash('sha256').update(bytes).digest('hex');
      const expected = q.get('checksum');
      if (expected && expected !== sum) throw new HttpError(400, `Bad request: Snapshot checksum mismatch: expected ${expected}, got ${sum}`);
      const hold = holds.get(name);
      if (hold) {
        holds.delete(name);
        hold.reached();
        await hold.released;
      }
      restoreFrom(name, bytes);
      // As Qdrant does, the upload stays in the collection's snapshot list under the name it was uploaded with.
      const snapName = file.name || `${name}-upload-${++snapSeq}.snapshot`;
      if (!snapshots.has(name)) snapshots.set(name, new Map());
      snapshots.get(name)!.set(snapName, { name: snapName, bytes, checksum: sum, created: new Date().toISOString().slice(0, 19) });
      return { json: true };
    }],
    ['GET', /^\/collections\/([^/]+)\/snapshots\/([^/]+)$/, (m) => {
      const s = snapshots.get(dec(m[1]))?.get(dec(m[2]));
      if (!s) throw new HttpError(404, `Not found: Snapshot ${dec(m[2])} not found`);
      if (corrupt.delete(dec(m[1]))) {
        const bad = Buffer.from(s.bytes);
        bad[bad.length - 2] = bad[bad.length - 2]! ^ 0xff;
        return { binary: bad };
      }
      return { binary: s.bytes };
    }],
    ['DELETE', /^\/collections\/([^/]+)\/snapshots\/([^/]+)$/, (m) => {
      const gone = snapshots.get(dec(m[1]))?.delete(dec(m[2])) ?? false;
      if (!gone) throw new HttpError(404, `Not found: Snapshot ${dec(m[2])} not found`);
      return { json: true };
    }],
  ];

  const server: Server = createServer((req, res) => {
    void handle(req, res).catch((err) => {
      violations.push(`test server crashed on ${req.method} ${req.url}: ${(err as Error).stack}`);
      if (!res.headersSent) res.writeHead(500).end();
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = process.hrtime.bigint();
    const url = new URL(req.url ?? '/', 'http://local');
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks);
    const method = req.method ?? 'GET';
    const contentType = req.headers['content-type'];
    const isMultipart = (contentType ?? '').startsWith('multipart/form-data');
    let body: unknown;
    let multipartFields: string[] | undefined;
    try {
      if (isMultipart) {
        const form = await new Request('http://local/', { method: 'POST', headers: { 'content-type': contentType! }, body: raw }).formData();
        multipartFields = [...new Set(form.keys())];
      } else if (raw.length > 0) {
        body = JSON.parse(raw.toString('utf8'));
      }
    } catch (err) {
      violations.push(`${method} ${url.pathname}: unreadable body (${(err as Error).message})`);
    }
    const reqErrors = validate ? validator().validateRequest({ method, path: url.pathname, query: url.searchParams, contentType, body, multipartFields }) : [];
    violations.push(...reqErrors);

    let status = 200;
    let json: unknown;
    let binary: Buffer | undefined;
    const route = routes.find(([m, re]) => m === method && re.test(url.pathname));
    try {
      if (reqErrors.length > 0) throw new HttpError(400, `Format error: request does not conform to the OpenAPI description: ${reqErrors[0]}`);
      if (!route) throw new HttpError(501, `test server: ${method} ${url.pathname} is not implemented`);
      const out = await route[2](route[1].exec(url.pathname)!, url.searchParams, body, raw, req);
      const readOnly = method === 'GET' || (method === 'POST' && /\/points(\/(scroll|count|query))?$/.test(url.pathname));
      if (!readOnly) version += 1;
      status = out.status ?? 200;
      binary = out.binary;
      json = out.json;
    } catch (err) {
      if (!(err instanceof HttpError)) throw err;
      if (err.status === 501) violations.push(err.message);
      status = err.status;
      json = undefined;
      binary = undefined;
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      return send(res, method, url.pathname, status, { status: { error: err.message }, time: seconds });
    }
    if (binary) {
      if (validate) violations.push(...validator().validateResponse({ method, path: url.pathname, status, contentType: 'application/octet-stream' }));
      res.writeHead(status, { 'content-type': 'application/octet-stream', 'content-length': binary.length });
      res.end(binary);
      return;
    }
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    send(res, method, url.pathname, status, { result: json, status: 'ok', time: seconds });
  }

  function send(res: ServerResponse, method: string, path: string, status: number, payload: unknown): void {
    // The root endpoint answers with VersionInfo itself, not wrapped in {result}.
    const body = path === '/' && status === 200 ? (payload as { result: unknown }).result : payload;
    if (validate) violations.push(...validator().validateResponse({ method, path, status, contentType: 'application/json', body }));
    const text = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    violations,
    assertConforms() {
      if (violations.length > 0) throw new Error(`Qdrant OpenAPI violations:\n  ${violations.join('\n  ')}`);
    },
    snapshotNames: (collection) => [...(snapshots.get(collection)?.keys() ?? [])],
    corruptNextDownload: (collection) => void corrupt.add(collection),
    holdNextRecovery(collection) {
      let release!: () => void;
      let reached!: () => void;
      const released = new Promise<void>((r) => (release = r));
      const reachedP = new Promise<void>((r) => (reached = r));
      holds.set(collection, { reached, released });
      return { reached: reachedP, release };
    },
    close: () => new Promise<void>((resolve, reject) => {
      server.closeAllConnections();
      server.close((err) => (err ? reject(err) : resolve()));
    }),
  };
}

function dec(s: string | undefined): string {
  return decodeURIComponent(s ?? '');
}

export interface FaultRule {
  method?: string;
  /** Matched against the path (no query). */
  path: RegExp;
  /** Let this many matching requests through first. */
  after?: number;
  /** Fail this many (default: every one after `after`). */
  times?: number;
  /**
   * `status` answers with an HTTP error (503 default); `reset` drops the connection before Qdrant sees the request;
   * `lose-answer` lets Qdrant apply it, then drops the connection before the answer arrives; `stall` passes the
   * answer's headers and first bytes on, then holds the rest forever (a download in progress, for kill -9 tests).
   */
  mode?: 'status' | 'reset' | 'lose-answer' | 'stall';
  status?: number;
}

export interface FaultProxy {
  url: string;
  fail(rule: FaultRule): void;
  /** Resolves when the next fault has been applied (a stall: once the first bytes went out). */
  nextFault(): Promise<void>;
  clear(): void;
  /** How many requests matched each rule's path and were failed. */
  failed: number;
  close(): Promise<void>;
}

/** A loopback proxy in front of a Qdrant (real or test) that fails the requests a test chooses. */
export async function startFaultProxy(target: string): Promise<FaultProxy> {
  const rules: (FaultRule & { seen: number; failedCount: number })[] = [];
  const t = new URL(target);
  const state = { failed: 0 };
  const waiters: (() => void)[] = [];
  const server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://local').pathname;
    for (const r of rules) {
      if ((r.method && r.method !== req.method) || !r.path.test(path)) continue;
      r.seen += 1;
      if (r.seen <= (r.after ?? 0)) continue;
      if (r.times !== undefined && r.failedCount >= r.times) continue;
      r.failedCount += 1;
      state.failed += 1;
      const notify = () => waiters.splice(0).forEach((w) => w());
      if (r.mode === 'stall') {
        const upstream = httpRequest({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: { ...req.headers, host: t.host } }, (up) => {
          res.writeHead(up.statusCode ?? 502, up.headers);
          up.once('data', (chunk: Buffer) => {
            up.pause();
            res.write(chunk.subarray(0, Math.max(1, chunk.length >> 1)), () => notify());
          });
        });
        req.pipe(upstream);
        return;
      }
      notify();
      if (r.mode === 'lose-answer') {
        const upstream = httpRequest({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: { ...req.headers, host: t.host } }, (up) => {
          up.resume();
          up.on('end', () => req.socket.destroy());
        });
        upstream.on('error', () => req.socket.destroy());
        req.pipe(upstream);
        return;
      }
      req.resume();
      if (r.mode === 'reset') {
        req.socket.destroy();
        return;
      }
      const text = JSON.stringify({ status: { error: 'Service Unavailable (fault injected by the test)' }, time: 0 });
      res.writeHead(r.status ?? 503, { 'content-type': 'application/json' }).end(text);
      return;
    }
    const upstream = httpRequest(
      { host: t.hostname, port: t.port, method: req.method, path: req.url, headers: { ...req.headers, host: t.host } },
      (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      },
    );
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    fail: (rule) => void rules.push({ ...rule, seen: 0, failedCount: 0 }),
    nextFault: () => new Promise<void>((resolve) => waiters.push(resolve)),
    clear: () => void rules.splice(0),
    get failed() {
      return state.failed;
    },
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}

export interface QdrantTarget {
  url: string;
  apiKey?: string;
  /** `real` when QDRANT_URL points the suite at a real Qdrant. */
  kind: 'test-server' | 'real';
  /** A collection name unique to this test run. */
  name(base: string): string;
  createCollection(name: string, size?: number): Promise<void>;
  upsert(collection: string, points: { id: PointId; vector?: number[]; payload?: Payload }[]): Promise<void>;
  /** Every point of a collection, with payload. */
  points(collection: string): Promise<{ id: PointId; payload: Payload }[]>;
  /** Server-side snapshots still held by the server for this collection. */
  snapshotNames(collection: string): Promise<string[]>;
  /** Throws if the test server saw anything the OpenAPI description does not allow (no-op for real Qdrant). */
  assertConforms(): void;
  server?: QdrantTestServer;
  /** Deletes this run's collections (real Qdrant) or stops the test server. */
  close(): Promise<void>;
}

export const VECTOR_SIZE = 4;

/** A deterministic small vector for a text: enough for query tests, no model needed. */
export function vectorFor(text: string, size = VECTOR_SIZE): number[] {
  const h = createHash('sha256').update(text).digest();
  return Array.from({ length: size }, (_, i) => (h[i]! + 1) / 256);
}

/** The test server on a loopback port, or the real Qdrant at QDRANT_URL. */
export async function qdrantTarget(): Promise<QdrantTarget> {
  const realUrl = process.env.QDRANT_URL;
  const server = realUrl ? undefined : await startQdrantTestServer();
  const url = (realUrl ?? server!.url).replace(/\/+$/, '');
  const apiKey = realUrl ? process.env.QDRANT_API_KEY || undefined : undefined;
  const headers: Record<string, string> = { 'content-type': 'application/json', ...(apiKey ? { 'api-key': apiKey } : {}) };
  const run = randomBytes(4).toString('hex');
  const created: string[] = [];
  const call = async (method: string, path: string, body?: unknown): Promise<any> => {
    const res = await fetch(`${url}${path}`, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
    const json = (await res.json()) as { result?: unknown; status?: unknown };
    if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status} ${JSON.stringify(json.status)}`);
    return json.result;
  };
  return {
    url,
    ...(apiKey ? { apiKey } : {}),
    kind: realUrl ? 'real' : 'test-server',
    name: (base) => `mw_test_${run}_${base}`,
    async createCollection(name, size = VECTOR_SIZE) {
      await call('PUT', `/collections/${encodeURIComponent(name)}`, { vectors: { size, distance: 'Cosine' } });
      created.push(name);
    },
    async upsert(collection, points) {
      const body = { points: points.map((p) => ({ id: p.id, vector: p.vector ?? vectorFor(String(p.id)), payload: p.payload ?? {} })) };
      await call('PUT', `/collections/${encodeURIComponent(collection)}/points?wait=true`, body);
    },
    async points(collection) {
      const out: { id: PointId; payload: Payload }[] = [];
      let offset: PointId | null = null;
      do {
        const page: { points: { id: PointId; payload: Payload }[]; next_page_offset: PointId | null } = await call('POST', `/collections/${encodeURIComponent(collection)}/points/scroll`, {
          limit: 256, with_payload: true, with_vector: false, ...(offset !== null ? { offset } : {}),
        });
        out.push(...page.points);
        offset = page.next_page_offset ?? null;
      } while (offset !== null);
      return out;
    },
    async snapshotNames(collection) {
      return ((await call('GET', `/collections/${encodeURIComponent(collection)}/snapshots`)) as { name: string }[]).map((s) => s.name);
    },
    assertConforms: () => server?.assertConforms(),
    ...(server ? { server } : {}),
    async close() {
      if (server) return server.close();
      for (const name of created) await call('DELETE', `/collections/${encodeURIComponent(name)}`).catch(() => undefined);
    },
  };
}
