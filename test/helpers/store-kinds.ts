import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ENGINE_NAMES, type EngineName } from '../../src/engines/postgres/config.js';
import { ENGINES } from '../../src/engines/registry.js';
import { LAYOUTS, LAYOUTS_ON_POSTGRES } from '../../src/layouts/registry.js';
import type { PostgresStoreHandle } from '../../src/engines/contract.js';
import { storeSchema, type StoreConfig } from '../../src/store/config.js';
import { verifyBytesGone } from '../../src/engines/postgres/bytes.js';
import { toCanonical } from '../../src/time/instants.js';
import { insertRows, makeStore } from './store.js';
import { qdrantTarget, vectorFor, VECTOR_SIZE, type QdrantTarget } from './qdrant-server.js';
import pg from 'pg';
import { createTestDatabase, startPgvectorServer, type TestDatabase } from './pg.js';
import { Mem0Fixture } from '../layouts/mem0-fixture.js';
import { MastraFixture } from '../layouts/mastra-fixture.js';
import { sdkStore } from '../layouts/mem0-sdk.js';

/**
 * The kinds of store memory-warden keeps: every (engine, layout) pair the config accepts, each with a maker of a real
 * store of that kind, filled the way that kind's writer fills it. The suites that state a promise between features
 * (test/layouts/contract/, test/engines/contract.test.ts, test/erase/restore-ledger.test.ts,
 * test/erase/copy-kinds/, test/fleet-elsewhere/) run over STORE_KINDS, so a pair added to the config
 * without a maker here fails `expectEveryPair` in each of them, and a maker added here runs in all of them. A vector
 * store the config accepts on an engine (a `qdrant:` section, `postgres.vectors`, mem0's `vectorStore`:
 * vectorStoresTheConfigAccepts) is a kind's too: `engine×layout+vectors`, or it fails `expectEveryPair` the same way.
 * PostgreSQL stores live in a database of the native server made for the store and dropped by close(), or (pgvector,
 * which Debian's PostgreSQL 15 lacks) on a PGlite server of their own, stopped by close(); so do a mem0 store's
 * pgvector tables.
 */
export type LayoutName = StoreConfig['layout'];
/**
 * Where a kind's vectors are, when the store's own config places them: a `qdrant:` section, or pgvector tables (of a
 * PostgreSQL store's schema, `postgres.vectors`, or mem0's, `mem0.vectorStore: pgvector`). A layout that keeps its
 * vectors in files of its own (mem0's `vectorStore: sqlite`, Mastra's `vectorDb`) is not one of these.
 */
export type VectorStoreName = 'qdrant' | 'pgvector';
/** `engine×layout`, and `engine×layout+vectors` for a second kind of the same pair with its vectors elsewhere. */
export type KindName = `${EngineName}×${LayoutName}` | `${EngineName}×${LayoutName}+${VectorStoreName}`;

/** A memory as the suites describe it; each kind writes it as its own writer would. */
export interface Memory {
  text: string;
  user: string;
  at: number;
  /** Expired a day before `now` (the kind's `now`, given to make). */
  expired?: boolean;
  /** Expires this long after `now` (a memory that decays, still live). */
  expiresInDays?: number;
}

export interface KindStore {
  kind: KindName;
  engine: EngineName;
  layout: LayoutName;
  /** The store's entry of a config validated in this process (validateConfig): secrets as values. */
  store: Record<string, unknown>;
  /** The store's entry of a config file the CLI reads: secrets as `${VAR}` references, their values in `env`. */
  fileStore: Record<string, unknown>;
  env: Record<string, string>;
  /** Writes the memory as the kind's writer does; its id (what review, erase --ids and erasedIn name). */
  add(m: Memory): Promise<string>;
  /** Everything the store holds, as text (its rows and vector payloads): equal dumps are equal stores. */
  dump(): Promise<string>;
  /** Whether any byte of the text is left in the store: its files (SQLite), its relation files (PostgreSQL), its vectors. */
  holds(text: string): Promise<boolean>;
  /** Let go of what the writer holds open (snapshots and restores want the files to themselves). */
  settle(): void;
  /** Flags a CLI restore of this kind needs. */
  restoreFlags: string[];
  /** The Qdrant the store's collections are on (kinds with `qdrant: true`). */
  qdrant?: QdrantTarget;
  close(): Promise<void>;
}

export interface KindOptions {
  /** The instant `expired` and `expiresInDays` count from. */
  now: number;
}

