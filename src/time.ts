/**
 * Timestamps in a memory store are text written by many hands. The brief's canonical form is SQLite's
 * `datetime('now')`: `YYYY-MM-DD HH:MM:SS`, UTC. Agents also write ISO-8601 with `T`, `Z`, offsets and fractions,
 * and plain text comparison gets those wrong (`2026-11-29T01:00:00Z` sorts after `2026-11-29 12:00:00`). Every
 * comparison here goes through `parseInstant`, which returns epoch milliseconds or null. Null never expires.
 */

const ISO =
  /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?)?\s*(Z|z|[+-]\d{2}(?::?\d{2})?)?$/;

export const CANONICAL = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/;
/**
 * SQL, 1 or 0: `col` holds canonical text that parseInstant reads. `datetime(x) = x` holds exactly for canonical
 * text (datetime() writes nothing else, and turns an impossible date like Feb 30 into another string), except
 * SQLite's `24:00:00`, which it keeps and parseInstant refuses. One datetime() call per row, never NULL.
 */
export const canonicalSql = (col: string) => `(coalesce(datetime(${col}) = ${col}, 0) AND substr(${col}, 12, 2) < '24')`;

export type Instant = number; // epoch milliseconds, UTC

export function parseInstant(value: unknown): Instant | null {
  if (typeof value !== 'string') return null;
  const m = ISO.exec(value.trim());
  if (!m) return null;
  const [, y, mo, d, h = '00', mi = '00', s = '00', frac, zone] = m;
  const year = Number(y), month = Number(mo), day = Number(d);
  const hour = Number(h), minute = Number(mi), second = Number(s);
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return null;
  if (hour > 23 || minute > 59 || second > 59) return null;
  const ms = frac ? Math.floor(Number(`0.${frac}`) * 1000) : 0;
  let offsetMin = 0;
  if (zone && zone !== 'Z' && zone !== 'z') {
    const sign = zone.startsWith('-') ? -1 : 1;
    const digits = zone.slice(1).replace(':', '');
    const oh = Number(digits.slice(0, 2)), om = Number(digits.slice(2) || '0');
    if (oh > 14 || om > 59) return null;
    offsetMin = sign * (oh * 60 + om);
  }
  return Date.UTC(year, month - 1, day, hour, minute, second, ms) - offsetMin * 60_000;
}

function daysInMonth(year: number, month: number): number {
  return new Date(Date.UTC(year, month, 0)).getUTCDate();
}

/** `YYYY-MM-DD HH:MM:SS` in UTC, as SQLite's datetime() writes it. */
export function toCanonical(instant: Instant | Date): string {
  const iso = new Date(instant).toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)}`;
}

/** `2026-11-29T060000Z`: sortable, safe in file names. */
export function toFolderStamp(instant: Instant | Date): string {
  return new Date(instant).toISOString().slice(0, 19).replace(/:/g, '') + 'Z';
}

export type TimeClass = 'canonical' | 'noncanonical' | 'unparseable';

export function classifyTime(value: unknown): TimeClass {
  if (typeof value === 'string' && CANONICAL.test(value) && parseInstant(value) !== null) return 'canonical';
  return parseInstant(value) === null ? 'unparseable' : 'noncanonical';
}

/**
 * A text upper bound for "instant <= t" usable on an index: any ISO-8601 text whose instant is at or before t
 * starts with a date at most one day after t's UTC date (offsets reach +14:00), so it sorts below the date two
 * days after. Rows below the bound are then checked exactly with parseInstant.
 */
export function textUpperBound(instant: Instant): string {
  return new Date(instant + 2 * 86_400_000).toISOString().slice(0, 10);
}

const DURATION = /^(\d+)\s*(s|m|h|d|w)$/;
const UNIT_MS = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 } as const;

/** `90d`, `12h`, `30m` → milliseconds; null when the text is not a duration. */
export function parseDuration(text: string): number | null {
  const m = DURATION.exec(text.trim());
  if (!m) return null;
  return Number(m[1]) * UNIT_MS[m[2] as keyof typeof UNIT_MS];
}

export const DAY_MS = 86_400_000;

/** The one place that reads the wall clock; everything else takes `now` as an argument. */
export const systemClock = (): Instant => Date.now();
export type Clock = () => Instant;
