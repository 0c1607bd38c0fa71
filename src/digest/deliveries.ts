import { createHash, randomBytes } from 'node:crypto';
import type { Db } from '../store/sqlite.js';
import type { Config } from '../config/config.js';
import { parseInstant, toCanonical, type Instant } from '../time/instants.js';

/**
 * The delivery record that makes the digest arrive exactly once per day per recipient list (table
 * `digest_deliveries` in the state db, src/state/migrations/003-digest-deliveries.ts; a fleet keeps the same record in Redis, src/digest/ledger.ts).
 *
 * - A run first *claims* (list, day) inside BEGIN IMMEDIATE: the UNIQUE key and the write lock mean two
 *   concurrent runs (a retry, a second worker) cannot both hold it. The loser sees `sending` and waits for the
 *   outcome (src/digest/digest.ts claimOrWait): it takes over a claim that failed or lapsed.
 * - The claim fixes the period: it starts where the last *sent* digest of this list ended (so an outage day's
 *   rows arrive in the next digest instead of being lost) and ends at now − settle.
 * - Only after the SMTP server accepted the message (its 250 to DATA) is the row marked `sent`; only `sent`
 *   (and `quiet`: nothing was new and allQuiet is off) moves the next period's start. A failed send is marked
 *   `failed`; the retry re-claims the same row and tries again.
 * - The crash window: if the process dies after the server accepted but before `sent` was written, the row is
 *   left `sending`. We chose a possible duplicate over a possible loss: a run of the same day that finds the
 *   claim older than `claimMinutes` takes it over and sends again, with the *same* Message-ID (clients that
 *   de-duplicate by Message-ID show one mail); a later day never resends it, but its period starts at the last
 *   `sent` end, so those rows are listed again rather than lost.
 */

export type DeliveryStatus = 'sending' | 'sent' | 'failed' | 'quiet';

export interface Delivery {
  id: number;
  list_key: string;
  day: string;
  period_start: string;
  period_end: string;
  status: DeliveryStatus;
  claim_token: string | null;
  claimed_at: string;
  attempts: number;
  message_id: string;
  sent_at: string | null;
  response: string | null;
  error: string | null;
  summary: string | null;
}

/** Who gets it and what it covers: the same recipients in another order are the same list. */
export function listKey(recipients: readonly string[], scope: string): string {
  const list = [...new Set(recipients.map((r) => r.trim().toLowerCase()))].sort();
  return `${list.join(',')}|${scope}`;
}

export interface ClaimOptions {
  key: string;
  now: Instant;
  /** End of the period: now − settle, whole seconds. */
  end: Instant;
  /** How far back the very first digest of a list looks. */
  firstPeriodMs: number;
  /** A `sending` claim older than this may be taken over (its sender crashed). */
  claimMs: number;
  /** IANA time zone of the digest's schedule: which day a digest is for. Default UTC. */
  timeZone?: string;
}

export type Claim =
  | { kind: 'claimed'; delivery: Delivery; token: string; takenOver: boolean }
  | { kind: 'already-sent'; delivery: Delivery }
  | { kind: 'in-progress'; delivery: Delivery };

/** The zone the digest is scheduled in (its schedule's tz, else the worker's): it decides which day a digest is for. */
export function digestTimeZone(config: Config): string {
  return config.worker.schedules.digest?.tz ?? config.worker.timezone;
}

/**
 * The day a digest is for: the date of its period end in the time zone the digest is scheduled in, so that a
 * retry running past midnight UTC of a digest scheduled for 18:30 in New York is still that evening's digest.
 */
export function dayOf(end: Instant, timeZone = 'UTC'): string {
  return new Intl.DateTimeFormat('en-CA', { timeZone, year: 'numeric', month: '2-digit', day: '2-digit' }).format(end);
}

export function isTimeZone(timeZone: string): boolean {
  try {
    new Intl.DateTimeFormat('en-CA', { timeZone });
    return true;
  } catch {
    return false;
  }
}

/** Where the next digest of this list starts: the end of the last one sent (or skipped as quiet). */
export function lastCoveredEnd(db: Db, key: string): Instant | null {
  const row = db.prepare(`SELECT max(period_end) AS e FROM digest_deliveries WHERE list_key = ? AND status IN ('sent', 'quiet')`).get(key) as { e: string | null };
  return row.e === null ? null : parseInstant(row.e);
}