const DAY = 86_400_000;
/** Mastra has no expiry: an expired memory is a thread idle past this retention; one that decays, a message past this. */
export const MASTRA_RETENTION = { threadIdleDays: 365, messageDays: 300 };

const fileText = (f: string) => [f, `${f}-wal`].filter((p) => existsSync(p)).map((p) => readFileSync(p).toString('latin1')).join('\n');
const isoDay = (ms: number) => new Date(ms).toISOString().slice(0, 10);

let pgVars = 0;

interface KindMaker {
  engine: EngineName;
  layout: LayoutName;
  /** Whether the store has Qdrant collections beside it. */
  qdrant: boolean;
  /** Where the store's config places its vectors (checked against the store each make returns). */
  vectors?: VectorStoreName;
  /**
   * Why a second connection to the store's server is not another session, when it is not (PGlite runs one backend:
   * a session-level advisory lock taken on one connection is granted again on any other). What only another session
   * shows (the maintenance lock refused to a second holder) is proven on the kinds of the native server.
   */
  oneSession?: string;
  make(dir: string, opts: KindOptions): Promise<KindStore>;
}

function sqliteBase(kind: KindName, store: Record<string, unknown>) {
  const [engine, layout] = pairOf(kind).split('×') as [EngineName, LayoutName];
  return { kind, engine, layout, store, fileStore: store, env: {}, restoreFlags: [] as string[] };
}

const PG_SCHEMA = 'agent_memory';
const PG_VECTORS = 'memory_vectors';

/** What a PostgreSQL warden kind has besides its table: its vectors' place, writer and dump. */
interface PgVectorSide {
  /** Added to the store's entry (its `qdrant:` section). */
  store?: Record<string, unknown>;
  /** Added to the config file's entry, secrets as references into `env`. */
  fileStore?: Record<string, unknown>;
  env?: Record<string, string>;
  /** Added to the store's `postgres:` section (its `vectors`). */
  postgres?: Record<string, unknown>;
  /** Vector tables of the schema, read with `memory` by the byte check. */
  vectorTables?: string[];
  qdrant?: QdrantTarget;
  /** Writes the memory's vector, after its row (in the row's transaction when `inOneTransaction`). */
  write(id: string, m: Memory): Promise<void>;
  inOneTransaction?: boolean;
  dump(): Promise<string>;
  close?(): Promise<void>;
}

/**
 * A warden store on PostgreSQL in `db` (dropped by close()): the schema made by the layout's init as `memory-warden
 * init` makes it, memories written over the test's own connection, as an agent's, each with its vector when the kind
 * has a vector side.
 */
async function pgWarden(kind: KindName, db: TestDatabase, { now }: KindOptions, vectors?: PgVectorSide): Promise<KindStore> {
  const schema = PG_SCHEMA;
  const urlVar = `MW_TEST_PG_URL_${process.pid}_${++pgVars}`;
  const postgres = { schema, ...vectors?.postgres };
  const store = { engine: 'postgres', postgres: { url: db.url, ...postgres }, ...vectors?.store };
  const close = async () => {
    try {
      await vectors?.close?.();
    } finally {
      await db.drop();
    }
  };
  try {
    const config = storeSchema.parse(store);
    const engine = await ENGINES.postgres();
    const handle = (await engine.open('s', config, {})) as PostgresStoreHandle;
    try {
      await (await LAYOUTS_ON_POSTGRES.warden!()).init(handle);
    } finally {
      await handle.close();
    }
  } catch (err) {
    await close();
    throw err;
  }
  let n = 0;
  const at = (ms: number) => new Date(ms).toISOString();
  const rows = async () => (await db.client.query<{ t: string | null }>(
    `SELECT string_agg(m::text, E'\\n' ORDER BY id) AS t FROM "${schema}".memory m`)).rows[0]!.t ?? '';
  const dump = async () => (vectors ? `${await rows()}\n${await vectors.dump()}` : rows());
  return {
    kind, engine: 'postgres', layout: 'warden',
    store, fileStore: { engine: 'postgres', postgres: { url: `\${${urlVar}}`, ...postgres }, ...(vectors?.fileStore ?? vectors?.store) },
    env: { [urlVar]: db.url, ...vectors?.env },
    async add(m) {
      const id = `m${++n}`;
      const expires = m.expired ? at(now - DAY) : m.expiresInDays ? at(now + m.expiresInDays * DAY) : null;
      const one = vectors?.inOneTransaction === true;
      if (one) await db.client.query('BEGIN');
      try {
        await db.client.query(`INSERT INTO "${schema}".memory (id, subject, fact, source, created_at, confirmed_at, expires_at) VALUES ($1, $2, $3, 'message:1', $4, $4, $5)`,
          [id, m.user, m.text, at(m.at), expires]);
        if (one) await vectors!.write(id, m);
        if (one) await db.client.query('COMMIT');
      } catch (err) {
        if (one) await db.client.query('ROLLBACK').catch(() => {});
        throw err;
      }
      if (vectors && !one) await vectors.write(id, m);
      return id;
    },
    dump,
    async holds(text) {
      if ((await dump()).includes(text)) return true;
      return (await verifyBytesGone(db.client, { schema, tables: ['memory', ...(vectors?.vectorTables ?? [])], needles: [text] })).verdict !== 'clean';
    },
    settle() {},
    restoreFlags: [],
    ...(vectors?.qdrant ? { qdrant: vectors.qdrant } : {}),
    close,
  };
}

