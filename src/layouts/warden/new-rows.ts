import type { Db } from '../../store/sqlite.js';
import { textUpperBound, DAY_MS } from '../../time.js';
import { clip } from '../../untrusted.js';
import type { FlaggedRow, LookTwice, NewRows, Period } from '../contract.js';

/**
 * Rows whose created_at, as an instant, falls in [start, end). The text bounds only skip rows that cannot
 * qualify (any ISO-8601 text of an instant sorts within two days of its UTC date); warden_epoch decides.
 * Every row is looked at once, so both counts are exact while only 2 × maxRows rows are kept in memory.
 */
export function newRows(db: Db, period: Period, maxRows: number, lookTwice: LookTwice): NewRows {
  const stmt = db.prepare(`
    SELECT id, subject, fact, source, created_at, expires_at FROM memory
    WHERE created_at >= @lower AND created_at < @upper
      AND warden_epoch(created_at) >= @start AND warden_epoch(created_at) < @end
    ORDER BY warden_epoch(created_at) DESC, id DESC`);
  const lower = new Date(period.start - 2 * DAY_MS).toISOString().slice(0, 10);
  const flagged: FlaggedRow[] = [];
  const rest: FlaggedRow[] = [];
  let total = 0;
  let flaggedCount = 0;
  for (const r of stmt.iterate({ lower, upper: textUpperBound(period.end), start: period.start, end: period.end }) as Iterable<Record<string, unknown>>) {
    total += 1;
    const reasons = lookTwice({ subject: r.subject, fact: r.fact, source: r.source });
    if (reasons.length > 0) flaggedCount += 1;
    const list = reasons.length > 0 ? flagged : rest;
    if (list.length < maxRows) list.push({ ...memoryRow(r), reasons });
  }
  const shown = [...flagged, ...rest].slice(0, maxRows);
  return { total, flagged: flaggedCount, shown, more: total - shown.length };
}

// Up to 2 × maxRows rows are held at once and a fact can be a whole fetched page: keep what render can show.
const KEEP_CHARS = 2000;
const keep = (v: unknown) => clip(v, KEEP_CHARS);

function memoryRow(r: Record<string, unknown>) {
  return {
    id: String(r.id),
    subject: keep(r.subject),
    fact: keep(r.fact),
    source: r.source === null || r.source === undefined ? '' : keep(r.source),
    createdAt: String(r.created_at ?? ''),
    expiresAt: r.expires_at === null || r.expires_at === undefined ? null : String(r.expires_at),
  };
}