/**
 * Where the next period starts: the end of the last covered one; if none was ever covered but some attempt
 * was made (failed, or stuck by a crash), that attempt's start, so a first digest that never got out loses
 * nothing; otherwise `firstPeriodMs` back.
 */
export function periodStart(db: Db, key: string, end: Instant, firstPeriodMs: number): Instant {
  const last = lastCoveredEnd(db, key);
  if (last !== null) return Math.min(last, end);
  const tried = db.prepare(`SELECT min(period_start) AS s FROM digest_deliveries WHERE list_key = ?`).get(key) as { s: string | null };
  const first = tried.s === null ? null : parseInstant(tried.s);
  return Math.min(first ?? end - firstPeriodMs, end);
}

export function claimDelivery(db: Db, opts: ClaimOptions): Claim {
  const day = dayOf(opts.end, opts.timeZone);
  const token = randomBytes(12).toString('hex');
  const nowText = toCanonical(opts.now);
  return db.transaction((): Claim => {
    const row = db.prepare(`SELECT * FROM digest_deliveries WHERE list_key = ? AND day = ?`).get(opts.key, day) as Delivery | undefined;
    if (row) {
      if (row.status === 'sent' || row.status === 'quiet') return { kind: 'already-sent', delivery: row };
      const claimedAt = parseInstant(row.claimed_at) ?? 0;
      if (row.status === 'sending' && opts.now - claimedAt < opts.claimMs) return { kind: 'in-progress', delivery: row };
      // A failed attempt, or a claim whose holder vanished: take it over, keeping the Message-ID and the start.
      const end = toCanonical(Math.max(parseInstant(row.period_end) ?? opts.end, opts.end));
      db.prepare(`UPDATE digest_deliveries SET status = 'sending', claim_token = ?, claimed_at = ?, attempts = attempts + 1, period_end = ?, error = NULL WHERE id = ?`)
        .run(token, nowText, end, row.id);
      const delivery = db.prepare(`SELECT * FROM digest_deliveries WHERE id = ?`).get(row.id) as Delivery;
      return { kind: 'claimed', delivery, token, takenOver: row.status === 'sending' };
    }
    const start = periodStart(db, opts.key, opts.end, opts.firstPeriodMs);
    const hash = createHash('sha256').update(opts.key).digest('hex').slice(0, 12);
    const messageId = `<digest.${day}.${hash}.${token.slice(0, 8)}@memory-warden>`;
    const id = Number(db.prepare(`INSERT INTO digest_deliveries (list_key, day, period_start, period_end, status, claim_token, claimed_at, message_id)
      VALUES (?, ?, ?, ?, 'sending', ?, ?, ?)`).run(opts.key, day, toCanonical(start), toCanonical(opts.end), token, nowText, messageId).lastInsertRowid);
    const delivery = db.prepare(`SELECT * FROM digest_deliveries WHERE id = ?`).get(id) as Delivery;
    return { kind: 'claimed', delivery, token, takenOver: false };
  }).immediate();
}

/** The server accepted the message: this period is reported. Written whoever holds the claim now. */
export function markSent(db: Db, id: number, at: Instant, response: string, summary: unknown): void {
  db.prepare(`UPDATE digest_deliveries SET status = 'sent', sent_at = ?, response = ?, summary = ?, error = NULL WHERE id = ?`)
    .run(toCanonical(at), response, JSON.stringify(summary), id);
}

/** Nothing new and allQuiet is off: nothing sent, and the period counts as covered. */
export function markQuiet(db: Db, id: number, token: string, at: Instant): void {
  db.prepare(`UPDATE digest_deliveries SET status = 'quiet', sent_at = ? WHERE id = ? AND claim_token = ? AND status = 'sending'`).run(toCanonical(at), id, token);
}

/** Only our own claim is marked failed: never overwrite a `sent` written by whoever took over. */
export function markFailed(db: Db, id: number, token: string, error: string): void {
  db.prepare(`UPDATE digest_deliveries SET status = 'failed', error = ? WHERE id = ? AND claim_token = ? AND status = 'sending'`).run(error, id, token);
}

export function deliveries(db: Db, key?: string): Delivery[] {
  return (key
    ? db.prepare(`SELECT * FROM digest_deliveries WHERE list_key = ? ORDER BY day, id`).all(key)
    : db.prepare(`SELECT * FROM digest_deliveries ORDER BY day, id`).all()) as Delivery[];
}
