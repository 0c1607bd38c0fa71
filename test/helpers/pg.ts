import { randomBytes } from 'node:crypto';
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

/**
 * PGlite with pgvector (`CREATE EXTENSION vector` already run) on a free loopback port, in memory or in `dataDir`.
 * One per store: session state (search_path, extensions) is shared by every client of it.
 */
export async function startPgvectorServer(opts: { dataDir?: string; maxConnections?: number } = {}): Promise<PgvectorServer> {
  const db = await PGlite.create({ ...(opts.dataDir ? { dataDir: opts.dataDir } : {}), extensions: { vector } });
  await db.exec('CREATE EXTENSION IF NOT EXISTS vector');
  const port = await freePort();
  const server = new PGLiteSocketServer({ db, port, host: '127.0.0.1', maxConnections: opts.maxConnections ?? 16 });
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