/**
 * One entry per pair the config accepts, and one per vector store the config accepts on an engine. Not here because
 * the config refuses it (src/store/config.ts, "does not run on PostgreSQL yet"): postgres×mem0; it is one entry here
 * once its layout runs there.
 */
export const STORE_KINDS: Partial<Record<KindName, KindMaker>> = {
  'sqlite×warden': {
    engine: 'sqlite', layout: 'warden', qdrant: false,
    async make(dir, { now }) {
      const db = makeStore(join(dir, 'agent.db'));
      let n = 0;
      const dump = async () => fileText(db);
      return {
        ...sqliteBase('sqlite×warden', { db }),
        async add(m) {
          const id = `m${++n}`;
          const at = toCanonical(m.at);
          const d = new Database(db);
          insertRows(d, [{ id, subject: m.user, fact: m.text, source: 'message:1', created_at: at, confirmed_at: at, expires_at: m.expired ? toCanonical(now - DAY) : m.expiresInDays ? toCanonical(now + m.expiresInDays * DAY) : null }]);
          d.close();
          return id;
        },
        dump,
        holds: async (text) => (await dump()).includes(text),
        settle() {},
        async close() {},
      };
    },
  },

  'sqlite×mem0': {
    engine: 'sqlite', layout: 'mem0', qdrant: true, vectors: 'qdrant',
    async make(dir, { now }) {
      const q: QdrantTarget = await qdrantTarget();
      const first = await Mem0Fixture.create(q, dir);
      let fx: Mem0Fixture | undefined = first;
      const writer = () => (fx ??= new Mem0Fixture(q, first.historyPath, first.collection, first.entities));
      const settle = () => {
        fx?.close();
        fx = undefined;
      };
      const store = {
        layout: 'mem0', db: first.historyPath,
        qdrant: { url: q.url, ...(q.apiKey ? { apiKey: q.apiKey } : {}), collections: [first.collection, first.entities] },
        mem0: { collection: first.collection, entityCollection: first.entities, pageSize: 3 },
      };
      // The writer let go after: what is dumped is what a restore or an erase left, read afresh.
      const dump = async () => {
        const w = writer();
        try {
          return [fileText(first.historyPath), JSON.stringify(await w.points()), JSON.stringify(await w.entityPoints())].join('\n');
        } finally {
          settle();
        }
      };
      return {
        ...sqliteBase('sqlite×mem0', store),
        add: (m) => {
          const expiry = m.expired ? isoDay(now - 2 * DAY) : m.expiresInDays ? isoDay(now + m.expiresInDays * DAY) : undefined;
          return writer().add(m.text, { user_id: m.user, at: m.at, ...(expiry ? { metadata: { expiration_date: expiry } } : {}) });
        },
        dump,
        holds: async (text) => (await dump()).includes(text),
        settle,
        qdrant: q,
        async close() {
          settle();
          q.assertConforms();
          await q.close();
        },
      };
    },
  },

  // mem0's store with its vectors in pgvector (`mem0.vectorStore: pgvector`: tables `memories` and `memories_entities`
  // in `public`), its history in the SDK's SQLite file, on a PGlite server of its own. Each memory is written by
  // mem0ai's own SDK (`infer: false`, its expiry as the SDK's `expirationDate`); the SDK stamps the clock's time, so
  // its creation time `at` is then set where the SDK put the clock's: the payload's `createdAt` and the ADD history
  // row's `created_at` (nothing else of the row changes).
  'sqlite×mem0+pgvector': {
    engine: 'sqlite', layout: 'mem0', qdrant: false, vectors: 'pgvector',
    async make(dir, { now }) {
      const server = await startPgvectorServer();
      const client = new pg.Client({ connectionString: server.url });
      const urlVar = `MW_TEST_MEM0_PG_URL_${process.pid}_${++pgVars}`;
      let s: Awaited<ReturnType<typeof sdkStore>>;
      let m: any;
      try {
        await client.connect();
        s = await sdkStore('pgvector', dir, undefined, server.url);
        m = await s.open(); // the SDK makes both its tables
        await (await m.getEntityStore()).list({}, 1);
      } catch (err) {
        await client.end().catch(() => {});
        await server.stop();
        throw err;
      }
      const writer = async () => (m ??= await s.open());
      const settle = () => {
        if (m) s.close(m);
        m = undefined;
      };
      const mem0 = (url: string) => ({ vectorStore: 'pgvector', pgvector: { url }, pageSize: 3 });
      const store = { layout: 'mem0', db: s.historyPath, mem0: mem0(server.url) };
      const tables = [s.collection, s.entityCollection];
      const dump = async () => [fileText(s.historyPath), ...await Promise.all(tables.map(async (t) => (await client.query<{ t: string | null }>(
        `SELECT string_agg(id::text || ' ' || payload::text, E'\\n' ORDER BY id) AS t FROM ${t}`)).rows[0]!.t ?? ''))].join('\n');
      return {
        ...sqliteBase('sqlite×mem0+pgvector', store),
        fileStore: { ...store, mem0: mem0(`\${${urlVar}}`) },
        env: { [urlVar]: server.url },
        async add(mem) {
          const expiry = mem.expired ? isoDay(now - 2 * DAY) : mem.expiresInDays ? isoDay(now + mem.expiresInDays * DAY) : undefined;
          const w = await writer();
          const id = (await w.add(mem.text, { userId: mem.user, infer: false, ...(expiry ? { expirationDate: expiry } : {}) })).results[0].id as string;
          const at = new Date(mem.at).toISOString();
          await client.query(`UPDATE ${s.collection} SET payload = jsonb_set(payload, '{createdAt}', to_jsonb($2::text)) WHERE id = $1`, [id, at]);
          const h = new Database(s.historyPath);
          try {
            h.prepare(`UPDATE memory_history SET created_at = ? WHERE memory_id = ? AND action = 'ADD'`).run(at, id);
          } finally {
            h.close();
          }
          return id;
        },
        dump,
        async holds(text) {
          if ((await dump()).includes(text)) return true;
          return (await verifyBytesGone(client, { schema: 'public', tables, needles: [text] })).verdict !== 'clean';
        },
        settle,
        async close() {
          settle();
          await client.end().catch(() => {});
          await server.stop();
        },
      };
    },
  },

  // A memory is a thread's working memory (Mastra's `scope: thread`), with one message of it and its embedding; an
  // expired one is a thread idle past the configured retention. One that decays is a message without working memory
  // (what drifts is working memory, reviewed; what decays is conversation, which message retention ends).
  'sqlite×mastra': {
    engine: 'sqlite', layout: 'mastra', qdrant: false,
    async make(dir, { now }) {
      const db = join(dir, 'mastra.db');
      let fx: MastraFixture | undefined = MastraFixture.create(db);
      const { threadIdleDays, messageDays } = MASTRA_RETENTION;
      const writer = () => (fx ??= new MastraFixture(db));
      const dump = async () => fileText(db);
      return {
        ...sqliteBase('sqlite×mastra', { layout: 'mastra', db, mastra: { retention: MASTRA_RETENTION } }),
        add: async (m) => (m.expiresInDays !== undefined
          ? writer().conversation(m.user, m.text, now + (m.expiresInDays - messageDays) * DAY)
          : writer().thread(m.user, m.text, m.at, m.expired ? now - (threadIdleDays + 1) * DAY : m.at)),
        dump,
        holds: async (text) => (await dump()).includes(text),
        settle() {
          fx?.close();
          fx = undefined;
        },
        // libsql's driver in this test process keeps the file open after close (a restore's /proc check sees it).
        restoreFlags: ['--force'],
        async close() {
          fx?.close();
          fx = undefined;
        },
      };
    },
  },

  // The warden table in a schema of a database of its own on the native server, made by the layout's init as
  // `memory-warden init` makes it; memories written over the test's own connection, as an agent's.
  'postgres×warden': {
    engine: 'postgres', layout: 'warden', qdrant: false,
    async make(_dir, opts) {
      return pgWarden('postgres×warden', await createTestDatabase('store_kind'), opts);
    },
  },

  // The same, with a Qdrant collection beside it (the `qdrant:` section, as beside a SQLite file): each memory's
  // point written after its row, as an agent's SDK writes it (a point id of its own, the row named in the payload).
  'postgres×warden+qdrant': {
    engine: 'postgres', layout: 'warden', qdrant: true, vectors: 'qdrant',
    async make(_dir, opts) {
      const q = await qdrantTarget();
      const collection = q.name('agent_memory');
      let point = 0;
      try {
        await q.createCollection(collection);
        const db = await createTestDatabase('store_kind_q');
        const keyVar = `MW_TEST_QDRANT_KEY_${process.pid}_${++pgVars}`;
        const qdrant = { url: q.url, collections: [collection], textKey: 'text' };
        return await pgWarden('postgres×warden+qdrant', db, opts, {
          store: { qdrant: { ...qdrant, ...(q.apiKey ? { apiKey: q.apiKey } : {}) } },
          fileStore: { qdrant: { ...qdrant, ...(q.apiKey ? { apiKey: `\${${keyVar}}` } : {}) } },
          env: q.apiKey ? { [keyVar]: q.apiKey } : {},
          qdrant: q,
          write: (id, m) => q.upsert(collection, [{ id: ++point, vector: vectorFor(m.text), payload: { memory_id: id, text: m.text, user_id: m.user } }]),
          dump: async () => JSON.stringify((await q.points(collection)).map((p) => [p.id, p.payload]).sort()),
          async close() {
            try {
              q.assertConforms();
            } finally {
              await q.close();
            }
          },
        });
      } catch (err) {
        await q.close();
        throw err;
      }
    },
  },

  // The same, with its vectors in a pgvector table of its schema (`postgres.vectors`), on PGlite (the native server
  // has no pgvector): one PGlite server per store. The table is the agent's (init never makes one), keyed by the
  // memory's id, the fact repeated in the payload; each memory's vector written in the row's transaction.
  'postgres×warden+pgvector': {
    engine: 'postgres', layout: 'warden', qdrant: false, vectors: 'pgvector',
    oneSession: 'PGlite (pgvector) runs one backend: every connection is the same session',
    async make(_dir, opts) {
      const server = await startPgvectorServer();
      const client = new pg.Client({ connectionString: server.url });
      try {
        await client.connect();
        await client.query(`CREATE SCHEMA ${PG_SCHEMA}`);
        await client.query(`CREATE TABLE ${PG_SCHEMA}.${PG_VECTORS} (id text PRIMARY KEY, vector vector(${VECTOR_SIZE}), payload jsonb)`);
      } catch (err) {
        await client.end().catch(() => {});
        await server.stop();
        throw err;
      }
      const db: TestDatabase = {
        url: server.url, name: 'pglite', client,
        async drop() {
          await client.end().catch(() => {});
          await server.stop();
        },
      };
      return pgWarden('postgres×warden+pgvector', db, opts, {
        postgres: { vectors: { tables: [PG_VECTORS], textKey: 'data' } },
        vectorTables: [PG_VECTORS],
        write: async (id, m) => {
          await client.query(`INSERT INTO ${PG_SCHEMA}.${PG_VECTORS} (id, vector, payload) VALUES ($1, $2, $3)`,
            [id, `[${vectorFor(m.text).join(',')}]`, { data: m.text, user_id: m.user }]);
        },
        inOneTransaction: true,
        dump: async () => (await client.query<{ t: string | null }>(
          `SELECT string_agg(id || ' ' || payload::text, E'\\n' ORDER BY id) AS t FROM ${PG_SCHEMA}.${PG_VECTORS}`)).rows[0]!.t ?? '',
      });
    },
  },

  // Mastra's memory as @mastra/pg's PostgresStore writes it (its tables and columns, times as UTC wall-clock
  // `timestamp` with their `timestamptz` mirrors), in a database of its own on the native server, which has no
  // pgvector: PgVector would be elsewhere, so the kind has no vector tables (test/layouts/mastra-pg.node24.test.ts
  // runs the SDK itself, with PgVector). A memory is a thread's working memory with one message of it, as the libsql kind's.
  'postgres×mastra': {
    engine: 'postgres', layout: 'mastra', qdrant: false,
    async make(_dir, { now }) {
      const db: TestDatabase = await createTestDatabase('store_kind_mastra');
      const schema = 'public';
      const urlVar = `MW_TEST_PG_URL_${process.pid}_${++pgVars}`;
      const store = { engine: 'postgres', layout: 'mastra', postgres: { url: db.url, schema }, mastra: { retention: MASTRA_RETENTION } };
      const { threadIdleDays, messageDays } = MASTRA_RETENTION;
      try {
        for (const sql of MASTRA_PG_DDL) await db.client.query(sql);
        const handle = (await (await ENGINES.postgres()).open('s', storeSchema.parse(store), {})) as PostgresStoreHandle;
        try {
          await (await LAYOUTS_ON_POSTGRES.mastra!()).init(handle);
        } finally {
          await handle.close();
        }
      } catch (err) {
        await db.drop();
        throw err;
      }
      const iso = (ms: number) => new Date(ms).toISOString();
      const thread = async (resource: string, text: string, at: number, updatedAt: number, workingMemory: boolean) => {
        const id = randomUUID();
        const message = randomUUID();
        await db.client.query(`INSERT INTO mastra_threads (id, "resourceId", title, metadata, "createdAt", "updatedAt", "createdAtZ", "updatedAtZ") VALUES ($1, $2, $3, $4, $5::text::timestamp, $6::text::timestamp, $5::text::timestamptz, $6::text::timestamptz)`,
          [id, resource, `thread of ${resource}`, JSON.stringify(workingMemory ? { workingMemory: text } : {}), iso(at), iso(updatedAt)]);
        await db.client.query(`INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId", "createdAtZ") VALUES ($1, $2, $3, 'user', 'v2', $4::text::timestamp, $5, $4::text::timestamptz)`,
          [message, id, JSON.stringify({ format: 2, parts: [{ type: 'text', text }] }), iso(at), resource]);
        return { id, message };
      };
      const dump = async () => (await db.client.query<{ t: string | null }>(
        `SELECT concat_ws(E'\\n', (SELECT string_agg(t::text, E'\\n' ORDER BY id) FROM mastra_threads t), (SELECT string_agg(m::text, E'\\n' ORDER BY id) FROM mastra_messages m),
           (SELECT string_agg(r::text, E'\\n' ORDER BY id) FROM mastra_resources r)) AS t`)).rows[0]!.t ?? '';
      return {
        kind: 'postgres×mastra', engine: 'postgres', layout: 'mastra',
        store, fileStore: { ...store, postgres: { url: `\${${urlVar}}`, schema } }, env: { [urlVar]: db.url },
        add: async (m) => (m.expiresInDays !== undefined
          ? (await thread(m.user, m.text, now + (m.expiresInDays - messageDays) * DAY, now + (m.expiresInDays - messageDays) * DAY, false)).message
          : (await thread(m.user, m.text, m.at, m.expired ? now - (threadIdleDays + 1) * DAY : m.at, true)).id),
        dump,
        async holds(text) {
          if ((await dump()).includes(text)) return true;
          return (await verifyBytesGone(db.client, { schema, tables: ['mastra_threads', 'mastra_messages', 'mastra_resources'], needles: [text] })).verdict !== 'clean';
        },
        settle() {},
        restoreFlags: [],
        close: () => db.drop(),
      };
    },
  },
};

