import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { createHash } from 'node:crypto';
import { ENGINE_REACH, ENGINES } from '../../src/engines/registry.js';
import type { AnyStoreHandle, EngineName, PostgresStoreHandle, SqliteStoreHandle, StoreEngine } from '../../src/engines/contract.js';
import { storeSchema, type StoreConfig } from '../../src/store/config.js';
import { createTestDatabase, type TestDatabase } from '../helpers/pg.js';
import { makeStore, tempDir } from '../queue/fixtures.js';
import { verifyBytesGone } from '../../src/engines/postgres/bytes.js';
import { expectEveryPair, kindsFor, makeKind, STORE_KINDS, type KindStore } from '../helpers/store-kinds.js';
import { tempDir as tempFolder } from '../helpers/store.js';
import { jobsOf } from '../../src/layouts/registry.js';
import { openStoreOnEngine } from '../../src/layouts/open.js';
import { validateConfig, type Config } from '../../src/config/config.js';

/**
 * The engine contract, kept by every registered engine on a real store of it: a SQLite file made by the schema code,
 * a schema on the native PostgreSQL server. Open, describe, the database's own integrity check, the table artifact
 * of an engine that has one (snapshot and restore of a store that is a database), the maintenance lock: held by one
 * holder at a time, refused (transiently) to a second, free again once released; and erase's scrub: a row deleted, no
 * byte of its text is left where the engine's files can be read. What an engine promises of any store of it (its name,
 * its own check, which store a handle reaches, the lock) is kept on every (engine, layout) pair's real store as well
 * (test/helpers/store-kinds.ts), the layout's own tables in it.
 */
interface World {
  store: StoreConfig;
  describes: string;
  /** Adds rows of these ids to the store's memory table (the engines with a table artifact). */
  write(ids: string[]): Promise<void>;
  /** The memory table's rows, as this handle sees them. */
  count(handle: AnyStoreHandle): Promise<number>;
  /** Delete the live rows as an erase's deletes do (on the engine's own connection), returning their texts. */
  deleteLive(handle: AnyStoreHandle): Promise<string[]>;
  /** Whether the store's files (read by the test itself) still hold the text. */
  holds(text: string): Promise<boolean>;
  close(): Promise<void>;
}

