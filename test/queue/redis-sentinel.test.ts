// Redis behind Sentinel (a primary, a replica, three sentinels, all real): the digest's claim is on the replica
// before anyone sends, a claim the replicas did not get is given up, and a kill -9 of the primary is survived.
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { connectRedis } from '../../src/queue/connection.js';
import { redisLedger } from '../../src/digest/ledger.js';
import { WardenError } from '../../src/core/errors.js';
import { roleOf, startSentinelSet, type SentinelSet } from '../helpers/redis-servers.js';
import { assertBuilt, killAll, makeStore, spawnWorker, tempDir, until, type SpawnedWorker } from './fixtures.js';

const DAY_MS = 86_400_000;
const claimOpts = (key: string, now: number) => ({ key, now, end: now, firstPeriodMs: DAY_MS, claimMs: 15 * 60_000, timeZone: 'UTC' });

/** Waits until the primary reports its replica online (replication is asynchronous: the test starts in sync). */
async function replicaOnline(client: Redis): Promise<void> {
  await until('replica online', async () => /slave0:.*state=online/.test(await client.info('replication')), 30_000);
}

/** The first digest day record under `prefix` on one node, read directly (not through the sentinels). */
async function dayRecord(node: Redis, prefix: string): Promise<Record<string, string> | null> {
  const [, keys] = await node.scan('0', 'MATCH', `${prefix}:digest:*:day:*`, 'COUNT', 1000);
  return keys.length > 0 ? node.hgetall(keys[0]!) : null;
}

const promoted = (port: number) => until('the replica promoted', async () => (await roleOf(port)) === 'master', 60_000);

describe('Redis Sentinel', { timeout: 180_000 }, () => {
  let set: SentinelSet | undefined;
  const clients: Redis[] = [];
  const workers: SpawnedWorker[] = [];

  beforeAll(() => assertBuilt());
  afterEach(async () => {
    await killAll(workers.splice(0));
    for (const c of clients.splice(0)) c.disconnect();
    await set?.stop();
    set = undefined;
  });

  const direct = (port: number) => {
    const c = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 1, retryStrategy: () => null });
    c.on('error', () => {});
    clients.push(c);
    return c;
  };

  /** A fresh set, a client that found its primary through the sentinels, the replica in sync, a key prefix. */
  async function connected(): Promise<{ set: SentinelSet; redis: Redis; prefix: string }> {
    set = await startSentinelSet();
    const redis = await connectRedis(set.config);
    clients.push(redis);
    expect((await redis.role())[0]).toBe('master');
    await replicaOnline(redis);
    return { set, redis, prefix: `mw-sentinel-${randomBytes(3).toString('hex')}` };
  }

  it('a digest claim is held by the replica before it counts as claimed', async () => {
    const { set, redis, prefix } = await connected();
    const ledger = redisLedger(redis, prefix, { replicas: 1, waitMs: 2000 });
    const claim = await ledger.claim(claimOpts('ops@example.test', Date.now()));
    expect(claim.kind).toBe('claimed');
    // No waiting here: at the moment claim() returns, the replica must already hold the claim.
    expect(await dayRecord(direct(set.replica.port), prefix)).toMatchObject({ status: 'sending', claim_token: (claim as { token: string }).token });
  });

  it('gives a claim up, sending nothing, when no replica acknowledges it; a retry takes it at once', async () => {
    const { set, redis, prefix } = await connected();
    const now = Date.now();
    set.replica.proc.kill('SIGSTOP'); // the replica stops reading its replication stream
    try {
      for (const replicas of [1, 2]) {
        const err = await redisLedger(redis, prefix, { replicas, waitMs: 300 }).claim(claimOpts('ops@example.test', now)).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(WardenError);
        expect((err as WardenError).transient).toBe(true);
        expect((err as WardenError).message).toMatch(/not acknowledged by \d Redis replica.*redis\.claimReplicas.*nothing sent/);
        expect(await dayRecord(redis, prefix)).toMatchObject({ status: 'failed' });
      }
    } finally {
      set.replica.proc.kill('SIGCONT');
    }
    const retry = await redisLedger(redis, prefix, { replicas: 1, waitMs: 5000 }).claim(claimOpts('ops@example.test', now + 1000));
    expect(retry.kind).toBe('claimed'); // not 'in-progress': the failed claim does not block the day for claimMinutes
  });

  it('kill -9 of the primary: the promoted replica keeps the claim (the day is not sent again), the holder reaches it and settles it', async () => {
    const { set, redis, prefix } = await connected();
    const ledger = redisLedger(redis, prefix, { replicas: 1, waitMs: 2000 });
    const now = Date.now();
    const claim = await ledger.claim(claimOpts('ops@example.test', now));
    expect(claim.kind).toBe('claimed');
    set.primary.proc.kill('SIGKILL'); // dies right after acknowledging the claim, before the mail is out
    await promoted(set.replica.port);
    // Another worker's retry on the new primary (found through the sentinels) finds the claim still held: it
    // waits, it does not send.
    const other = await connectRedis(set.config);
    clients.push(other);
    expect((await redisLedger(other, prefix, { replicas: 0, waitMs: 1 }).claim(claimOpts('ops@example.test', now + 1000))).kind).toBe('in-progress');
    // The holder's own client found the new primary through the sentinels: its `sent` lands there.
    await ledger.markSent(claim.delivery, now + 2000, '250 ok', { newRows: 0 });
    expect((await redisLedger(other, prefix).claim(claimOpts('ops@example.test', now + 3000))).kind).toBe('already-sent');
  });

  it('kill -9 of the primary while schedules run: the worker goes on against the promoted replica, no run twice', async () => {
    set = await startSentinelSet();
    const dir = tempDir('redis-sentinel');
    makeStore(join(dir, 'a.db'), { live: 2 });
    const file = join(dir, 'config.yaml');
    const off = { enabled: false };
    writeFileSync(file, JSON.stringify({
      stateDb: join(dir, 'state.db'),
      redis: { ...set.config, prefix: `mw-sentinel-${randomBytes(3).toString('hex')}` },
      worker: { host: 'solo', http: { port: 0 }, concurrency: 1, schedules: { snapshot: off, prune: { enabled: true, every: 1000 }, integrity: off, digest: off, drift: off } },
      stores: { a: { db: join(dir, 'a.db') } },
    }));
    await replicaOnline(direct(set.primary.port));
    const w = spawnWorker(file);
    workers.push(w);
    const done = () => w.lines.filter((l) => l.msg === 'job done');
    await until('two scheduled runs', () => done().length >= 2, 60_000);
    set.primary.proc.kill('SIGKILL');
    const before = done().length;
    await promoted(set.replica.port);
    await until('two more runs after the failover', () => done().length >= before + 2, 90_000);
    const ids = done().map((l) => String(l.jobId));
    expect(new Set(ids).size, ids.join(' ')).toBe(ids.length);
    expect(w.proc.exitCode).toBeNull();
  });
});