/** The tables of @mastra/pg 1.27.1's PostgresStore a memory store needs, as it creates them (read from a store it made). */
const MASTRA_PG_DDL = [
  `CREATE TABLE mastra_threads (id text NOT NULL PRIMARY KEY, "resourceId" text NOT NULL, title text NOT NULL, metadata jsonb, "createdAt" timestamp NOT NULL, "updatedAt" timestamp NOT NULL, "createdAtZ" timestamptz DEFAULT now(), "updatedAtZ" timestamptz DEFAULT now())`,
  `CREATE INDEX mastra_threads_resourceid_createdat_idx ON mastra_threads ("resourceId", "createdAt" DESC)`,
  `CREATE TABLE mastra_messages (id text NOT NULL PRIMARY KEY, thread_id text NOT NULL, content text NOT NULL, role text NOT NULL, type text NOT NULL, "createdAt" timestamp NOT NULL, "resourceId" text, "createdAtZ" timestamptz DEFAULT now())`,
  `CREATE INDEX mastra_messages_thread_id_createdat_idx ON mastra_messages (thread_id, "createdAt" DESC)`,
  `CREATE TABLE mastra_resources (id text NOT NULL PRIMARY KEY, "workingMemory" text, metadata jsonb, "createdAt" timestamp NOT NULL, "updatedAt" timestamp NOT NULL, "createdAtZ" timestamptz DEFAULT now(), "updatedAtZ" timestamptz DEFAULT now())`,
];

