import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ENGINES } from '../../src/engines/registry.js';
import type { AnyStoreHandle, EngineName, StoreEngine } from '../../src/engines/contract.js';
import { storeSchema, type StoreConfig } from '../../src/store/config.js';
import { createTestDatabase, type TestDatabase } from '../helpers/pg.js';
import { makeStore, tempDir } from '../queue/fixtures.js';
import { verifyBytesGone } from '../../src/engines/postgres/bytes.js';

/**
 * The engine contract, kept by every registered engine on a real store of it: a SQLite file made by the schema code,
 * a schema on the native PostgreSQL server. Open, describe, the database's own integrity check, the maintenance
 * lock: held by one holder at a time, refused (transiently) to a second, free again once released; and erase's scrub:
 * a row deleted, no byte of its text is left where the engine's files can be read.
 */
interface World {
  store: StoreConfig;
  describes: string;
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
    await db.client.query(`INSERT INTO fleet.memory SELECT 'l_' || g, 'tools', 'prefers pnpm (' || g || ')', 'message' FROM generate_series(0, 2) g`);
    return {
      store: storeSchema.parse({ engine: 'postgres', postgres: { url: db.url, schema: 'fleet' } }), describes: 'postgres schema fleet', close: () => db.drop(),
      async deleteLive(handle) {
        if (handle.engine !== 'postgres') throw new Error('a PostgreSQL world');
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
  });

  it('the database\'s own check of a sound store says ok', async () => {
    expect((await engine.integrity(handle)).result).toBe('ok');
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
