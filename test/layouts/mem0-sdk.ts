import { createHash } from 'node:crypto';
import { spawn } from 'node:child_process';
import { CLI } from '../helpers/cli.js';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { QdrantClient } from '@qdrant/js-client-rest';
import YAML from 'yaml';
import { writeFileSync } from 'node:fs';

/**
 * mem0 stores built only through mem0ai's own TypeScript SDK (`mem0ai/oss`, pinned in devDependencies), offline:
 * a deterministic local embedder (the SDK's `langchain` provider takes any object with embedQuery/embedDocuments)
 * and no LLM call (`infer: false`; the OpenAI LLM it constructs points at a closed loopback port and is never
 * asked). Entities are linked by the SDK itself, which does it when `update` changes a memory's text.
 *
 * Two vector stores: the SDK's default `memory` provider (its own SQLite files) and Qdrant through the
 * spec-checking test server. Qdrant's 1.19 description has no `/points/search` any more, which mem0ai 3.3.1 still
 * calls for `search()`: the SDK gets a QdrantClient whose `search` goes through `/points/query`, so every request
 * the test server sees is one real Qdrant answers.
 */
export type VectorKind = 'sqlite' | 'qdrant' | 'pgvector';

/** The environment variable a pgvector store's config names its URL by (credentials from the environment only). */
export const PG_URL_VAR = 'MW_TEST_MEM0_PG_URL';

export const DIM = 64;

/** Bag of words and character trigrams hashed into DIM dimensions: equal texts, equal vectors; similar, close. */
export function embed(text: string): number[] {
  const v = new Array<number>(DIM).fill(0);
  const bump = (s: string, w: number) => {
    const h = createHash('sha1').update(s).digest();
    v[h[0]! % DIM]! += w;
  };
  const words = text.toLowerCase().split(/\W+/).filter(Boolean);
  for (const w of words) {
    bump(`w:${w}`, 1);
    for (let i = 0; i + 3 <= w.length; i++) bump(`t:${w.slice(i, i + 3)}`, 0.3);
  }
  v[DIM - 1]! += 0.01; // never the zero vector
  const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  return v.map((x) => x / n);
}

const embedder = { embedQuery: async (t: string) => embed(t), embedDocuments: async (ts: string[]) => ts.map(embed) };

type MemoryCtor = new (config: Record<string, unknown>) => any;
let sdk: { Memory: MemoryCtor } | undefined;

/** The SDK, loaded once with its telemetry off (read at import) and its config folder in the test's temp dir. */
export async function loadSdk(mem0Dir: string): Promise<{ Memory: MemoryCtor }> {
  process.env.MEM0_TELEMETRY = 'false';
  process.env.MEM0_DIR = mem0Dir;
  sdk ??= (await import('mem0ai/oss')) as unknown as { Memory: MemoryCtor };
  return sdk;
}

/** mem0ai 3.3.1 calls the search endpoint Qdrant 1.19 removed; the same search through the query endpoint. */
function queryingClient(url: string, apiKey?: string): QdrantClient {
  const client = new QdrantClient({ url, ...(apiKey ? { apiKey } : {}), checkCompatibility: false });
  return new Proxy(client, {
    get(target, prop, receiver) {
      if (prop !== 'search') return Reflect.get(target, prop, receiver);
      return async (collection: string, args: { vector: number[]; filter?: unknown; limit?: number; with_payload?: boolean }) => {
        const r = await target.query(collection, { query: args.vector, filter: args.filter as never, limit: args.limit ?? 10, with_payload: args.with_payload ?? true });
        return r.points;
      };
    },
  });
}