export const KIND_NAMES = Object.keys(STORE_KINDS) as KindName[];

/**
 * The pairs a suite leaves out, each with the product gap that fails it there (a kind is left out of one suite, never
 * skipped in it). `MW_TEST_GAPS=1` runs a suite over them too: each fails until its gap is closed, and is then
 * removed from here.
 */
export const GAPS: Record<string, Partial<Record<KindName, string>>> = {};

/** The kinds `suite` runs over: every registered kind but its gaps (all of them with MW_TEST_GAPS=1). */
export function kindsFor(suite: string): KindName[] {
  const gaps = GAPS[suite] ?? {};
  return process.env.MW_TEST_GAPS === '1' ? KIND_NAMES : KIND_NAMES.filter((k) => !(k in gaps));
}

/**
 * A suite over the kinds too long for one file is a folder: its body in suite.ts, run by shard-1.test.ts …
 * shard-N.test.ts (files alike, each running its part beside the others). `shardOf(import.meta.url, N)` is the part
 * a shard file runs; `expectShards` (run by shard 1) fails unless the folder holds exactly those N files, so a kind
 * cannot drop out with a file.
 */
export interface Shard {
  /** 1 … of */
  index: number;
  of: number;
  /** The suite's folder. */
  dir: string;
}

export function shardOf(fileUrl: string, of: number): Shard {
  const file = fileURLToPath(fileUrl);
  const m = /^shard-(\d+)\.test\.ts$/.exec(basename(file));
  if (!m || Number(m[1]) < 1 || Number(m[1]) > of) throw new Error(`${file}: a shard file is named shard-<1…${of}>.test.ts`);
  return { index: Number(m[1]), of, dir: dirname(file) };
}

