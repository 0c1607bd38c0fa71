import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { openStateDb } from '../../src/state/state.js';
import { createLogger } from '../../src/log/logger.js';
import { createRedis } from '../../src/queue/connection.js';
import { claimOrWait, redisLedger, stateLedger, type DeliveryLedger } from '../../src/digest/ledger.js';
import type { Claim, ClaimOptions } from '../../src/digest/deliveries.js';
import { toCanonical } from '../../src/time/instants.js';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from '../helpers/redis.js';
import { tempDir, until } from '../queue/fixtures.js';

/**
 * A run that waits on another's live digest claim: the claim lapses after claimMinutes of the clock, not half of
 * it, and a takeover records the time it happened. The single-host ledger (state db) and the fleet's (Redis).
 */
describe('waiting on a digest claim', () => {
  let redis: TestRedis;
  let conn: Redis;
  const prefixes: string[] = [];
  const log = createLogger({ level: 'silent' });
  const T = Date.parse('2026-03-10T07:00:00Z');
  const CLAIM_MS = 60_000;

  beforeAll(async () => {
    redis = await startTestRedis();
    conn = createRedis(redis.url);
    await conn.connect();
  });
  afterAll(async () => {
    for (const p of prefixes) await deletePrefix(redis.client, p);
    await conn.quit();
    await redis.stop();
  });

  const ledgers: [string, () => DeliveryLedger][] = [
    ['state db (one host)', () => stateLedger(openStateDb(join(tempDir('claim'), 'state.db')))],
    ['Redis (a fleet)', () => {
      const prefix = uniquePrefix('claim');
      prefixes.push(prefix);
      return redisLedger(conn, prefix);
    }],
  ];

  /** The ledger, counting the looks (so a test knows real time has passed between two of them). */
  function counted(ledger: DeliveryLedger): DeliveryLedger & { looks: () => number } {
    let looks = 0;
    return { ...ledger, claim: (o) => ((looks += 1), ledger.claim(o)), looks: () => looks };
  }
  const options = (now: number, claimMs = CLAIM_MS): ClaimOptions => ({ key: 'owner@example.org|all stores', now, end: now - 60_000, firstPeriodMs: 86_400_000, claimMs });

  describe.each(ledgers)('%s', (_name, make) => {
    it('a live claim is not taken over before claimMinutes of the clock have passed, however long the wait; then it is, at that time', async () => {
      const ledger = counted(make());
      const holder = await ledger.claim(options(T));
      expect(holder.kind).toBe('claimed');
      let clock = T;
      const signal = new AbortController().signal;
      let outcome: Claim | undefined;
      const waiting = claimOrWait(ledger, options(T), { now: () => clock, signal, log }).then((c) => (outcome = c));
      await until('the waiter to look once', () => ledger.looks() >= 2);
      // just short of the claim's time, with real time passing while it waits (two more looks)
      clock = T + CLAIM_MS - 1;
      const seen = ledger.looks();
      await until('two more looks', () => ledger.looks() >= seen + 2);
      expect(outcome).toBeUndefined();
      clock = T + CLAIM_MS;
      await waiting;
      expect(outcome).toMatchObject({ kind: 'claimed', takenOver: true });
      expect(outcome!.delivery.claimed_at).toBe(toCanonical(T + CLAIM_MS)); // now, not in the future
    });

    it('with a clock that stands still (--now), the wait itself moves it: the claim lapses after claimMs of waiting, recorded then', async () => {
      const ledger = counted(make());
      const claimMs = 600;
      await ledger.claim(options(T, claimMs));
      const began = performance.now();
      const signal = new AbortController().signal;
      const taken = await claimOrWait(ledger, options(T, claimMs), { now: () => T, signal, log });
      const waited = performance.now() - began;
      expect(taken).toMatchObject({ kind: 'claimed', takenOver: true });
      const at = Date.parse(`${taken.delivery.claimed_at.replace(' ', 'T')}Z`);
      expect(at - T).toBeGreaterThanOrEqual(claimMs - 1000); // canonical text keeps whole seconds
      expect(at - T).toBeLessThanOrEqual(waited);
    });

    it('a claim settled as sent while another run waits: the waiter sends nothing', async () => {
      const ledger = counted(make());
      const holder = await ledger.claim(options(T));
      if (holder.kind !== 'claimed') throw new Error('expected a claim');
      const signal = new AbortController().signal;
      const waiting = claimOrWait(ledger, options(T), { now: () => T + 1000, signal, log });
      await until('the waiter to look', () => ledger.looks() >= 2);
      await ledger.markSent(holder.delivery, T + 2000, '250 ok', { newRows: 0 });
      expect((await waiting).kind).toBe('already-sent');
    });
  });
});

describe("a store's open period in the fleet's ledger", () => {
  let redis: TestRedis;
  let conn: Redis;
  const prefix = uniquePrefix('stores');
  const KEY = 'owner@example.org|all stores';
  const H = 3_600_000;

  beforeAll(async () => {
    redis = await startTestRedis();
    conn = createRedis(redis.url);
    await conn.connect();
  });
  afterAll(async () => {
    await deletePrefix(redis.client, prefix);
    await conn.quit();
    await redis.stop();
  });

  it('a store not reported stays open at its first missed start, across any number of digests, until it reports', async () => {
    const ledger = redisLedger(conn, prefix);
    const day = (n: number) => n * 24 * H;
    // day 1: both report
    expect(await ledger.storeStarts(KEY, ['a1', 'b1'], day(1))).toEqual({ a1: day(1), b1: day(1) });
    await ledger.closeStores(KEY, ['a1', 'b1'], day(2));
    // day 2: b1's host is silent
    expect(await ledger.storeStarts(KEY, ['a1', 'b1'], day(2))).toEqual({ a1: day(2), b1: day(2) });
    await ledger.closeStores(KEY, ['a1'], day(3));
    // day 3: still silent: b1 starts at day 2, and stays there
    expect(await ledger.storeStarts(KEY, ['a1', 'b1'], day(3))).toEqual({ a1: day(3), b1: day(2) });
    await ledger.closeStores(KEY, ['a1'], day(4));
    // a preview reads without writing; a store never seen before starts with the period
    const keys = async () => (await conn.keys(`${prefix}:*`)).sort();
    const held = async () => Promise.all((await keys()).map((k) => conn.hgetall(k).catch(() => conn.get(k))));
    const before = await held();
    expect(await ledger.storeStarts(KEY, ['a1', 'b1', 'c1'], day(4), false)).toEqual({ a1: day(4), b1: day(2), c1: day(4) });
    expect(await held()).toEqual(before);
    // day 4: b1 reports: closed, and day 5 starts every store together
    expect(await ledger.storeStarts(KEY, ['a1', 'b1'], day(4))).toEqual({ a1: day(4), b1: day(2) });
    await ledger.closeStores(KEY, ['a1', 'b1'], day(5));
    expect(await ledger.storeStarts(KEY, ['a1', 'b1'], day(5))).toEqual({ a1: day(5), b1: day(5) });
    // a close never moves a store backwards (a late retry of an older day)
    await ledger.closeStores(KEY, ['b1'], day(3));
    expect((await ledger.storeStarts(KEY, ['b1'], day(6)))).toEqual({ b1: day(5) });
  });

  it('the single-host ledger keeps no per-store record: every store starts with the period', async () => {
    const ledger = stateLedger(openStateDb(join(tempDir('stores'), 'state.db')));
    expect(await ledger.storeStarts(KEY, ['a1'], 5000)).toEqual({ a1: 5000 });
  });
});