export interface SdkStore {
  kind: VectorKind;
  dir: string;
  /** The SDK's history file (its default name, memory.db). */
  historyPath: string;
  /** vectorStore sqlite: the SDK's two files. */
  vectorDb: string;
  entityVectorDb: string;
  /** The SDK's default collection names. */
  collection: 'memories';
  entityCollection: 'memories_entities';
  qdrant?: { url: string; apiKey?: string };
  /** vectorStore pgvector: the server's URL (mem0's connectionString; the config reads it from PG_URL_VAR). */
  pgUrl?: string;
  /** A new Memory, as an agent process starting would make. */
  open(): Promise<any>;
  /** Close the SDK's SQLite connections (an agent stopping), so files can be restored under it. */
  close(m: any): void;
  /** memory-warden's config for this store, with the TypeScript SDK's defaults (no collection named). */
  configFile(extra?: Record<string, unknown>): string;
}

export async function sdkStore(kind: VectorKind, dir: string, qdrant?: { url: string; apiKey?: string }, pgUrl?: string): Promise<SdkStore> {
  const { Memory } = await loadSdk(join(dir, 'mem0home'));
  mkdirSync(join(dir, 'mem0home'), { recursive: true });
  const historyPath = join(dir, 'memory.db');
  const vectorDb = join(dir, 'vector_store.db');
  const vectorStore = kind === 'sqlite'
    ? { provider: 'memory', config: { collectionName: 'memories', dimension: DIM, dbPath: vectorDb } }
    : kind === 'pgvector'
      ? { provider: 'pgvector', config: { connectionString: pgUrl!, collectionName: 'memories', embeddingModelDims: DIM } }
      : { provider: 'qdrant', config: { collectionName: 'memories', dimension: DIM, client: queryingClient(qdrant!.url, qdrant!.apiKey) } };
  const store: SdkStore = {
    kind, dir, historyPath, vectorDb, entityVectorDb: join(dir, 'vector_store_entities.db'),
    collection: 'memories', entityCollection: 'memories_entities',
    ...(qdrant ? { qdrant } : {}),
    ...(pgUrl ? { pgUrl } : {}),
    async open() {
      const m = new Memory({
        embedder: { provider: 'langchain', config: { model: embedder, embeddingDims: DIM } },
        vectorStore,
        llm: { provider: 'openai', config: { apiKey: 'unused', baseURL: 'http://127.0.0.1:9/v1' } },
        historyDbPath: historyPath,
      });
      await m._ensureInitialized();
      return m;
    },
    close(m) {
      m.db?.close?.();
      m.vectorStore?.db?.close?.();
      m._entityStore?.db?.close?.();
      void m.vectorStore?.client?.end?.().catch?.(() => {});
      void m._entityStore?.client?.end?.().catch?.(() => {});
    },
    configFile(extra = {}) {
      const file = join(dir, `warden-${Math.random().toString(36).slice(2, 8)}.yaml`);
      const mem0 = kind === 'sqlite' ? { vectorStore: 'sqlite', vectorDb, pageSize: 2, ...extra }
        : kind === 'pgvector' ? { vectorStore: 'pgvector', pgvector: { url: `\${${PG_URL_VAR}}` }, pageSize: 2, ...extra }
          : { pageSize: 2, ...extra };
      const qdrantSection = qdrant ? { qdrant: { url: qdrant.url, ...(qdrant.apiKey ? { apiKey: qdrant.apiKey } : {}), collections: ['memories', 'memories_entities'] } } : {};
      writeFileSync(file, YAML.stringify({
        stateDb: join(dir, 'state.db'),
        snapshot: { root: join(dir, 'backups') },
        stores: { m: { layout: 'mem0', db: historyPath, ...(kind === 'qdrant' ? qdrantSection : {}), mem0 } },
      }));
      return file;
    },
  };
  return store;
}

export interface CliOut {
  code: number | null;
  stdout: string;
  stderr: string;
  json(): any;
}

/** The built CLI in a child process, asynchronously: the Qdrant test server lives in this process. */
export function cliAsync(args: string[]): Promise<CliOut> {
  const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, LOG_LEVEL: 'silent' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr, json: () => JSON.parse(stdout) })));
}