const WORLDS: Record<EngineName, () => Promise<World>> = {
  async sqlite() {
    const db = makeStore(join(tempDir('engine-sqlite'), 'memory.db'), { live: 3, expired: 2 });
    return {
      store: storeSchema.parse({ db }), describes: db, close: async () => {},
      write: async () => {},
      count: async (h) => ((h as SqliteStoreHandle).db.prepare('SELECT count(*) AS n FROM memory').get() as { n: number }).n,
      async deleteLive(handle) {
        if (handle.engine === 'postgres') throw new Error('a SQLite world');
        const texts = handle.db.prepare(`SELECT fact FROM memory WHERE expires_at IS NULL`).pluck().all() as string[];
        handle.db.prepare(`DELETE FROM memory WHERE expires_at IS NULL`).run();
        return texts;
      },
      holds: async (text) => [db, `${db}-wal`].some((f) => existsSync(f) && readFileSync(f).includes(Buffer.from(text))),
    };
  },
  async postgres() {
    const db: TestDatabase = await createTestDatabase('engine_contract');
    await db.client.query('CREATE SCHEMA fleet');
    await db.client.query('CREATE TABLE fleet.memory (id text PRIMARY KEY, subject text NOT NULL, fact text NOT NULL, source text NOT NULL)');
    await db.client.query(`CREATE EXTENSION IF NOT EXISTS amcheck`);
    await db.client.query(`ALTER TABLE fleet.memory ALTER COLUMN id SET STORAGE EXTERNAL, ALTER COLUMN subject SET STORAGE EXTERNAL, ALTER COLUMN fact SET STORAGE EXTERNAL, ALTER COLUMN source SET STORAGE EXTERNAL`);
    return {
      store: storeSchema.parse({ engine: 'postgres', postgres: { url: db.url, schema: 'fleet' } }), describes: 'postgres schema fleet', close: () => db.drop(),
      async write(ids) {
        await db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) SELECT i, 'user', 'fact of ' || i, 'message' FROM unnest($1::text[]) i`, [ids]);
      },
      async count(h) {
        const p = h as PostgresStoreHandle;
        return Number((await p.pg.query<{ n: string }>(`SELECT count(*) AS n FROM ${p.schema}.memory`)).rows[0]!.n);
      },
      async deleteLive(handle) {
        if (handle.engine !== 'postgres') throw new Error('a PostgreSQL world');
        await db.client.query(`INSERT INTO fleet.memory SELECT 'l_' || g, 'tools', 'prefers pnpm (' || g || ')', 'message' FROM generate_series(0, 2) g`);
        return (await handle.pg.query<{ fact: string }>(`DELETE FROM fleet.memory RETURNING fact`)).rows.map((r) => r.fact);
      },
      holds: async (text) => (await verifyBytesGone(db.client, { schema: 'fleet', tables: ['memory'], needles: [text] })).verdict === 'found',
    };
  },
};

it('every registered engine has a world here', () => {
  expect(Object.keys(WORLDS).sort()).toEqual(Object.keys(ENGINES).sort());
});

describe.each(Object.keys(ENGINES) as EngineName[])('the %s engine keeps the engine contract', (name) => {
  let world: World;
  let engine: StoreEngine<AnyStoreHandle>;
  let handle: AnyStoreHandle;
  beforeAll(async () => {
    world = await WORLDS[name]();
    engine = await ENGINES[name]();
    handle = await engine.open('fleet', world.store, {});
  });
  afterAll(async () => {
    await handle?.close();
    await world?.close();
  });

  it('is registered under its own name and names its store', () => {
    expect(engine.name).toBe(name);
    expect(engine.describe(world.store)).toBe(world.describes);
    expect(handle.path).toBe(world.describes);
    expect(['host', 'fleet']).toContain(engine.reach);
    // What the worker routes by without loading the engine says the same.
    expect(ENGINE_REACH[name]).toBe(engine.reach);
    // A store every host reaches claims its scheduled runs in its database; one on a host has its host's state db.
    expect(typeof engine.claimScheduledRun).toBe(engine.reach === 'fleet' ? 'function' : 'undefined');
  });

  it('the database\'s own check of a sound store says ok', async () => {
    expect((await engine.integrity(handle)).result).toBe('ok');
  });

  it('names the store it reaches the same way from every handle, and finds it readable', async () => {
    const other = await engine.open('fleet', world.store, {});
    try {
      const identity = await engine.identity(handle);
      expect(identity).toEqual(expect.any(String));
      expect(await engine.identity(other)).toBe(identity);
    } finally {
      await other.close();
    }
    await engine.assertReadable(handle);
  });

  it('a table artifact, where the engine has one: taken at one instant, checked, read back, restored into the store, stopped before the swap by beforeSwap', async () => {
    const tables = engine.tables;
    if (!tables) {
      // A store that is a file: a snapshot copies the file (src/snapshot/sqlite-copy.ts), nothing of the engine.
      expect(engine.reach).toBe('host');
      return;
    }
    const folder = await mkdtemp(join(tmpdir(), 'mw-engine-tables-'));
    try {
      await world.write(['a', 'b\ttab', 'c\nline']);
      const taken = await tables.take(handle, folder);
      expect(taken.tables).toEqual({ memory: 3 });
      expect(taken.source).toBe(world.describes);
      // What verify reads is what take wrote; the hashes it may give (digests) are those of the files as they lie.
      const { digests, ...verified } = await tables.verify(folder);
      expect(verified).toEqual(taken);
      for (const [f, d] of Object.entries(digests ?? {})) {
        const bytes = readFileSync(join(folder, f));
        expect(d, f).toEqual({ bytes: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex') });
      }
      expect([...tables.values(folder, 'memory', ['id', 'fact'])].map(([id]) => id).sort()).toEqual(['a', 'b\ttab', 'c\nline']);
      expect([...tables.values(folder, 'memory', ['no such column'])]).toEqual([]);
      await world.write(['d']);
      // beforeSwap sees the restored tables, and what it throws leaves the store as it was.
      let seen: unknown;
      await expect(tables.restore(handle, folder, {
        beforeSwap: async (restored) => {
          seen = await world.count(restored);
          throw new Error('stop');
        },
      })).rejects.toThrow('stop');
      expect(seen).toBe(3);
      expect(await world.count(handle)).toBe(4);
      expect((await tables.restore(handle, folder)).tables).toEqual({ memory: 3 });
      expect(await world.count(handle)).toBe(3);
      // A file of the artifact changed: refused, naming it.
      const file = taken.files.find((f) => f !== 'manifest.json')!;
      await writeFile(join(folder, file), 'changed\n', { flag: 'a' });
      await expect(tables.verify(folder)).rejects.toMatchObject({ kind: 'store', message: expect.stringContaining(file) });
      await expect(tables.restore(handle, folder)).rejects.toMatchObject({ kind: 'store' });
      expect(await world.count(handle)).toBe(3);
    } finally {
      await rm(folder, { recursive: true, force: true });
    }
  });

  it('one maintenance lock holder at a time: a second is refused, transiently; released, it is free again', async () => {
    const other = await engine.open('fleet', world.store, {});
    try {
      const lock = await engine.lock(handle, 'first');
      await expect(engine.lock(other, 'second')).rejects.toMatchObject({ kind: 'transient' });
      await lock.release();
      const again = await engine.lock(other, 'second');
      await again.release();
    } finally {
      await other.close();
    }
  });

  it('erase\'s scrub: rows deleted, no byte of their texts is left where the store\'s files are read, and it says what it verified', async () => {
    const texts = await world.deleteLive(handle);
    expect(texts.length).toBeGreaterThan(0);
    const before: boolean[] = [];
    for (const t of texts) before.push(await world.holds(t));
    expect(before.some(Boolean)).toBe(true); // deleted, not yet gone
    const scrub = await engine.scrubErased(handle, { tables: ['memory'], needles: texts });
    expect(scrub.vacuumed).toBe(true);
    for (const t of texts) expect(await world.holds(t)).toBe(false);
    // An engine that reads its files back says so, with what it cannot see; one that does not, says nothing of it.
    if (scrub.bytes) {
      expect(scrub.bytes).toMatchObject({ verdict: 'clean', needles: texts.length, found: [], shared: 0 });
      expect(scrub.bytes.unseen.map((u) => u.what)).toContain('wal');
      expect(scrub.walTruncated).toBe(false);
    } else {
      expect(scrub.walTruncated).toBe(true);
    }
  });
});

describe.each((Object.keys(ENGINES) as EngineName[]).filter((n) => ENGINE_REACH[n] === 'fleet'))('the %s engine claims a scheduled run once across the fleet', (name) => {
  let world: World;
  let engine: StoreEngine<AnyStoreHandle>;
  beforeAll(async () => {
    world = await WORLDS[name]();
    engine = await ENGINES[name]();
  });
  afterAll(async () => {
    await world?.close();
  });
  const claim = (run: string, host: string, pid = 4242) => engine.claimScheduledRun!('fleet', world.store, { scheduledRun: run, job: 'prune', host, pid });

  it('claimed by one, in progress for another while held, done for every later one once ended ok', async () => {
    const first = await claim('prune:fleet:1700000000000', 'box-a');
    if (!('claimed' in first)) throw new Error(`not claimed: ${JSON.stringify(first)}`);
    expect(await claim('prune:fleet:1700000000000', 'box-b', 7)).toEqual({ inProgress: { host: 'box-a', pid: 4242 } });
    // Another run of the same scheduler is another claim.
    const other = await claim('prune:fleet:1700000001000', 'box-b', 7);
    if (!('claimed' in other)) throw new Error(`not claimed: ${JSON.stringify(other)}`);
    await other.claimed.end('ok');
    await first.claimed.end('ok');
    const again = await claim('prune:fleet:1700000000000', 'box-b', 7);
    expect(again).toMatchObject({ alreadyRan: { runId: first.claimed.runId, host: 'box-a' } });
    expect(Number.isFinite(Date.parse((again as { alreadyRan: { finishedAt: string } }).alreadyRan.finishedAt))).toBe(true);
  });

  it('a run that ended failed is claimed again, by any host', async () => {
    const first = await claim('integrity:fleet:1700000000000', 'box-a');
    if (!('claimed' in first)) throw new Error(`not claimed: ${JSON.stringify(first)}`);
    await first.claimed.end('failed');
    const retry = await claim('integrity:fleet:1700000000000', 'box-b', 7);
    if (!('claimed' in retry)) throw new Error(`not claimed: ${JSON.stringify(retry)}`);
    expect(retry.claimed.runId).toBe(first.claimed.runId);
    await retry.claimed.end('ok');
    expect(await claim('integrity:fleet:1700000000000', 'box-a')).toMatchObject({ alreadyRan: { host: 'box-b' } });
  });
});

it('every (engine, layout) pair the config accepts is a kind of store here', () => {
  expectEveryPair('engine-contract');
});

describe.each(kindsFor('engine-contract'))('a %s store keeps what its engine promises of any store of it', { timeout: 300_000 }, (kindName) => {
  const NOW = Date.UTC(2026, 10, 29, 12, 0, 0);
  let tmp: ReturnType<typeof tempFolder>;
  let kind: KindStore;
  let config: Config;
  let store: StoreConfig;
  let engine: StoreEngine<AnyStoreHandle>;
  let handle: AnyStoreHandle;
  beforeAll(async () => {
    tmp = tempFolder('mw-engine-kind-');
    kind = await makeKind(kindName, tmp.dir, { now: NOW });
    await kind.add({ text: 'Ana likes tea', user: 'ana', at: NOW - 86_400_000 });
    await kind.add({ text: 'Ben reads poetry', user: 'ben', at: NOW - 86_400_000 });
    kind.settle();
    config = validateConfig({ stateDb: join(tmp.dir, 'state.db'), stores: { agent: kind.store } });
    store = config.stores.agent!;
    engine = await ENGINES[STORE_KINDS[kindName]!.engine]();
    // Opened as the features open a store (its engine, and the driver its layout's files need: libsql for Mastra's).
    handle = await openStoreOnEngine(config, 'agent');
  });
  afterAll(async () => {
    await handle?.close();
    await kind?.close();
    tmp?.cleanup();
  });

  it('is opened by its engine, named as the engine names its stores, and its layout reads it through that handle', async () => {
    expect(engine.name).toBe(kind.engine);
    expect(handle.path).toBe(engine.describe(store));
    expect(handle.path).toBe(kind.engine === 'postgres' ? `postgres schema ${store.postgres!.schema}` : store.db);
    const jobs = await jobsOf(handle);
    expect(jobs.name).toBe(kind.layout);
    expect((await jobs.reviewDue(handle, { now: NOW, afterDays: 0 })).due).toBe(2);
  });

  it('the database\'s own check of the layout\'s tables says ok, and the store is readable', async () => {
    expect((await engine.integrity(handle)).result).toBe('ok');
    await engine.assertReadable(handle);
  });

  it('every handle names the same store; one maintenance lock holder at a time, refused transiently, free once released', async () => {
    const other = await openStoreOnEngine(config, 'agent');
    try {
      expect(await engine.identity(other)).toBe(await engine.identity(handle));
      // A server of one session grants a session lock to every connection: the lock is the engine's, the same on any
      // of its stores, and proven here on the kinds whose server runs a session per connection.
      const oneSession = STORE_KINDS[kindName]!.oneSession;
      if (oneSession) {
        expect(STORE_KINDS).toSatisfy((kinds: typeof STORE_KINDS) => Object.values(kinds).some((k) => k!.engine === kind.engine && !k!.oneSession));
        return;
      }
      const lock = await engine.lock(handle, 'first');
      await expect(engine.lock(other, 'second')).rejects.toMatchObject({ kind: 'transient' });
      await lock.release();
      await (await engine.lock(other, 'second')).release();
    } finally {
      await other.close();
    }
  });
});
