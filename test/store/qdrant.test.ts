import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { QdrantStore, qdrantError, uuid5 } from '../../src/vectors/qdrant/index.js';
import { qdrantSchema } from '../../src/store/config.js';
import { qdrantTarget, startFaultProxy, type QdrantTarget } from '../helpers/qdrant-server.js';
import { OpenApiValidator } from '../helpers/openapi.js';
import { tempDir } from '../helpers/store.js';

let q: QdrantTarget;
beforeEach(async () => {
  q = await qdrantTarget();
});
afterEach(async () => {
  q.assertConforms();
  await q.close();
});

function store(collections: string[], extra: Record<string, unknown> = {}, url = q.url): QdrantStore {
  return new QdrantStore(qdrantSchema.parse({ url, collections, ...(q.apiKey ? { apiKey: q.apiKey } : {}), ...extra }));
}

describe('point ids', () => {
  it('uuid5 matches the RFC 4122 example', () => {
    expect(uuid5('www.example.com', '6ba7b810-9dad-11d1-80b4-00c04fd430c8')).toBe('2ed6657d-e927-568b-95e1-2665a8aea6a2');
  });

  it('maps rows to points per mode, and refuses ids Qdrant cannot hold', () => {
    const byId = store(['c'], { pointId: 'id' });
    expect(byId.pointIdFor('42')).toBe(42);
    expect(byId.pointIdFor('0042')).toBeNull();
    expect(byId.pointIdFor('m_0140')).toBeNull();
    expect(byId.pointIdFor('550E8400-E29B-41D4-A716-446655440000')).toBe('550e8400-e29b-41d4-a716-446655440000');
    expect(byId.rowIdsOf({ id: '550e8400-e29b-41d4-a716-446655440000' })).toEqual(['550e8400-e29b-41d4-a716-446655440000', '550E8400-E29B-41D4-A716-446655440000']);
    const byUuid = store(['c'], { pointId: 'uuid5' });
    const p = byUuid.pointIdFor('m_0140') as string;
    expect(byUuid.rowIdsOf({ id: p, payload: { memory_id: 'm_0140' } })).toEqual(['m_0140']);
    expect(byUuid.rowIdsOf({ id: p, payload: { memory_id: 'm_0141' } })).toEqual([]);
    expect(store(['c']).pointIdFor('m_0140')).toBeNull();
  });
});

describe.each(['payload', 'id', 'uuid5'] as const)('deletes, mode %s', (mode) => {
  it('deletes every point of the rows in every collection, and nothing else', async () => {
    const [a, b] = [q.name('a'), q.name('b')];
    await q.createCollection(a);
    await q.createCollection(b);
    const s = store([a, b], { pointId: mode });
    const rows = mode === 'id' ? ['1', '2', '3'] : ['m_1', 'm_2', 'm_3'];
    const pointOf = (r: string, chunk: number) =>
      mode === 'payload' ? 100 + Number(r.replace(/\D/g, '')) * 10 + chunk : s.pointIdFor(r)!;
    for (const c of [a, b]) {
      await q.upsert(c, rows.flatMap((r) => (mode === 'payload' ? [0, 1] : [0]).map((chunk) => ({ id: pointOf(r, chunk), payload: { memory_id: r } }))));
    }
    await s.deleteForRows([rows[0]!, rows[2]!]);
    for (const c of [a, b]) {
      const left = (await q.points(c)).map((p) => p.payload.memory_id);
      expect(new Set(left)).toEqual(new Set([rows[1]]));
      expect(await s.count(c)).toBe(mode === 'payload' ? 2 : 1);
      expect(await s.rowsWithPoints(c, rows)).toEqual(new Set([rows[1]]));
    }
  });
});

