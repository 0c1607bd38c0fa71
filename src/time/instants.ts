/**
 * Timestamps in a memory store are text written by many hands. The brief's canonical form is SQLite's
 * `datetime('now')`: `YYYY-MM-DD HH:MM:SS`, UTC. Agents also write ISO-8601 with `T`, `Z`, offsets and fractions,
 * and plain text comparison gets those wrong (`2026-11-29T01:00:00Z` sorts after `2026-11-29 12:00:00`). Every
 * comparison here goes through `parseInstant`, which returns epoch milliseconds or null. Null never expires.
 */

/*
 * One rule for what counts as an instant, shared by prune, check, repair and the `live_memory` view that the
 * agent's own SQLite evaluates: a text is an instant exactly when it starts with a 4-digit-year date that is a
 * real calendar date and SQLite's julianday() reads it, and it is the instant julianday() reads. So this is
 * SQLite's own grammar (sqlite3.c: parseYyyyMmDd, parseHhMmSs, parseTimezone), which the view cannot get wrong:
 * `T` or spaces (or nothing) between date and time, `HH:MM[:SS[.fraction]]` with hour 24 allowed, then spaces,
 * `Z`/`z` or `±HH:MM` (up to 14:59), spaces. Not instants: `+0000` and `+00` (no colon), lowercase `t`, a comma
 * fraction, leading spaces, leap second 60, 5-digit or negative years, Feb 30, julian day numbers, unix times,
 * `now`. Those never expire; check lists them as unparseable for a person.
 */
const SP = '[ \\t\\n\\v\\f\\r]';
const ISO = new RegExp(
  `^(\\d{4})-(\\d{2})-(\\d{2})[ \\t\\n\\v\\f\\rT]*` +
    `(?:(\\d{2}):(\\d{2})(?::(\\d{2})(?:\\.(\\d+))?)?${SP}*(?:[Zz]|([+-])(\\d{2}):(\\d{2}))?${SP}*)?$`,
);

/** The SQL twin of parseInstant's first two conditions, for the view (julianday() supplies the third). */
export const instantShapeSql = (col: string) =>
  `(${col} GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' AND date(substr(${col}, 1, 10)) IS substr(${col}, 1, 10))`;

export const CANONICAL = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/;
/**
 * SQL, 1 or 0: `col` holds canonical text that parseInstant reads. `datetime(x) = x` holds exactly for canonical
 * text (datetime() writes nothing else, and turns an impossible date like Feb 30 into another string), except
 * SQLite's `24:00:00`, which it keeps (parseInstant reads it as the next midnight), and negative years, which it
 * writes too. One datetime() call per row, never NULL.
 */
export const canonicalSql = (col: string) => `(coalesce(datetime(${col}) = ${col}, 0) AND substr(${col}, 12, 2) < '24' AND substr(${col}, 1, 1) <> '-')`;

export type Instant = number; // epoch milliseconds, UTC

export function parseInstant(value: unknown): Instant | null {
  if (typeof value !== 'string') return null;
  const m = ISO.exec(value);
  if (!m) return null;
  const [, y, mo, d, h = '00', mi = '00', s = '00', frac, sign, oh = '0', om = '0'] = m;
  const year = Number(y), month = Number(mo), day = Number(d);
  const hour = Number(h), minute = Number(mi), second = Number(s);
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return null;
  if (hour > 24 || minute > 59 || second > 59 || Number(oh) > 14 || Number(om) > 59) return null;
  // SQLite's arithmetic, to the millisecond: the fraction accumulated as a double, capped at .999, rounded.
  let fraction = 0;
  if (frac) {
    let scale = 1;
    for (const c of frac) {
      fraction = fraction * 10 + (c.charCodeAt(0) - 48);
      scale *= 10;
    }
    fraction = Math.min(fraction / scale, 0.999);
  }
  const offsetMin = sign ? (sign === '-' ? -1 : 1) * (Number(oh) * 60 + Number(om)) : 0;
  const midnight = new Date(Date.UTC(2000, month - 1, day));
  midnight.setUTCFullYear(year); // years 0000-0099 too, which Date.UTC would move to the 1900s
  return midnight.getTime() + hour * 3_600_000 + minute * 60_000 + Math.floor((second + fraction) * 1000 + 0.5) - offsetMin * 60_000;
}

function daysInMonth(year: number, month: number): number {
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  return month === 2 ? (leap ? 29 : 28) : [4, 6, 9, 11].includes(month) ? 30 : 31;
}

/** The instants canonical text can hold: 0000-01-01 00:00:00 to 9999-12-31 23:59:59.999 UTC (parseInstant's range). */
export const FIRST_INSTANT: Instant = -62_167_219_200_000;
export const LAST_INSTANT: Instant = 253_402_300_799_999;

/**
 * `YYYY-MM-DD HH:MM:SS` in UTC, as SQLite's datetime() writes it. An instant outside the years 0000-9999 throws:
 * Date would write `+010240-08-21…`, which is no timestamp, and must never reach a store.
 */
export function toCanonical(instant: Instant | Date): string {
  const t = instant instanceof Date ? instant.getTime() : instant;
  if (!inCanonicalRange(t)) throw new RangeError(`time out of range: ${t} ms since 1970 is not within the years 0000 to 9999`);
  const iso = new Date(t).toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)}`;
}

/** Whether canonical text can hold the instant (false for NaN too). */
export const inCanonicalRange = (t: Instant): boolean => t >= FIRST_INSTANT && t <= LAST_INSTANT;

/** For an instant outside that range, a text below every timestamp ('') or above every one ('9999-13'). */
const beyondRange = (t: Instant): string | undefined => (t < FIRST_INSTANT ? '' : t > LAST_INSTANT ? '9999-13' : undefined);

/**
 * A text to compare canonical timestamps with, for an instant that may lie outside what they can hold: its
 * canonical text, else beyondRange's, so `col <= bound` stays exact.
 */
export function canonicalBound(instant: Instant): string {
  return beyondRange(instant) ?? toCanonical(instant);
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
  const bound = instant + 2 * 86_400_000;
  return beyondRange(bound) ?? new Date(bound).toISOString().slice(0, 10);
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
