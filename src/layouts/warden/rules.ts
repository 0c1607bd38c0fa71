import { canonicalBound, canonicalSql, DAY_MS, textUpperBound, type Instant } from '../../time/instants.js';

/**
 * The two prune rules of the brief, written once, in SQL, and used for both finding candidates and the re-check
 * inside each write transaction. Timestamps compare as instants:
 * canonical text (`YYYY-MM-DD HH:MM:SS`, checked with datetime()) as text on the index, any other ISO-8601 form
 * through warden_epoch(); an unparseable value never matches.
 */
export interface PruneRules {
  now: Instant;
  expired: boolean;
  supersededAfterDays: number;
}

export function supersededCutoff(rules: PruneRules): Instant {
  return rules.now - rules.supersededAfterDays * DAY_MS;
}

/** Live rows confirmed more than `afterDays` ago are due for review (drift: re-check, never expire). */
export function reviewCutoff(now: Instant, afterDays: number): Instant {
  return now - afterDays * DAY_MS;
}

/**
 * `col op instant` where the instant is given as @<name>Text, @<name>Ms and @<name>Upper (see instantParams):
 * canonical text compares as text, everything else through warden_epoch, which is NULL (never true) for what it
 * cannot read.
 */
export function instantCompare(col: string, op: '<' | '<=', name: string, canonical = canonicalSql(col)): string {
  // Canonical text holds whole seconds: `<= t` is `<= text(t)` and `< t` is `<= text(t - 1 ms)` (text() rounds down),
  // exact also for an instant with milliseconds, which `< text(t)` was not (it missed t's own second).
  const text = op === '<' ? `@${name}Before` : `@${name}Text`;
  return `(${col} < @${name}Upper AND CASE WHEN ${canonical} THEN ${col} <= ${text} ELSE warden_epoch(${col}) ${op} @${name}Ms END)`;
}

export function instantParams(name: string, at: Instant): Record<string, string | number> {
  return { [`${name}Text`]: canonicalBound(at), [`${name}Before`]: canonicalBound(at - 1), [`${name}Ms`]: at, [`${name}Upper`]: textUpperBound(at) };
}

/**
 * `@<ms>` (epoch ms) as canonical text, rounded down to the second, computed once per statement (a constant):
 * canonical text holds whole seconds, so `text > nowText` is exactly `instant > now`, and `text <= text(t - 1)`
 * exactly `instant < t`.
 */
export const secondText = (ms: string) => `datetime((${ms}) / 1000.0, 'unixepoch')`;

/**
 * Live by the exact rule: not superseded, and not expired at @now (epoch ms); an unparseable expiry never expires.
 * Canonical text compares as text (no JavaScript call per row: what made check and the review queue slow), any
 * other form through warden_epoch. `canonical` may name a column already holding canonicalSql('expires_at').
 */
export const liveSql = (canonical = canonicalSql('expires_at')) =>
  `(superseded_by IS NULL AND (expires_at IS NULL OR CASE WHEN ${canonical} THEN expires_at > ${secondText('@now')} ELSE coalesce(warden_epoch(expires_at) > @now, 1) END))`;
export const LIVE_SQL = liveSql();

/** Expired at now. */
export const EXPIRED_SQL = instantCompare('expires_at', '<=', 'now');
/** Superseded, and created before the cutoff. */
export const LONG_SUPERSEDED_SQL = `(superseded_by IS NOT NULL AND ${instantCompare('created_at', '<', 'cut')})`;
/** Either rule, honouring `prune.expired: false`. */
export const PRUNABLE_SQL = `((@expiredOn AND ${EXPIRED_SQL}) OR ${LONG_SUPERSEDED_SQL})`;
/** PRUNABLE_SQL over columns already holding canonicalSql of expires_at and created_at (check's one pass). */
export const prunableSql = (canonical: { expires_at: string; created_at: string }) =>
  `((@expiredOn AND ${instantCompare('expires_at', '<=', 'now', canonical.expires_at)}) OR (superseded_by IS NOT NULL AND ${instantCompare('created_at', '<', 'cut', canonical.created_at)}))`;

export function pruneParams(rules: PruneRules): Record<string, string | number> {
  return { expiredOn: rules.expired ? 1 : 0, ...instantParams('now', rules.now), ...instantParams('cut', supersededCutoff(rules)) };
}
