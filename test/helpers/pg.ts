import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { PGlite } from '@electric-sql/pglite';
import { vector } from '@electric-sql/pglite-pgvector';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import { freePort } from './redis.js';

/**
 * PostgreSQL for the tests, two kinds:
 * - the native server (Debian's PostgreSQL, 127.0.0.1:5432, trust auth; scripts/test-services.sh starts it, or
 *   PG_TEST_URL names another): `createTestDatabase()` makes a database of its own for one test and drops it after.
 *   Concurrency (agents writing beside prune, two workers) is proven here: it runs a backend per connection.
 * - PGlite (PostgreSQL 18 in WASM) with pgvector, served over the wire protocol to the ordinary `pg` client:
 *   `startPgvectorServer()`, one server per store (its session state is shared by every client and it has one
 *   backend: clients queue, an open transaction makes the others wait; database and user names are ignored).
 */
export interface TestDatabase {
  /** postgres:// URL of the database, for the config's environment variable. */
  url: string;
  name: string;
  /** A client on the database for set-up and assertions; closed by drop(). */
  client: pg.Client;
  drop(): Promise<void>;
}

/** The server's URL without a database: PG_TEST_URL, else the native server on loopback as the postgres user. */
export function serverUrl(): string {
  return process.env.PG_TEST_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
}

function withDatabase(url: string, db: string): string {
  const u = new URL(url);
  u.pathname = `/${db}`;
  return u.toString();
}

/** A fresh database on the native server, named for the test; drop() terminates its connections and drops it. */
export async function createTestDatabase(label = 'mw'): Promise<TestDatabase> {
  const name = `${label.replace(/[^a-z0-9_]/gi, '_').toLowerCase()}_${randomBytes(5).toString('hex')}`;
  const admin = new pg.Client({ connectionString: serverUrl() });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  const url = withDatabase(serverUrl(), name);
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  return {
    url,
    name,
    client,
    async drop() {
      await client.end().catch(() => {});
      const a = new pg.Client({ connectionString: serverUrl() });
      await a.connect();
      try {
        await a.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      } finally {
        await a.end();
      }
    },
  };
}

export interface PgvectorServer {
  /** postgres:// URL the `pg` client (and the SDKs) connect to; the database name in it is ignored by PGlite. */
  url: string;
  port: number;
  /** The PGlite instance itself, for assertions that must not queue behind a client's transaction. */
  db: PGlite;
  stop(): Promise<void>;
}

/** Where the fresh cluster is kept: in this install's node_modules, named by the versions that made it. */
const CLUSTER_CACHE = resolve(import.meta.dirname, '../../node_modules/.cache/memory-warden-tests');
let cluster: Promise<Blob> | undefined;

/**
 * The data folder of a fresh PGlite cluster with pgvector installed, as a tarball: made once per install (initdb in
 * WASM costs seconds; loading this costs one), written under a temporary name and renamed, so processes starting
 * together each see none or all of it. Every in-memory server starts from it: an empty cluster, nothing shared.
 */
function freshCluster(): Promise<Blob> {
  return (cluster ??= (async () => {
    const versions = ['pglite', 'pglite-pgvector'].map((p) => (JSON.parse(readFileSync(resolve(import.meta.dirname, `../../node_modules/@electric-sql/${p}/package.json`), 'utf8')) as { version: string }).version);
    const file = join(CLUSTER_CACHE, `pglite-${versions.join('-')}-vector.tar`);
    if (existsSync(file)) return new Blob([readFileSync(file)]);
    const db = await PGlite.create({ extensions: { vector } });
    await db.exec('CREATE EXTENSION IF NOT EXISTS vector');
    const tar = await db.dumpDataDir('none');
    await db.close();
    mkdirSync(CLUSTER_CACHE, { recursive: true });
    const part = `${file}.${process.pid}-${randomBytes(4).toString('hex')}`;
    writeFileSync(part, Buffer.from(await tar.arrayBuffer()));
    renameSync(part, file);
    return tar;
  })());
}

/**
 * pglite-socket 0.2 queues each protocol message of each client on its own, and keeps one client's messages together
 * only inside a transaction: outside one, another client's Parse can replace a client's unnamed statement between its
 * Parse and its Bind ("unnamed prepared statement does not exist"), which a server with a backend per connection
 * never does. The server's queue is told it is "in a transaction" from a client's first extended-protocol message to
 * its Sync, so that it takes that client's messages next, as it does inside a transaction.
 */
function keepExtendedQueriesWhole(server: PGLiteSocketServer, db: PGlite): void {
  const queue = (server as unknown as { queryQueue: { db: PGlite } }).queryQueue;
  let midQuery = false;
  const extended = new Set(['P', 'B', 'D', 'E', 'C', 'H'].map((c) => c.charCodeAt(0)));
  queue.db = new Proxy(db, {
    get(target, key) {
      if (key === 'isInTransaction') return () => midQuery || target.isInTransaction();
      // The queue's ROLLBACK for a client that left mid-sequence: no Sync of it will come.
      if (key === 'exec') return (sql: string) => ((midQuery = false), target.exec(sql));
      if (key === 'execProtocolRawStream') {
        return (message: Uint8Array, o: unknown) => {
          midQuery = extended.has(message[0]!);
          return (target.execProtocolRawStream as (m: Uint8Array, o: unknown) => Promise<unknown>)(message, o);
        };
      }
      const v = Reflect.get(target, key, target);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

/**
 * PGlite with pgvector (`CREATE EXTENSION vector` already run) on a free loopback port, in memory or in `dataDir`.
 * One per store: session state (search_path, extensions) is shared by every client of it.
 */
export async function startPgvectorServer(opts: { dataDir?: string; maxConnections?: number } = {}): Promise<PgvectorServer> {
  const db = await PGlite.create({ ...(opts.dataDir ? { dataDir: opts.dataDir } : { loadDataDir: await freshCluster() }), extensions: { vector } });
  await db.exec('CREATE EXTENSION IF NOT EXISTS vector');
  const port = await freePort();
  const server = new PGLiteSocketServer({ db, port, host: '127.0.0.1', maxConnections: opts.maxConnections ?? 16 });
  keepExtendedQueriesWhole(server, db);
  await server.start();
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    db,
    async stop() {
      await server.stop().catch(() => {});
      await db.close().catch(() => {});
    },
  };
}
