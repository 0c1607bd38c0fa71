import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { tempDir } from '../helpers/store.js';
import { qdrantTarget, vectorFor, type QdrantTarget } from '../helpers/qdrant-server.js';
import { startPgvectorServer } from '../helpers/pg.js';
import pg from 'pg';
import { VECTOR_STORES } from '../../src/vectors/registry.js';
import { scrollAll, type PointStore, type VectorStoreFactory } from '../../src/vectors/contract.js';

/**
 * The vector-store contract (src/vectors/contract.ts), run over every registered vector store: a store that does not
 * pass it is not registered. Each brings a Place: real storage of its kind, seeded the way its writer seeds it.
 */
interface Place {
  points: PointStore;
  /** The collection as this store names it (the Qdrant test server prefixes a run's collections). */
  name(collection: string): string;
  seed(collection: string, points: { id: string; payload: Record<string, unknown> }[]): Promise<void>;
  /** Every byte the store keeps, as text (for the compaction check), or null when it keeps none locally. */
  bytes(): string | null;
  close(): Promise<void>;
}

const PLACES: Record<string, (dir: string, open: VectorStoreFactory) => Promise<Place>> = {
  async qdrant(_dir, open) {
    const q: QdrantTarget = await qdrantTarget();
    const made = new Set<string>();
    return {
      points: open({ qdrant: { url: q.url, ...(q.apiKey ? { apiKey: q.apiKey } : {}), collections: [] } as never }),
      name: (n) => q.name(n),
      async seed(collection, points) {
        if (!made.has(collection)) await q.createCollection(q.name(collection)).then(() => made.add(collection));
        await q.upsert(q.name(collection), points.map((p) => ({ ...p, vector: vectorFor(String(p.payload.data ?? p.id)) })));
      },
      bytes: () => null,
      async close() {
        q.assertConforms();
        await q.close();
      },
    };
  },

  // The TypeScript SDK's files: one per collection, vectors(id, vector, payload JSON) (src/vectors/mem0-sqlite/).
  async sqlite(dir, open) {
    const files = { memories: join(dir, 'vector_store.db'), entities: join(dir, 'vector_store_entities.db') };
    return {
      points: open({ files }),
      name: (n) => n,
      async seed(collection, points) {
        const db = new Database(files[collection as keyof typeof files]);
        db.exec('CREATE TABLE IF NOT EXISTS vectors (id TEXT PRIMARY KEY, vector BLOB NOT NULL, payload TEXT NOT NULL)');
        const put = db.prepare('INSERT INTO vectors (id, vector, payload) VALUES (?, ?, ?)');
        for (const p of points) put.run(p.id, Buffer.from(new Float32Array(vectorFor(p.id)).buffer), JSON.stringify(p.payload));
        db.close();
      },
      bytes: () => Object.values(files).filter((f) => existsSync(f)).map((f) => readFileSync(f).toString('latin1')).join('\n'),
      async close() {},
    };
  },

  // Tables of a schema as mem0ai 3.3.1's pgvector store makes them (memories(id uuid PRIMARY KEY, vector vector(N),
  // payload jsonb)), on PGlite with pgvector, read over the wire by the ordinary pg client.
  async pgvector(_dir, open) {
    const server = await startPgvectorServer();
    const pool = new pg.Pool({ connectionString: server.url, max: 2 });
    await pool.query('CREATE SCHEMA agent');
    // A table of another shape in the same schema is no collection.
    await pool.query('CREATE TABLE agent.notes (id text PRIMARY KEY, body text)');
    return {
      points: open({ pg: { sql: pool, schema: 'agent' } }),
      name: (n) => n,
      async seed(collection, points) {
        await pool.query(`CREATE TABLE IF NOT EXISTS agent.${collection} (id uuid PRIMARY KEY, vector vector(4), payload jsonb)`);
        for (const p of points) await pool.query(`INSERT INTO agent.${collection} (id, vector, payload) VALUES ($1, $2, $3)`, [p.id, JSON.stringify(vectorFor(p.id, 4)), JSON.stringify(p.payload)]);
      },
      bytes: () => null,
      async close() {
        await pool.end();
        await server.stop();
      },
    };
  },
};

