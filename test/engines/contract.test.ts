import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { ENGINES } from '../../src/engines/registry.js';
import type { AnyStoreHandle, EngineName, StoreEngine } from '../../src/engines/contract.js';
import { storeSchema, type StoreConfig } from '../../src/store/config.js';
import { createTestDatabase, type TestDatabase } from '../helpers/pg.js';
import { makeStore, tempDir } from '../queue/fixtures.js';

/**
 * The engine contract, kept by every registered engine on a real store of it: a SQLite file made by the schema code,
 * a schema on the native PostgreSQL server. Open, describe, the database's own integrity check, and the maintenance
 * lock: held by one holder at a time, refused (transiently) to a second, free again once released.
 */
interface World {
  store: StoreConfig;
  describes: string;
  close(): Promise<void>;
}

const WORLDS: Record<EngineName, () => Promise<World>> = {
  async sqlite() {
    const db = makeStore(join(tempDir('engine-sqlite'), 'memory.db'), { live: 3, expired: 2 });
    return { store: storeSchema.parse({ db }), describes: db, close: async () => {} };
  },
  async postgres() {
    const db: TestDatabase = await createTestDatabase('engine_contract');
    await db.client.query('CREATE SCHEMA fleet');
    await db.client.query('CREATE TABLE fleet.memory (id text PRIMARY KEY, subject text NOT NULL, fact text NOT NULL, source text NOT NULL)');
    await db.client.query(`CREATE EXTENSION IF NOT EXISTS amcheck`);
    return { store: storeSchema.parse({ engine: 'postgres', postgres: { url: db.url, schema: 'fleet' } }), describes: 'postgres schema fleet', close: () => db.drop() };
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
});