/** The kinds one shard of a suite runs: kinds dealt out to the shards back and forth (1…N, N…1, …), each to one. */
export function kindsOfShard(suite: string, shard: Shard): KindName[] {
  return kindsFor(suite).filter((_, i) => {
    const pos = i % shard.of;
    return (Math.floor(i / shard.of) % 2 === 0 ? pos : shard.of - 1 - pos) === shard.index - 1;
  });
}

/** The suite's folder holds shard-1.test.ts … shard-N.test.ts and no other shard. */
export function expectShards(shard: Shard): void {
  const found = readdirSync(shard.dir).filter((f) => /^shard-.*\.test\.ts$/.test(f)).sort();
  const want = Array.from({ length: shard.of }, (_, i) => `shard-${i + 1}.test.ts`).sort();
  if (JSON.stringify(found) !== JSON.stringify(want)) throw new Error(`${shard.dir}: the suite runs in ${want.join(', ')}; the folder has ${found.join(', ') || 'none'}`);
}

/** The (engine, layout) pair of a kind: its name without the vector store. */
export const pairOf = (kind: KindName) => kind.split('+')[0] as `${EngineName}×${LayoutName}`;

/**
 * What every suite checks first: its kinds and its gaps together are exactly the pairs the config accepts, and for
 * each engine, every vector store the config accepts on it (vectorStoresTheConfigAccepts) is a kind's.
 */