it('every registered vector store has a place in this suite, and only those', () => {
  expect(Object.keys(PLACES).sort()).toEqual(Object.keys(VECTOR_STORES).sort());
});

describe.each(Object.entries(VECTOR_STORES))('the %s vector store keeps the vector-store contract', (name, open: VectorStoreFactory) => {
  let tmp: ReturnType<typeof tempDir>;
  let place: Place;
  const ids = Array.from({ length: 5 }, () => randomUUID()).sort();
  const memories = ids.map((id, i) => ({ id, payload: { data: `Memory number ${i} of Ana`, user_id: i < 3 ? 'ana' : 'ben', hash: `h${i}` } }));

  beforeEach(async () => {
    tmp = tempDir(`mw-vectors-${name}-`);
    place = await PLACES[name]!(tmp.dir, open);
    await place.seed('memories', memories);
  });
  afterEach(async () => {
    await place.close();
    tmp.cleanup();
  });

  const real = async (n: string) => place.name(n);

  it('lists the collections that exist, and only those', async () => {
    const names = await place.points.collections();
    expect(names).toContain(place.name('memories'));
    expect(names).not.toContain(place.name('entities'));
    await place.seed('entities', [{ id: randomUUID(), payload: { data: 'Ana', linked_memory_ids: [ids[0]] } }]);
    expect(await place.points.collections()).toContain(place.name('entities'));
  });

  it('scrolls every point exactly once in pages of the asked size, with only the asked payload keys', async () => {
    const col = await real('memories');
    const seen: string[] = [];
    for await (const page of scrollAll(place.points, col, 2, ['data'])) {
      expect(page.length).toBeLessThanOrEqual(2);
      for (const p of page) {
        expect(Object.keys(p.payload)).toEqual(['data']);
        seen.push(p.id);
      }
    }
    expect(seen.sort()).toEqual(ids);
  });

  it('retrieves known ids with their payload, leaves unknown ones out, and can leave the payload out', async () => {
    const col = await real('memories');
    const unknown = randomUUID();
    const got = await place.points.retrieve(col, [ids[1]!, unknown]);
    expect(got).toEqual([{ id: ids[1], payload: memories[1]!.payload }]);
    expect((await place.points.retrieve(col, [ids[2]!], false)).map((p) => [p.id, Object.keys(p.payload)])).toEqual([[ids[2], []]]);
    expect(await place.points.retrieve(col, [])).toEqual([]);
  });

  it('setPayload sets the keys it names and keeps the others', async () => {
    const col = await real('memories');
    await place.points.setPayload(col, ids[0]!, { updated_at: '2026-11-29T12:00:00+00:00' });
    const [p] = await place.points.retrieve(col, [ids[0]!]);
    expect(p!.payload).toEqual({ ...memories[0]!.payload, updated_at: '2026-11-29T12:00:00+00:00' });
  });

  it('deletes exactly the ids it is given; after compact no deleted text is left in local files', async () => {
    const col = await real('memories');
    await place.points.delete(col, [ids[0]!, ids[3]!]);
    await place.points.delete(col, []);
    const left: string[] = [];
    for await (const page of scrollAll(place.points, col, 10)) left.push(...page.map((p) => p.id));
    expect(left.sort()).toEqual([ids[1], ids[2], ids[4]]);
    await place.points.compact?.();
    const bytes = place.bytes();
    if (bytes !== null) {
      expect(bytes).not.toContain('Memory number 0 of Ana');
      expect(bytes).not.toContain('Memory number 3 of Ana');
      expect(bytes).toContain('Memory number 1 of Ana');
    }
  });
});