describe('failures', () => {
  it('an unreachable Qdrant is transient; a missing collection is permanent', async () => {
    const proxy = await startFaultProxy(q.url);
    await proxy.close();
    const gone = store(['x'], {}, proxy.url);
    await expect(gone.deleteForRows(['m_1'])).rejects.toMatchObject({ kind: 'transient' });
    await expect(store([q.name('missing')]).deleteForRows(['m_1'])).rejects.toMatchObject({ kind: 'store' });
  });

  it('5xx and dropped connections are transient', async () => {
    const c = q.name('c');
    await q.createCollection(c);
    const proxy = await startFaultProxy(q.url);
    try {
      proxy.fail({ path: /points\/delete$/, times: 1 });
      await expect(store([c], {}, proxy.url).deleteForRows(['m_1'])).rejects.toMatchObject({ kind: 'transient' });
      proxy.fail({ path: /points\/delete$/, times: 1, mode: 'reset' });
      await expect(store([c], {}, proxy.url).deleteForRows(['m_1'])).rejects.toMatchObject({ kind: 'transient' });
      expect(proxy.failed).toBe(2);
    } finally {
      await proxy.close();
    }
  });

  it('classifies client errors', () => {
    expect(qdrantError('x', { status: 404, message: 'Not Found' }).kind).toBe('store');
    expect(qdrantError('x', { status: 503, message: 'Service Unavailable' }).kind).toBe('transient');
    expect(qdrantError('x', new Error('Unexpected Response: 502 (Bad Gateway)')).kind).toBe('transient');
    expect(qdrantError('x', new TypeError('fetch failed')).kind).toBe('transient');
  });
});

describe('snapshots', () => {
  it('creates, streams to disk with a matching checksum, deletes, and recovers by upload', async () => {
    const c = q.name('snap');
    await q.createCollection(c);
    await q.upsert(c, [{ id: 1, payload: { memory_id: 'm_1' } }, { id: 2, payload: { memory_id: 'm_2' } }]);
    const s = store([c]);
    const info = await s.createSnapshot(c);
    const { dir, cleanup } = tempDir();
    try {
      const file = join(dir, 'c.snapshot');
      const got = await s.downloadSnapshot(c, info.name, file);
      expect(got.sha256).toBe(info.checksum);
      expect(got.bytes).toBe(info.size);
      expect(createHash('sha256').update(readFileSync(file)).digest('hex')).toBe(info.checksum);
      expect(statSync(file).mode & 0o777).toBe(0o600);
      await s.deleteSnapshot(c, info.name);
      expect(await q.snapshotNames(c)).toEqual([]);

      await s.deletePoints(c, [1, 2]);
      expect(await s.count(c)).toBe(0);
      await s.recoverFromFile(c, file, got.sha256);
      expect((await q.points(c)).map((p) => p.id).sort()).toEqual([1, 2]);
      await expect(s.recoverFromFile(c, file, '0'.repeat(64))).rejects.toThrow(/checksum/i);
    } finally {
      cleanup();
    }
  });
});

describe('the OpenAPI validator', () => {
  const v = new OpenApiValidator();
  it('accepts what Qdrant describes and rejects what it does not', () => {
    const ok = { method: 'POST', path: '/collections/x/points/delete', query: new URLSearchParams('wait=true'), contentType: 'application/json', body: { points: [1, 'not-a-uuid'] } };
    expect(v.validateRequest({ ...ok, body: { points: [1] } })).toEqual([]);
    expect(v.validateRequest(ok).length).toBeGreaterThan(0);
    expect(v.validateRequest({ ...ok, query: new URLSearchParams('wait=true&bogus=1') }).join()).toMatch(/bogus/);
    expect(v.validateRequest({ ...ok, path: '/collections/x/points/search', body: {} }).join()).toMatch(/no such operation|body/);
    expect(v.validateResponse({ method: 'POST', path: '/collections/x/points/count', status: 200, contentType: 'application/json', body: { result: { count: -1 }, status: 'ok', time: 0 } }).length).toBeGreaterThan(0);
    expect(v.validateResponse({ method: 'POST', path: '/collections/x/points/count', status: 200, contentType: 'application/json', body: { result: { count: 3 }, status: 'ok', time: 0 } })).toEqual([]);
  });
});