export function expectEveryPair(suite: string): void {
  const kinds = [...new Set([...kindsFor(suite), ...(Object.keys(GAPS[suite] ?? {}) as KindName[])])];
  const covered = [...new Set(kinds.map(pairOf))].sort();
  if (JSON.stringify(covered) !== JSON.stringify(pairsTheConfigAccepts())) {
    throw new Error(`${suite}: the store kinds (test/helpers/store-kinds.ts) and this suite's gaps are ${covered.join(', ')}; the config accepts ${pairsTheConfigAccepts().join(', ')}`);
  }
  const withVectors = [...new Set(kinds.flatMap((k) => (STORE_KINDS[k]?.vectors ? [`${STORE_KINDS[k]!.engine}+${STORE_KINDS[k]!.vectors}`] : [])))].sort();
  const accepted = vectorStoresTheConfigAccepts();
  const missing = accepted.filter((v) => !withVectors.includes(v));
  if (missing.length > 0) {
    throw new Error(`${suite}: the config accepts ${missing.join(', ')} (engine+vector store), and no store kind of test/helpers/store-kinds.ts (nor a gap of this suite) has it: add a maker`);
  }
  for (const k of KIND_NAMES) if (STORE_KINDS[k]!.engine === 'postgres' && !(STORE_KINDS[k]!.layout in LAYOUTS_ON_POSTGRES)) throw new Error(`${k}: no PostgreSQL code registered for the layout`);
}

