import type { Db } from '../../store/sqlite.js';
import { LIVE_SQL, reviewCutoff } from './rules.js';
import { textUpperBound, type Instant } from '../../time.js';
import type { MemoryUnderReview } from '../../verifiers/types.js';
import type { ReviewDueOptions } from '../contract.js';

/** What the review queue is asked for (the contract's ReviewDueOptions). */
export type QueueOptions = ReviewDueOptions;

/**
 * The review queue of BRIEF.md: live rows (not superseded, not expired — as instants) confirmed more than
 * `afterDays` ago, oldest first. Drift is reviewed, never expired. A row whose confirmed_at cannot be parsed is
 * never due here (check reports it).
 */
const DUE_WHERE = `
WHERE ${LIVE_SQL}
  AND confirmed_at < @upper AND warden_epoch(confirmed_at) < @cutoff
  AND id NOT IN (SELECT value FROM json_each(@exclude))`;
const DUE_SQL = `SELECT id, subject, fact, source, confirmed_at FROM memory ${DUE_WHERE} ORDER BY warden_epoch(confirmed_at), id LIMIT @limit`;
const DUE_COUNT_SQL = `SELECT count(*) AS n FROM memory ${DUE_WHERE}`;

function dueParams(opts: QueueOptions) {
  const cutoff = reviewCutoff(opts.now, opts.afterDays);
  return { now: opts.now, cutoff, upper: textUpperBound(cutoff), exclude: JSON.stringify(opts.exclude ?? []), limit: opts.limit ?? -1 };
}

export function reviewDue(db: Db, opts: QueueOptions): MemoryUnderReview[] {
  return db.prepare(DUE_SQL).all(dueParams(opts)) as MemoryUnderReview[];
}

/** How many rows are due, all of them (the queue's length before the weekly batch is taken). */
export function reviewDueCount(db: Db, opts: QueueOptions): number {
  return (db.prepare(DUE_COUNT_SQL).get(dueParams(opts)) as { n: number }).n;
}
