import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { ENGINE_REACH, ENGINES } from '../../src/engines/registry.js';
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
