import { createHash, randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Db } from '../store/sqlite.js';
import { toCanonical, type Clock, type Instant } from '../time/instants.js';
import type { Logger } from '../log/logger.js';
import { transientError } from '../core/errors.js';
import { claimDelivery, dayOf, markFailed, markQuiet, markSent, periodStart, type Claim, type ClaimOptions, type Delivery } from './deliveries.js';

/**
 * Where the digest's exactly-once record lives (src/digest/deliveries.ts explains the protocol): the state db
 * when every store is on one host (the digest then runs on that host), Redis when the stores live on several
 * hosts, so that a retry taken by any machine's worker finds the same claims and the same periods.
 */
export interface DeliveryLedger {
  claim(opts: ClaimOptions): Promise<Claim>;
  /** Where the next period of `key` starts (for the preview). */
  periodStart(key: string, end: Instant, firstPeriodMs: number): Promise<Instant>;
  markSent(d: Delivery, at: Instant, response: string, summary: unknown): Promise<void>;
  markQuiet(d: Delivery, token: string, at: Instant): Promise<void>;
  markFailed(d: Delivery, token: string, error: string): Promise<void>;
  /**
   * Where each store's section starts: `start`, or earlier for a store an earlier digest had no report of. Every store
   * is recorded open at its start before anything is sent, so a crash before closeStores lists its rows again
   * rather than never. The state db's ledger (one host) keeps no such record: there every store is read in place,
   * and one that cannot be read fails the whole digest before the day is claimed.
   */
  storeStarts(key: string, stores: string[], start: Instant, record?: boolean): Promise<Record<string, Instant>>;
  /** After a digest went out (or was quiet): these stores reported, their period is closed up to `end`. */
  closeStores(key: string, stores: string[], end: Instant): Promise<void>;
}

export function stateLedger(db: Db): DeliveryLedger {
  return {
    claim: async (opts) => claimDelivery(db, opts),
    periodStart: async (key, end, firstMs) => periodStart(db, key, end, firstMs),
    markSent: async (d, at, response, summary) => markSent(db, d.id, at, response, summary),
    markQuiet: async (d, token, at) => markQuiet(db, d.id, token, at),
    markFailed: async (d, token, error) => markFailed(db, d.id, token, error),
    storeStarts: async (_key, stores, start) => Object.fromEntries(stores.map((st) => [st, start])),
    closeStores: async () => {},
  };
}

// One delivery per (list, day): a hash. `covered`: the end of the last sent or quiet period (ms); `tried`: the
// earliest period start ever claimed (ms), so a first digest that never got out loses nothing.
const CLAIM = `
local now, finish, firstMs, claimMs = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local status = redis.call('HGET', KEYS[1], 'status')
if status then
  if status == 'sent' or status == 'quiet' then return 'already-sent' end
  if status == 'sending' and now - tonumber(redis.call('HGET', KEYS[1], 'claimed_at')) < claimMs then return 'in-progress' end
  local pend = math.max(tonumber(redis.call('HGET', KEYS[1], 'period_end')), finish)
  redis.call('HSET', KEYS[1], 'status', 'sending', 'claim_token', ARGV[5], 'claimed_at', now, 'period_end', pend, 'error', '')
  redis.call('HINCRBY', KEYS[1], 'attempts', 1)
  if status == 'sending' then return 'taken-over' end
  return 'claimed'
end
local start
local covered = redis.call('GET', KEYS[2])
local tried = redis.call('GET', KEYS[3])
if covered then start = math.min(tonumber(covered), finish)
elseif tried then start = math.min(tonumber(tried), finish)
else start = finish - firstMs end
redis.call('HSET', KEYS[1], 'list_key', ARGV[7], 'day', ARGV[8], 'period_start', start, 'period_end', finish, 'status', 'sending',
  'claim_token', ARGV[5], 'claimed_at', now, 'attempts', 1, 'message_id', ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[9])
if not tried or tonumber(tried) > start then redis.call('SET', KEYS[3], start) end
return 'claimed'`;

