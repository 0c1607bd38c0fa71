import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { Redis, type RedisOptions } from 'ioredis';

/**
 * The real Redis the queue tests run against: REDIS_URL when set, else the one on 127.0.0.1:6379, else a
 * `redis-server` started here on a free port (no persistence) and stopped by `stop()`. The Redis may be shared:
 * every test works under its own key prefix and deletes only its own keys (SCAN + DEL, never FLUSHALL).
 */
export interface TestRedis {
  url: string;
  /** A client for assertions and cleanup; closed by stop(). */
  client: Redis;
  stop(): Promise<void>;
}

/** Whether a Redis answers PING at `target` (a URL, or ioredis options: TLS, a user) within a second. */
export async function reachable(target: string | RedisOptions): Promise<boolean> {
  const once: RedisOptions = { lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0, connectTimeout: 1000, enableOfflineQueue: false };
  const probe = typeof target === 'string' ? new Redis(target, once) : new Redis({ ...target, ...once });
  probe.on('error', () => {});
  try {
    await probe.connect();
    return (await probe.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    probe.disconnect();
  }
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

async function startRedisServer(): Promise<{ url: string; proc: ChildProcess }> {
  const port = await freePort();
  const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  const failed = new Promise<never>((_, reject) => proc.once('error', (err) => reject(new Error(`cannot start redis-server (${err.message}); install it or set REDIS_URL`))));
  const url = `redis://127.0.0.1:${port}`;
  for (let i = 0; i < 100; i++) {
    if (await Promise.race([reachable(url), failed])) return { url, proc };
    await new Promise((r) => setTimeout(r, 50));
  }
  proc.kill();
  throw new Error(`redis-server on port ${port} did not answer`);
}

export async function startTestRedis(): Promise<TestRedis> {
  let url = process.env.REDIS_URL;
  let proc: ChildProcess | undefined;
  if (!url) {
    url = 'redis://127.0.0.1:6379';
    if (!(await reachable(url))) ({ url, proc } = await startRedisServer());
  }
  const client = new Redis(url, { maxRetriesPerRequest: 3 });
  return {
    url,
    client,
    async stop() {
      await client.quit().catch(() => client.disconnect());
      if (proc) {
        const exited = new Promise((r) => proc!.once('exit', r));
        proc.kill('SIGTERM');
        await exited;
      }
    },
  };
}

/** A key prefix no other test (or test run, or real deployment) uses. */
export function uniquePrefix(name: string): string {
  return `mw-test:${name}:${process.pid}:${randomBytes(4).toString('hex')}`;
}

/** Delete every key under `prefix:` with SCAN + DEL; returns how many went. Never FLUSHALL: the Redis may be shared. */
export async function deletePrefix(client: Redis, prefix: string): Promise<number> {
  let cursor = '0';
  let deleted = 0;
  const match = `${prefix.replace(/[*?[\]\\]/g, '\\$&')}:*`;
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', match, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) deleted += await client.del(...keys);
  } while (cursor !== '0');
  return deleted;
}

/** Every value Redis holds under `prefix:`: hash values, list and sorted-set members, stream fields, strings. */
export async function valuesUnder(client: Redis, prefix: string): Promise<string[]> {
  const out: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix.replace(/[*?[\]\\]/g, '\\$&')}:*`, 'COUNT', 1000);
    cursor = next;
    for (const k of keys) {
      const type = await client.type(k);
      if (type === 'hash') out.push(...Object.values(await client.hgetall(k)));
      else if (type === 'list') out.push(...(await client.lrange(k, 0, -1)));
      else if (type === 'zset') out.push(...(await client.zrange(k, 0, -1)));
      else if (type === 'stream') for (const [, kv] of await client.xrange(k, '-', '+')) out.push(...kv);
      else if (type === 'string') out.push((await client.get(k)) ?? '');
    }
  } while (cursor !== '0');
  return out;
}
