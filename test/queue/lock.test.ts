import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { WardenError } from '../../src/core/errors.js';
import { createRedis } from '../../src/queue/connection.js';
import { acquireStoreLock, extendStoreLock, releaseStoreLock, storeLockKey, tryAcquireStoreLock, withStoreLock } from '../../src/queue/lock.js';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from '../helpers/redis.js';
import { until } from './fixtures.js';

describe('Redis store lock', () => {
  let redis: TestRedis;
  let a: Redis;
  let b: Redis;
  let prefix: string;

  beforeAll(async () => {
    redis = await startTestRedis();
    // two connections: two holders that share nothing but Redis
    a = createRedis(redis.url);
    b = createRedis(redis.url);
    await Promise.all([a.connect(), b.connect()]);
  });
  afterEach(async () => {
    await deletePrefix(redis.client, prefix);
  });
  afterAll(async () => {
    await Promise.all([a.quit(), b.quit()]);
    await redis.stop();
  });

  const key = () => storeLockKey((prefix = uniquePrefix('lock')), 'agent');

  it('lets one holder in; only the token owner can extend or release it', async () => {
    const k = key();
    const token = await tryAcquireStoreLock(a, k, { ttlMs: 10_000, holder: 'prune@a' });
    expect(token).toMatch(/^prune@a#/);
    expect(await tryAcquireStoreLock(b, k, { ttlMs: 10_000, holder: 'prune@b' })).toBeNull();
    expect(await releaseStoreLock(b, k, 'prune@b#not-the-token')).toBe(false);
    expect(await extendStoreLock(b, k, 'prune@b#not-the-token', 10_000)).toBe(false);
    expect(await redis.client.get(k)).toBe(token);
    expect(await extendStoreLock(a, k, token!, 20_000)).toBe(true);
    expect(await redis.client.pttl(k)).toBeGreaterThan(10_000);
    expect(await releaseStoreLock(a, k, token!)).toBe(true);
    expect(await tryAcquireStoreLock(b, k, { ttlMs: 10_000, holder: 'prune@b' })).not.toBeNull();
  });

  it('expires when its holder stops extending it (a crash), so the store is not locked forever', async () => {
    const k = key();
    expect(await tryAcquireStoreLock(a, k, { ttlMs: 300, holder: 'crashed' })).not.toBeNull();
    expect(await redis.client.pttl(k)).toBeGreaterThan(0);
    // nobody extends it: the key goes by itself, and the next writer gets in
    await until('the lock to expire', async () => (await redis.client.exists(k)) === 0, 5000);
    expect(await tryAcquireStoreLock(b, k, { ttlMs: 10_000, holder: 'next' })).not.toBeNull();
  });

  it('is extended while the job runs, longer than its ttl, and released after', async () => {
    const k = key();
    let extensions = 0;
    const result = await withStoreLock(a, k, { ttlMs: 150, waitMs: 0, holder: 'long' }, async (lost) => {
      // outlive several ttls: without extension, b would get in
      const firstTtlEnd = Date.now() + 150;
      await until('three ttls to pass', async () => {
        if ((await redis.client.pttl(k)) > 0) extensions++;
        return Date.now() > firstTtlEnd + 300;
      });
      expect(await tryAcquireStoreLock(b, k, { ttlMs: 1000, holder: 'intruder' })).toBeNull();
      expect(lost.aborted).toBe(false);
      return 'done';
    });
    expect(result).toBe('done');
    expect(extensions).toBeGreaterThan(0);
    expect(await redis.client.exists(k)).toBe(0);
  });

  it('makes a second writer wait for the first, then go', async () => {
    const k = key();
    const first = await acquireStoreLock(a, k, { ttlMs: 10_000, waitMs: 0, holder: 'first' });
    const order: string[] = [];
    const second = withStoreLock(b, k, { ttlMs: 10_000, waitMs: 10_000, holder: 'second' }, async () => {
      order.push('second runs');
    });
    await until('the second writer to poll at least once', async () => (await redis.client.get(k))?.startsWith('first#'));
    order.push('first releases');
    await first.release();
    await second;
    expect(order).toEqual(['first releases', 'second runs']);
  });

  it('fails transiently (retry later) when the store stays busy past waitMs, naming the holder', async () => {
    const k = key();
    const held = await acquireStoreLock(a, k, { ttlMs: 10_000, waitMs: 0, holder: 'prune@host-a:42' });
    try {
      const err = await withStoreLock(b, k, { ttlMs: 10_000, waitMs: 100, holder: 'prune@host-b:7' }, async () => 'ran').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WardenError);
      expect((err as WardenError).transient).toBe(true);
      expect((err as WardenError).message).toContain('held by prune@host-a:42');
    } finally {
      await held.release();
    }
  });

  it('signals "lost" and fails transiently when the lock is taken away mid-job', async () => {
    const k = key();
    const err = await withStoreLock(a, k, { ttlMs: 150, waitMs: 0, holder: 'victim' }, async (lost) => {
      // someone (an operator, a Redis failover) deletes the key; the next extension finds it gone
      await redis.client.del(k);
      await until('the job to be told its lock is gone', () => lost.aborted);
      return 'finished anyway';
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WardenError);
    expect((err as WardenError).transient).toBe(true);
    expect((err as WardenError).message).toMatch(/lost/);
  });
});