// Only our own claim ends quiet or failed (never overwrite a sent written by whoever took over); sent is written
// whoever holds the claim now, and moves `covered`.
const SETTLE = `
local status, token = redis.call('HGET', KEYS[1], 'status'), redis.call('HGET', KEYS[1], 'claim_token')
if not status then return 0 end
if ARGV[1] ~= 'sent' and (status ~= 'sending' or token ~= ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'sent_at', ARGV[3], 'response', ARGV[4], 'summary', ARGV[5], 'error', ARGV[6])
if ARGV[1] == 'sent' or ARGV[1] == 'quiet' then
  local pend = tonumber(redis.call('HGET', KEYS[1], 'period_end'))
  local covered = redis.call('GET', KEYS[2])
  if not covered or tonumber(covered) < pend then redis.call('SET', KEYS[2], pend) end
end
return 1`;

// Each store's open period start (ms): set when absent, read back; closing moves it forward only.
const OPEN_STORES = `
for i, store in ipairs(ARGV) do if i > 1 then redis.call('HSETNX', KEYS[1], store, ARGV[1]) end end
return redis.call('HGETALL', KEYS[1])`;
const CLOSE_STORES = `
for i, store in ipairs(ARGV) do
  if i > 1 then
    local at = tonumber(redis.call('HGET', KEYS[1], store))
    if not at or at < tonumber(ARGV[1]) then redis.call('HSET', KEYS[1], store, ARGV[1]) end
  end
end
return 1`;

/** Kept for 90 days: long enough for any retry or takeover of that day. */
const KEEP_MS = 90 * 86_400_000;

/**
 * How many replicas must hold a claim (and a `sent`) before the digest goes on (Redis WAIT), and how long to wait
 * for them. Replication is asynchronous: without it, a claim the primary acknowledged and lost in a failover is
 * gone, and a retry on the promoted replica sends the day again.
 */
export interface ClaimDurability {
  replicas: number;
  waitMs: number;
}

