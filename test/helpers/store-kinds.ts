import Database from 'better-sqlite3';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ENGINE_NAMES, type EngineName } from '../../src/engines/postgres/config.js';
import { ENGINES } from '../../src/engines/registry.js';
import { LAYOUTS, LAYOUTS_ON_POSTGRES } from '../../src/layouts/registry.js';
import type { PostgresStoreHandle } from '../../src/engines/contract.js';
import { storeSchema, type StoreConfig } from '../../src/store/config.js';
import { verifyBytesGone } from '../../src/engines/postgres/bytes.js';
import { toCanonical } from '../../src/time/instants.js';
import { insertRows, makeStore } from './store.js';
import { qdrantTarget, type QdrantTarget } from './qdrant-server.js';
import { createTestDatabase, type TestDatabase } from './pg.js';
import { Mem0Fixture } from '../layouts/mem0-fixture.js';
import { MastraFixture } from '../layouts/mastra-fixture.js';

/**
 * The kinds of store memory-warden keeps: every (engine, layout) pair the config accepts, each with a maker of a real
 * store of that kind, filled the way that kind's writer fills it. The suites that state a promise between features
 * (test/layouts/contract.test.ts, test/engines/contract.test.ts, test/erase/restore-ledger.test.ts,
 * test/erase/copy-kinds.test.ts, test/fleet-elsewhere.test.ts) run over STORE_KINDS, so a pair added to the config
 * without a maker here fails `expectEveryPair` in each of them, and a maker added here runs in all of them.
 * PostgreSQL stores live in a database of the native server made for the store and dropped by close().
 */
export type LayoutName = StoreConfig['layout'];
export type KindName = `${EngineName}×${LayoutName}`;

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
  make(dir: string, opts: KindOptions): Promise<KindStore>;
}

function sqliteBase(kind: KindName, store: Record<string, unknown>) {
  const [engine, layout] = kind.split('×') as [EngineName, LayoutName];
  return { kind, engine, layout, store, fileStore: store, env: {}, restoreFlags: [] as string[] };
}

/**
 * One entry per pair the config accepts. Not here because the config refuses them (src/store/config.ts, "does not
 * run on PostgreSQL yet"): postgres×mem0 and postgres×mastra; each is one entry here once its layout runs there.
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
    engine: 'sqlite', layout: 'mem0', qdrant: true,
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
    async make(_dir, { now }) {
      const db: TestDatabase = await createTestDatabase('store_kind');
      const schema = 'agent_memory';
      const urlVar = `MW_TEST_PG_URL_${process.pid}_${++pgVars}`;
      const store = { engine: 'postgres', postgres: { url: db.url, schema } };
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
        await db.drop();
        throw err;
      }
      let n = 0;
      const at = (ms: number) => new Date(ms).toISOString();
      const dump = async () => (await db.client.query<{ t: string | null }>(
        `SELECT string_agg(m::text, E'\\n' ORDER BY id) AS t FROM "${schema}".memory m`)).rows[0]!.t ?? '';
      return {
        kind: 'postgres×warden', engine: 'postgres', layout: 'warden',
        store, fileStore: { engine: 'postgres', postgres: { url: `\${${urlVar}}`, schema } }, env: { [urlVar]: db.url },
        async add(m) {
          const id = `m${++n}`;
          const expires = m.expired ? at(now - DAY) : m.expiresInDays ? at(now + m.expiresInDays * DAY) : null;
          await db.client.query(`INSERT INTO "${schema}".memory (id, subject, fact, source, created_at, confirmed_at, expires_at) VALUES ($1, $2, $3, 'message:1', $4, $4, $5)`,
            [id, m.user, m.text, at(m.at), expires]);
          return id;
        },
        dump,
        async holds(text) {
          if ((await dump()).includes(text)) return true;
          return (await verifyBytesGone(db.client, { schema, tables: ['memory'], needles: [text] })).verdict !== 'clean';
        },
        settle() {},
        restoreFlags: [],
        close: () => db.drop(),
      };
    },
  },
};

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

/** What every suite checks first: its kinds and its gaps together are exactly the pairs the config accepts. */
export function expectEveryPair(suite: string): void {
  const covered = [...new Set([...kindsFor(suite), ...Object.keys(GAPS[suite] ?? {})])].sort();
  if (JSON.stringify(covered) !== JSON.stringify(pairsTheConfigAccepts())) {
    throw new Error(`${suite}: the store kinds (test/helpers/store-kinds.ts) and this suite's gaps are ${covered.join(', ')}; the config accepts ${pairsTheConfigAccepts().join(', ')}`);
  }
  for (const k of KIND_NAMES) if (STORE_KINDS[k]!.engine === 'postgres' && !(STORE_KINDS[k]!.layout in LAYOUTS_ON_POSTGRES)) throw new Error(`${k}: no PostgreSQL code registered for the layout`);
}

/**
 * Every (engine, layout) pair the config accepts, read from the config schema itself over the registered engines and
 * layouts (a store of each pair, as small as the config allows). Each suite checks STORE_KINDS against it.
 */
export function pairsTheConfigAccepts(): KindName[] {
  const out: KindName[] = [];
  for (const engine of ENGINE_NAMES) {
    if (!(engine in ENGINES)) continue;
    for (const layout of Object.keys(LAYOUTS) as LayoutName[]) {
      const store = engine === 'sqlite' ? { engine, layout, db: '/srv/agent/memory.db' } : { engine, layout, postgres: { url: '${PG_URL}', schema: 'agent' } };
      if (storeSchema.safeParse(store).success) out.push(`${engine}×${layout}`);
    }
  }
  return out.sort();
}

/** A store of `kind` in `dir` (a PostgreSQL one in a database of its own). */
export function makeKind(kind: KindName, dir: string, opts: KindOptions): Promise<KindStore> {
  const maker = STORE_KINDS[kind];
  if (!maker) throw new Error(`no store kind ${kind} in test/helpers/store-kinds.ts`);
  return maker.make(dir, opts);
}