/**
 * The store's own places for vectors, each as the config writes it into a store of any pair: every place a vector
 * store can be named there (a PostgreSQL store's `postgres.vectors`, a mem0 store's `mem0.vectorStore`), the config
 * deciding which it takes.
 */
const VECTOR_STORE_FIELDS: Record<VectorStoreName, (store: Record<string, any>) => Record<string, unknown>[]> = {
  qdrant: (store) => [{ ...store, qdrant: { url: 'http://127.0.0.1:6333', collections: ['memories'] } }],
  pgvector: (store) => [
    ...(store.postgres ? [{ ...store, postgres: { ...store.postgres, vectors: { tables: ['memory_vectors'] } } }] : []),
    ...(store.layout === 'mem0' ? [{ ...store, mem0: { vectorStore: 'pgvector', pgvector: { url: '${PG_URL}' } } }] : []),
  ],
};

/** Which of the store's vector places a validated store uses. */
function vectorStoreOf(store: StoreConfig): VectorStoreName | undefined {
  if (store.postgres?.vectors) return 'pgvector';
  if (store.layout === 'mem0' && store.mem0?.vectorStore === 'pgvector') return 'pgvector';
  return store.qdrant ? 'qdrant' : undefined;
}

/** The smallest store of a pair the config takes. */
const smallestStore = (engine: EngineName, layout: LayoutName): Record<string, unknown> =>
  (engine === 'sqlite' ? { engine, layout, db: '/srv/agent/memory.db' } : { engine, layout, postgres: { url: '${PG_URL}', schema: 'agent' } });

/**
 * Every `engine+vectors` the config accepts: a vector store (VECTOR_STORE_FIELDS) written into a store of a pair the
 * config accepts, and accepted there, read from the config schema itself.
 */
export function vectorStoresTheConfigAccepts(): string[] {
  const out = new Set<string>();
  for (const pair of pairsTheConfigAccepts()) {
    const [engine, layout] = pair.split('×') as [EngineName, LayoutName];
    for (const [name, places] of Object.entries(VECTOR_STORE_FIELDS)) {
      if (places(smallestStore(engine, layout)).some((store) => storeSchema.safeParse(store).success)) out.add(`${engine}+${name}`);
    }
  }
  return [...out].sort();
}

/**
 * Every (engine, layout) pair the config accepts, read from the config schema itself over the registered engines and
 * layouts (a store of each pair, as small as the config allows). Each suite checks STORE_KINDS against it.
 */
export function pairsTheConfigAccepts(): `${EngineName}×${LayoutName}`[] {
  const out: `${EngineName}×${LayoutName}`[] = [];
  for (const engine of ENGINE_NAMES) {
    if (!(engine in ENGINES)) continue;
    for (const layout of Object.keys(LAYOUTS) as LayoutName[]) {
      if (storeSchema.safeParse(smallestStore(engine, layout)).success) out.push(`${engine}×${layout}`);
    }
  }
  return out.sort();
}

/** A store of `kind` in `dir` (a PostgreSQL one in a database of its own). */
export async function makeKind(kind: KindName, dir: string, opts: KindOptions): Promise<KindStore> {
  const maker = STORE_KINDS[kind];
  if (!maker) throw new Error(`no store kind ${kind} in test/helpers/store-kinds.ts`);
  const made = await maker.make(dir, opts);
  // The kind is what it says: its store's vectors where its entry says they are.
  const vectors = vectorStoreOf(storeSchema.parse(made.store));
  if (vectors !== maker.vectors) {
    await made.close();
    throw new Error(`${kind}: its store's vectors are ${vectors ?? 'nowhere the store config places them'}, its entry says ${maker.vectors ?? 'none'}`);
  }
  return made;
}