export function redisLedger(redis: Redis, prefix: string, durability: ClaimDurability = { replicas: 0, waitMs: 0 }): DeliveryLedger {
  const base = (key: string) => `${prefix}:digest:${createHash('sha256').update(key).digest('hex').slice(0, 24)}`;
  const keysOf = (key: string, day: string) => [`${base(key)}:day:${day}`, `${base(key)}:covered`, `${base(key)}:tried`];
  const read = async (key: string, day: string): Promise<Delivery> => {
    const h = await redis.hgetall(keysOf(key, day)[0]!);
    const ms = (v: string | undefined) => toCanonical(Number(v));
    return {
      id: 0, list_key: h.list_key ?? key, day, period_start: ms(h.period_start), period_end: ms(h.period_end),
      status: h.status as Delivery['status'], claim_token: h.claim_token || null, claimed_at: ms(h.claimed_at),
      attempts: Number(h.attempts ?? 1), message_id: h.message_id ?? '', sent_at: h.sent_at || null,
      response: h.response || null, error: h.error || null, summary: h.summary || null,
    };
  };
  /** Whether `durability.replicas` replicas hold every write this connection made so far. */
  const replicated = async (): Promise<boolean> => {
    if (durability.replicas === 0) return true;
    return ((await redis.wait(durability.replicas, durability.waitMs)) as number) >= durability.replicas;
  };
  const settle = async (d: Delivery, status: 'sent' | 'quiet' | 'failed', token: string, fields: { at?: Instant; response?: string; summary?: unknown; error?: string }) => {
    await redis.eval(SETTLE, 2, ...keysOf(d.list_key, d.day).slice(0, 2), status, token, fields.at === undefined ? '' : toCanonical(fields.at),
      fields.response ?? '', fields.summary === undefined ? '' : JSON.stringify(fields.summary), fields.error ?? '');
  };
  return {
    async claim(opts) {
      const day = dayOf(opts.end, opts.timeZone);
      const token = randomBytes(12).toString('hex');
      const messageId = `<digest.${day}.${createHash('sha256').update(opts.key).digest('hex').slice(0, 12)}.${token.slice(0, 8)}@memory-warden>`;
      const kind = (await redis.eval(CLAIM, 3, ...keysOf(opts.key, day), opts.now, opts.end, opts.firstPeriodMs, opts.claimMs, token, messageId, opts.key, day, KEEP_MS)) as string;
      if ((kind === 'claimed' || kind === 'taken-over') && !(await replicated())) {
        // Not durable: give the claim up (a retry may take it at once) and send nothing rather than risk a second
        // mail from whoever a failover would leave without this claim.
        await redis.eval(SETTLE, 2, ...keysOf(opts.key, day).slice(0, 2), 'failed', token, '', '', '', 'claim not replicated');
        throw transientError(`digest: the claim for ${day} was not acknowledged by ${durability.replicas} Redis replica(s) within ${durability.waitMs} ms (redis.claimReplicas); nothing sent, retried later`);
      }
      const delivery = await read(opts.key, day);
      if (kind === 'already-sent' || kind === 'in-progress') return { kind, delivery };
      return { kind: 'claimed', delivery, token, takenOver: kind === 'taken-over' };
    },
    async periodStart(key, end, firstPeriodMs) {
      const [, covered, tried] = keysOf(key, '-');
      const [c, t] = await redis.mget(covered!, tried!);
      if (c !== null && c !== undefined) return Math.min(Number(c), end);
      return Math.min(t !== null && t !== undefined ? Number(t) : end - firstPeriodMs, end);
    },
    async markSent(d, at, response, summary) {
      await settle(d, 'sent', '', { at, response, summary });
      // The mail is out: nothing to undo, so no error. Waiting keeps a failover right after it from reopening the day.
      if (await replicated()) return;
      // Not acknowledged: the primary that took `sent` may have died before any replica had it, leaving the promoted
      // one with the claim only (a retry after claimMinutes would send the day again, and `covered` would not move).
      // Written again (it is idempotent), it lands on whichever primary this client reaches now.
      await settle(d, 'sent', '', { at, response, summary });
      await replicated();
    },
    markQuiet: (d, token, at) => settle(d, 'quiet', token, { at }),
    markFailed: (d, token, error) => settle(d, 'failed', token, { error }),
    async storeStarts(key, stores, start, record = true) {
      // A preview only reads (record false): it writes nothing.
      const flat = record ? ((await redis.eval(OPEN_STORES, 1, `${base(key)}:stores`, start, ...stores)) as string[]) : Object.entries(await redis.hgetall(`${base(key)}:stores`)).flat();
      const held = new Map<string, number>();
      for (let i = 0; i + 1 < flat.length; i += 2) if (Number.isFinite(Number(flat[i + 1]))) held.set(flat[i]!, Number(flat[i + 1]));
      return Object.fromEntries(stores.map((st) => [st, Math.min(start, held.get(st) ?? start)]));
    },
    async closeStores(key, stores, end) {
      if (stores.length > 0) await redis.eval(CLOSE_STORES, 1, `${base(key)}:stores`, end, ...stores);
    },
  };
}

/**
 * Claim the day, or wait for whoever holds it: a day is settled only by `sent` or `quiet`. Another run's claim
 * that fails (SMTP refused, the run was a CLI that does not retry) is taken over here; one whose holder vanished
 * is taken over once it is claimMinutes old. Never reports success for a day nobody sent.
 *
 * The time of each look is the job's clock, or, when that clock stands still (--now, a test), `opts.now` moved on
 * by the real time spent waiting, whichever is later: never the two added, which counted the wait twice (a live
 * claim lapsed after half its time, and the takeover recorded a claimed_at in the future).
 */
export async function claimOrWait(ledger: DeliveryLedger, opts: ClaimOptions, ctx: { now: Clock; signal: AbortSignal; log: Logger }): Promise<Claim> {
  const began = performance.now();
  for (let waited = false; ; waited = true) {
    const now = Math.max(ctx.now(), opts.now + Math.floor(performance.now() - began));
    const claim = await ledger.claim({ ...opts, now });
    if (claim.kind !== 'in-progress') return claim;
    if (!waited) ctx.log.info({ day: claim.delivery.day, claimedAt: claim.delivery.claimed_at }, 'digest: another run is sending it; waiting for its outcome');
    if (ctx.signal.aborted) return claim;
    await new Promise<void>((resolve) => {
      const done = () => (clearTimeout(t), ctx.signal.removeEventListener('abort', done), resolve());
      const t = setTimeout(done, CLAIM_POLL_MS);
      ctx.signal.addEventListener('abort', done, { once: true });
    });
  }
}

/** How often a run waiting on another's claim looks again (real time: the other run's SMTP exchange). */
export const CLAIM_POLL_MS = 250;
