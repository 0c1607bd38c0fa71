/** A real SQLite store with its Qdrant side (test server, or real Qdrant under QDRANT_URL), as a config. */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import YAML from 'yaml';
import { validateConfig, type Config } from '../../src/config/config.js';
import { makeStore, tempDir, type Row } from './store.js';
import { qdrantTarget, type QdrantTarget } from './qdrant-server.js';

export interface Overrides {
  url?: string;
  qdrant?: Record<string, unknown>;
  snapshot?: Record<string, unknown>;
  prune?: Record<string, unknown>;
}

export interface QdrantFixture {
  q: QdrantTarget;
  dir: string;
  dbPath: string;
  collections: string[];
  /** The store's config; `url` overrides Qdrant's address (a fault proxy). */
  config(overrides?: Overrides): Config;
  /** The same, as a YAML file for the CLI. */
  configFile(overrides?: Overrides): string;
  raw(overrides?: Overrides): Record<string, unknown>;
  /** A point per row (two for ids listed in `chunks`), payload memory_id + text. */
  seedPoints(rows: Row[], opts?: { chunks?: string[]; collections?: string[] }): Promise<void>;
  /** memory_id of every point in a collection, sorted, one entry per point. */
  pointRows(collection?: string): Promise<string[]>;
  close(): Promise<void>;
}

export async function qdrantFixture(rows: Row[], opts: { collections?: number } = {}): Promise<QdrantFixture> {
  const q = await qdrantTarget();
  const { dir, cleanup } = tempDir('mw-q-');
  const dbPath = makeStore(join(dir, 'memory.db'), rows);
  const collections = Array.from({ length: opts.collections ?? 1 }, (_, i) => q.name(`mem${i}`));
  for (const c of collections) await q.createCollection(c);
  let seq = 1;
  // Typed here, not by the async return: there `this` would also be a PromiseLike.
  const fixture: QdrantFixture = {
    q, dir, dbPath, collections,
    config(o = {}) {
      return validateConfig(this.raw(o));
    },
    configFile(o = {}) {
      const path = join(dir, `config-${seq++}.yaml`);
      // A file names the key as the config rule wants every secret: from the environment (the CLI inherits it).
      const raw = this.raw(o) as { stores: { agent: { qdrant: { apiKey?: string } } } };
      if (raw.stores.agent.qdrant.apiKey !== undefined) raw.stores.agent.qdrant.apiKey = '${QDRANT_API_KEY}';
      writeFileSync(path, YAML.stringify(raw));
      return path;
    },
    raw(o = {}) {
      return {
        stateDb: join(dir, 'state.db'),
        prune: { pauseMs: 0, ...o.prune },
        snapshot: { root: join(dir, 'backups'), ...o.snapshot },
        stores: {
          agent: {
            db: dbPath,
            qdrant: { url: o.url ?? q.url, ...(q.apiKey ? { apiKey: q.apiKey } : {}), collections, pointId: 'payload', textKey: 'text', ...o.qdrant },
          },
        },
      };
    },
    async seedPoints(list, so = {}) {
      for (const c of so.collections ?? collections) {
        const points = list.flatMap((r) => (so.chunks?.includes(r.id) ? [0, 1] : [0]).map(() => ({ id: seq++, payload: { memory_id: r.id, text: r.fact ?? `fact of ${r.id}` } })));
        await q.upsert(c, points);
      }
    },
    async pointRows(collection = collections[0]!) {
      return (await q.points(collection)).map((p) => String(p.payload.memory_id)).sort();
    },
    async close() {
      try {
        q.assertConforms();
      } finally {
        await q.close();
        cleanup();
      }
    },
  };
  return fixture;
}
