import { canonicalSql, DAY_MS, textUpperBound, toCanonical, type Instant } from '../../time.js';

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
export function instantCompare(col: string, op: '<' | '<=', name: string): string {
  return `(${col} < @${name}Upper AND CASE WHEN ${canonicalSql(col)} THEN ${col} ${op} @${name}Text ELSE warden_epoch(${col}) ${op} @${name}Ms END)`;
}

export function instantParams(name: string, at: Instant): Record<string, string | number> {
  return { [`${name}Text`]: toCanonical(at), [`${name}Ms`]: at, [`${name}Upper`]: textUpperBound(at) };
}

/** Live by the exact rule: not superseded, and not expired at @now (epoch ms); an unparseable expiry never expires. */
export const LIVE_SQL = `(superseded_by IS NULL AND (expires_at IS NULL OR coalesce(warden_epoch(expires_at) > @now, 1)))`;

/** Expired at now. */
export const EXPIRED_SQL = instantCompare('expires_at', '<=', 'now');
/** Superseded, and created before the cutoff. */
export const LONG_SUPERSEDED_SQL = `(superseded_by IS NOT NULL AND ${instantCompare('created_at', '<', 'cut')})`;
/** Either rule, honouring `prune.expired: false`. */
export const PRUNABLE_SQL = `((@expiredOn AND ${EXPIRED_SQL}) OR ${LONG_SUPERSEDED_SQL})`;

export function pruneParams(rules: PruneRules): Record<string, string | number> {
  return { expiredOn: rules.expired ? 1 : 0, ...instantParams('now', rules.now), ...instantParams('cut', supersededCutoff(rules)) };
}
