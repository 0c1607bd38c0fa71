import type { Db } from '../../store/sqlite.js';
import { LIVE_SQL, reviewCutoff, secondText } from './rules.js';
import { canonicalSql, textUpperBound } from '../../time/instants.js';
import type { MemoryUnderReview } from '../../verifiers/types.js';
import type { ReviewDueOptions, StoreHandle } from '../contract.js';
import { startStoreThreadBeside, storeBytes, THREAD_MIN_BYTES } from '../../store/thread.js';

/** What the review queue is asked for (the contract's ReviewDueOptions). */
export type QueueOptions = ReviewDueOptions;

/**
 * The review queue of BRIEF.md: live rows (not superseded, not expired — as instants) without an expiry, confirmed
 * more than `afterDays` ago, oldest first. Drift is reviewed, never expired. A row whose confirmed_at cannot be parsed is
 * never due here (check reports it). Canonical text compares as text; only other forms reach warden_epoch.
 * `canonical` may name a column already holding canonicalSql('confirmed_at') (check's one pass).
 */
export const dueSql = (canonical = canonicalSql('confirmed_at'), canonicalExpiry = canonicalSql('expires_at')) =>
  `(confirmed_at < @upper AND ${noExpirySql(canonicalExpiry)} AND CASE WHEN ${canonical} THEN confirmed_at <= ${secondText('@cutoff - 1')} ELSE warden_epoch(confirmed_at) < @cutoff END)`;

/**
 * A row with an expiry decays (BRIEF.md: only `expires_at NULL` goes to review): prune ends it, and reviewing it
 * would ask a person again about what they, or the agent, already gave an end (a person's Expire among them).
 * An expiry no instant can be read from never ends the row: that row is reviewed as if it had none.
 */
const noExpirySql = (canonical: string) =>
  `(expires_at IS NULL OR NOT CASE WHEN ${canonical} THEN 1 ELSE warden_epoch(expires_at) IS NOT NULL END)`;
const DUE_WHERE = `
WHERE ${LIVE_SQL}
  AND ${dueSql()}
  AND id NOT IN (SELECT value FROM json_each(@exclude))`;
// Every due row is an instant, and julianday() reads each instant as parseInstant does (src/time/instants.ts), to the
// millisecond: the same order as warden_epoch's, without a JavaScript call per row.
const DUE_SQL = `SELECT id, subject, fact, source, confirmed_at FROM memory ${DUE_WHERE} ORDER BY julianday(confirmed_at), id LIMIT @limit`;
const CANONICAL_DUE_SQL = `SELECT id, subject, fact, source, confirmed_at FROM memory
WHERE ${LIVE_SQL} AND confirmed_at <= ${secondText('@cutoff - 1')} AND ${noExpirySql(canonicalSql('expires_at'))} AND id NOT IN (SELECT value FROM json_each(@exclude))
ORDER BY confirmed_at, id LIMIT @limit`;
const DUE_COUNT_SQL = `SELECT count(*) AS n FROM memory ${DUE_WHERE}`;

export function dueParams(opts: QueueOptions) {
  const cutoff = reviewCutoff(opts.now, opts.afterDays);
  return { now: opts.now, cutoff, upper: textUpperBound(cutoff), exclude: JSON.stringify(opts.exclude ?? []), limit: opts.limit ?? -1 };
}

export function reviewDue(db: Db, opts: QueueOptions): MemoryUnderReview[] {
  if (opts.canonicalOnly) {
    const { upper: _, ...params } = dueParams(opts);
    return db.prepare(CANONICAL_DUE_SQL).all(params) as MemoryUnderReview[];
  }
  return db.prepare(DUE_SQL).all(dueParams(opts)) as MemoryUnderReview[];
}

/**
 * How many rows are due (all of them, `exclude` or not) and the oldest `limit` not in `exclude`, from one scan of
 * the table: the due rows' keys are kept once (a materialized CTE) and both answers read from them. Two
 * statements (reviewDueCount, then reviewDue) read every row twice; this is what the digest asks for.
 */
export function reviewQueue(db: Db, opts: QueueOptions): { due: number; batch: MemoryUnderReview[] } {
  return queueFrom(db, opts, db.prepare(QUEUE_SQL).all(dueParams(opts)) as QueueRow[]);
}

type QueueRow = MemoryUnderReview & { due: number };

/**
 * The count rides on every row of the batch. No row: nothing is due when the batch could have held one (a limit
 * other than 0, nothing excluded); otherwise the count takes a scan of its own.
 */
function queueFrom(db: Db, opts: QueueOptions, rows: QueueRow[]): { due: number; batch: MemoryUnderReview[] } {
  const noneDue = rows.length === 0 && opts.limit !== 0 && (opts.exclude ?? []).length === 0;
  const due = rows[0]?.due ?? (noneDue ? 0 : (db.prepare(`SELECT count(*) AS n FROM memory NOT INDEXED WHERE ${LIVE_DUE_SQL}`).get(dueParams(opts)) as { n: number }).n);
  return { due, batch: rows.map(({ due: _, ...row }) => row) };
}
/**
 * LIVE_SQL AND dueSql(), tested with fewer calls per row. A due row has no expiry an instant can be read from
 * (noExpirySql), and LIVE_SQL holds any such row live whatever the time: of LIVE_SQL only `superseded_by IS NULL`
 * is left to test, and each expiry is tested for its form once, not twice (test/store/instant-rule.test.ts holds the
 * queue to parseInstant on every form, unreadable expiries among them).
 */
const LIVE_DUE_SQL = `(superseded_by IS NULL AND ${dueSql()})`;
// NOT INDEXED: the table is read once, in order. Without statistics SQLite takes memory_superseded for
// `superseded_by IS NULL`, which most rows are, and looks each of them up by rowid.
const QUEUE_SQL = `WITH due AS MATERIALIZED (SELECT rowid AS r, julianday(confirmed_at) AS k, id FROM memory NOT INDEXED WHERE ${LIVE_DUE_SQL})
SELECT m.id, m.subject, m.fact, m.source, m.confirmed_at, (SELECT count(*) FROM due) AS due
FROM (SELECT r, k, id FROM due WHERE id NOT IN (SELECT value FROM json_each(@exclude)) ORDER BY k, id LIMIT @limit) AS b
JOIN memory AS m ON m.rowid = b.r
ORDER BY b.k, b.id`;

/**
 * reviewQueue, its scan on the store thread (src/store/thread.ts, the second core) when the file is large enough to
 * be worth one: the call returns at once, and the caller reads the day's new rows here meanwhile (the digest).
 * A time SQLite cannot compare as canonical text, or a thread that could not run it, and it runs here instead.
 */
export function reviewQueueConcurrently(store: StoreHandle, opts: QueueOptions, threadMinBytes = THREAD_MIN_BYTES): Promise<{ due: number; batch: MemoryUnderReview[] }> {
  if (storeBytes(store.db) < threadMinBytes) return Promise.resolve(reviewQueue(store.db, opts));
  const thread = startStoreThreadBeside(store);
  return thread.call('all', { sql: QUEUE_SQL, params: dueParams(opts) }).then((r) => {
    void thread.close();
    return Array.isArray(r?.result) ? queueFrom(store.db, opts, r.result as QueueRow[]) : reviewQueue(store.db, opts);
  });
}

/** How many rows are due, all of them (the queue's length before the weekly batch is taken). */
export function reviewDueCount(db: Db, opts: QueueOptions): number {
  return (db.prepare(DUE_COUNT_SQL).get(dueParams(opts)) as { n: number }).n;
}
