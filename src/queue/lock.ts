import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { transientError } from '../core/errors.js';
import type { Logger } from '../log/logger.js';

/**
 * The per-store writer lock across machines: a Redis key holding a random token, with an expiry. The holder
 * extends it while its job runs and deletes it when done; a holder that crashes simply stops extending, so the
 * lock frees itself within one ttl. Only the token's owner can extend or release it (compare-and-act in Lua),
 * so a holder that lost its lock (paused past the expiry) can never release someone else's.
 *
 * The OS lock of src/store/lock.ts still guards writers on one machine (the CLI included); this one adds the
 * writers of other machines' workers, which share nothing but Redis.
 */
export interface StoreLockOptions {
  ttlMs: number;
  /** How long to wait for a busy lock before failing transiently. */
  waitMs: number;
  /** Who holds it, for whoever finds it busy: `prune@host:pid`. */
  holder: string;
  log?: Logger;
}

const EXTEND = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end`;
const RELEASE = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end`;

export function storeLockKey(prefix: string, store: string): string {
  return `${prefix}:store-lock:${store}`;
}

export interface HeldStoreLock {
  key: string;
  token: string;
  /** Aborted when the lock could not be extended: the job must stop writing. */
  lost: AbortSignal;
  release(): Promise<void>;
}

function tokenFor(holder: string): string {
  return `${holder}#${randomUUID()}`;
}

/** Try once; null when someone else holds it. */
export async function tryAcquireStoreLock(redis: Redis, key: string, opts: Pick<StoreLockOptions, 'ttlMs' | 'holder'>): Promise<string | null> {
  const token = tokenFor(opts.holder);
  const ok = await redis.set(key, token, 'PX', opts.ttlMs, 'NX');
  return ok === 'OK' ? token : null;
}

export async function extendStoreLock(redis: Redis, key: string, token: string, ttlMs: number): Promise<boolean> {
  return Number(await redis.eval(EXTEND, 1, key, token, String(ttlMs))) === 1;
}

export async function releaseStoreLock(redis: Redis, key: string, token: string): Promise<boolean> {
  return Number(await redis.eval(RELEASE, 1, key, token)) === 1;
}

/** Take the lock, polling while it is busy (up to waitMs), and keep it extended until released. */
export async function acquireStoreLock(redis: Redis, key: string, opts: StoreLockOptions): Promise<HeldStoreLock> {
  const deadline = Date.now() + opts.waitMs;
  let token = await tryAcquireStoreLock(redis, key, opts);
  let pause = 50;
  if (!token) opts.log?.info({ lock: key, heldBy: await redis.get(key) }, 'store lock busy; waiting');
  while (!token) {
    if (Date.now() >= deadline) {
      const heldBy = (await redis.get(key)) ?? 'nobody (just freed)';
      throw transientError(`store lock ${key} is held by ${heldBy.split('#')[0]}: another writer is working on this store; try again later`);
    }
    await new Promise((r) => setTimeout(r, Math.min(pause, Math.max(0, deadline - Date.now()))));
    pause = Math.min(pause * 2, 1000);
    token = await tryAcquireStoreLock(redis, key, opts);
  }
  const held = token;
  const lost = new AbortController();
  let released = false;
  const extender = setInterval(() => {
    extendStoreLock(redis, key, held, opts.ttlMs)
      .then((ok) => {
        if (!ok && !released && !lost.signal.aborted) {
          opts.log?.error({ lock: key }, 'store lock lost (expired before it was extended); stopping the job');
          lost.abort(transientError(`store lock ${key} was lost while the job ran`));
        }
      })
      .catch((err: unknown) => opts.log?.warn({ lock: key, err: (err as Error).message }, 'store lock extension failed; will retry'));
  }, Math.max(30, Math.floor(opts.ttlMs / 3)));
  extender.unref();
  opts.log?.info({ lock: key }, 'store lock acquired');
  return {
    key,
    token: held,
    lost: lost.signal,
    async release() {
      if (released) return;
      released = true;
      clearInterval(extender);
      try {
        await releaseStoreLock(redis, key, held);
        opts.log?.info({ lock: key }, 'store lock released');
      } catch (err) {
        // Not fatal: the key expires on its own within ttlMs.
        opts.log?.warn({ lock: key, err: (err as Error).message }, 'store lock release failed; it expires by itself');
      }
    },
  };
}

export async function withStoreLock<T>(redis: Redis, key: string, opts: StoreLockOptions, fn: (lost: AbortSignal) => Promise<T>): Promise<T> {
  const lock = await acquireStoreLock(redis, key, opts);
  try {
    const result = await fn(lock.lost);
    // The job may have finished its writes after the lock lapsed: say so, and let a retry (idempotent) redo it.
    if (lock.lost.aborted) throw lock.lost.reason;
    return result;
  } finally {
    await lock.release();
  }
}
