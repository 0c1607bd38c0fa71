import { parseInstant, DAY_MS, type Instant } from '../time.js';

/** The two prune rules of the brief, evaluated exactly (as instants) in one place. */
export interface PruneRules {
  now: Instant;
  expired: boolean;
  supersededAfterDays: number;
}

export interface RowTimes {
  expires_at: unknown;
  superseded_by: unknown;
  created_at: unknown;
}

export function isExpired(row: RowTimes, now: Instant): boolean {
  const t = parseInstant(row.expires_at);
  return t !== null && t <= now;
}

export function supersededCutoff(rules: PruneRules): Instant {
  return rules.now - rules.supersededAfterDays * DAY_MS;
}

/** Superseded and created before the cutoff. An unparseable created_at is never old enough. */
export function isLongSuperseded(row: RowTimes, cutoff: Instant): boolean {
  if (row.superseded_by === null || row.superseded_by === undefined) return false;
  const t = parseInstant(row.created_at);
  return t !== null && t < cutoff;
}

export type PruneReason = 'expired' | 'superseded' | 'cascaded';

export function pruneReason(row: RowTimes, rules: PruneRules): PruneReason {
  if (rules.expired && isExpired(row, rules.now)) return 'expired';
  if (isLongSuperseded(row, supersededCutoff(rules))) return 'superseded';
  return 'cascaded';
}

export function qualifiesForPrune(row: RowTimes, rules: PruneRules): boolean {
  return pruneReason(row, rules) !== 'cascaded';
}

/** Live rows confirmed more than `afterDays` ago are due for review (drift: re-check, never expire). */
export function reviewCutoff(now: Instant, afterDays: number): Instant {
  return now - afterDays * DAY_MS;
}
