import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { DIM } from './mastra-embed.js';
import { cliAsync } from './cli.js';
import { tempDir } from './store.js';
import { mastraSdk, type MastraSdk, type MastraSdkOptions } from './mastra-sdk.js';
import { createTestDatabase, startPgvectorServer, type PgvectorServer, type TestDatabase } from './pg.js';
import { verifyBytesGone } from '../../src/engines/postgres/bytes.js';

/**
 * A Mastra store on @mastra/pg, for the tests that drive Mastra's SDK on PostgreSQL, in one of its two forms: split,
 * PostgresStore on a database of its own on the native PostgreSQL 15 (no pgvector) and PgVector on a PGlite server
 * (`mastra.pgvector.url`); or one PGlite, PostgresStore and PgVector both on one PGlite server (schema `public`, no
 * `mastra.pgvector`). A memory-warden config names the servers through environment variables.
 */
export const VEC_TABLE = `memory_messages_${DIM}`;

export type MastraPgForm = 'one PGlite' | 'split';

export interface MastraPgStore {
  storeUrl: string;
  vectorUrl: string;
  /** memory-warden's config file and the CLI's `--config … --store s`. */
  config: string;
  store: string[];
  env: Record<string, string>;
  /** Rewrites the config with this `mastra.retention`. */
  retention(r: Record<string, number>): void;
  sdk(opts?: Omit<MastraSdkOptions, 'pg'>): Promise<MastraSdk>;
  /** `fn` on a Mastra SDK of this store, closed after (its background vector deletes waited for). */
  withSdk<T>(fn: (m: MastraSdk) => Promise<T>, opts?: Omit<MastraSdkOptions, 'pg'>): Promise<T>;
  /** memory-warden init through the CLI, once Mastra has made its tables; throws if it fails. */
  init(): Promise<void>;
  stop(): Promise<void>;
}

/** The split form's store (the name the tests on that form use). */
export type SplitStore = MastraPgStore;

/** The split form's store, its servers and a folder of its own for the config, state and snapshots; stop() removes them all. */
export function splitStore(label: string, retention: Record<string, number> = {}): Promise<SplitStore> {
  return mastraPgStore('split', label, retention);
}

/** The store in `form`, its servers and a folder of its own for the config, state and snapshots; stop() removes them all. */
export async function mastraPgStore(form: MastraPgForm, label: string, retention: Record<string, number> = {}): Promise<MastraPgStore> {
  const tmp = tempDir(`mw-mastra-pg-${label}-`);
  const dir = tmp.dir;
  let vec: PgvectorServer | undefined;
  let db: TestDatabase | undefined;
  try {
    vec = await startPgvectorServer();
    if (form === 'split') db = await createTestDatabase(`mw_mastra_${label}`);
  } catch (err) {
    await vec?.stop();
    tmp.cleanup();
    throw err;
  }
  const storeUrl = db?.url ?? vec.url;
  const config = join(dir, `memory-warden-${label}.yaml`);
  const write = (r: Record<string, number>) => writeFileSync(config, JSON.stringify({
    stateDb: join(dir, `state-${label}.db`), snapshot: { root: join(dir, `backups-${label}`) },
    stores: { s: { engine: 'postgres', layout: 'mastra', postgres: { url: '${MW_MASTRA_PG}', schema: 'public' },
      mastra: { retention: r, ...(db ? { pgvector: { url: '${MW_MASTRA_VEC}' } } : {}) } } },
  }));
  write(retention);
  const store = ['--config', config, '--store', 's'];
  const env = { MW_MASTRA_PG: storeUrl, MW_MASTRA_VEC: vec.url };
  // PGlite answers one client at a time, from this test's own process: beside a running erase (its VACUUM FULL and
  // read-back of PgVector's tables there) a new connection can wait for its turn longer than PgVector's 2 s default.
  const sdk = (opts: Omit<MastraSdkOptions, 'pg'> = {}) => mastraSdk('', 'resource', { ...opts, pg: { storeUrl, vectorUrl: vec!.url, vectorPool: { connectionTimeoutMillis: 120_000 } } });
  return {
    storeUrl, vectorUrl: vec.url, config, store, env, sdk,
    retention: write,
    async withSdk(fn, opts) {
      const m = await sdk(opts);
      try {
        return await fn(m);
      } finally {
        await m.close();
      }
    },
    async init() {
      const r = await cliAsync(['init', ...store, '--json'], env);
      if (r.code !== 0) throw new Error(`memory-warden init: exit ${r.code}: ${r.stderr}`);
    },
    async stop() {
      await vec!.stop();
      await db?.drop();
      tmp.cleanup();
    },
  };
}

export async function pgRows(url: string, sql: string, params: unknown[] = []): Promise<any[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query(sql, params)).rows;
  } finally {
    await c.end();
  }
}

/** What of `needles` the relation files of `tables` still hold, read by memory-warden's byte check on that server. */
export async function bytesFound(url: string, tables: readonly string[], needles: readonly string[]): Promise<unknown[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await verifyBytesGone(c, { schema: 'public', tables, needles })).found;
  } finally {
    await c.end();
  }
}

/** A message's text as PostgresStore keeps it (content JSON, format 2). */
export const messageText = (content: string): string => JSON.parse(content).parts.map((p: { text?: string }) => p.text ?? '').join('');
