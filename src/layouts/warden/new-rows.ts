import type { Db } from '../../store/sqlite.js';
import { canonicalBound, canonicalSql, textUpperBound, DAY_MS } from '../../time/instants.js';
import { clip } from '../../text/untrusted.js';
import type { FlaggedRow, LookTwice, NewRows, Period } from '../contract.js';

/**
 * Rows whose created_at, as an instant, falls in [start, end). The text bounds only skip rows that cannot
 * qualify (any ISO-8601 text of an instant sorts within two days of its UTC date), and let SQLite read just that
 * range off an index on created_at where a store has one (init makes none: measured in the history of BENCHMARKS.md).
 * Canonical text then compares as text (it holds whole seconds: `>= start` is `> text(start − 1 ms)`, `< end` is
 * `<= text(end − 1 ms)`); only other forms reach warden_epoch. Newest first by julianday(), which reads every instant as parseInstant
 * does, to the millisecond (test/store/instant-rule.test.ts). Every row is looked at once, so both counts are
 * exact while only 2 × maxRows rows are kept in memory.
 */
const NEW_ROWS_SQL = `
  SELECT id, subject, fact, source, created_at, expires_at FROM memory
  WHERE created_at >= @lower AND created_at < @upper
    AND CASE WHEN ${canonicalSql('created_at')} THEN created_at > @startBefore AND created_at <= @endBefore
        ELSE warden_epoch(created_at) >= @start AND warden_epoch(created_at) < @end END
  ORDER BY julianday(created_at) DESC, id DESC`;

export function newRows(db: Db, period: Period, maxRows: number, lookTwice: LookTwice): NewRows {
  const lower = new Date(period.start - 2 * DAY_MS).toISOString().slice(0, 10);
  const params = {
    lower, upper: textUpperBound(period.end), start: period.start, end: period.end,
    startBefore: canonicalBound(period.start - 1), endBefore: canonicalBound(period.end - 1),
  };
  const rows = newRowsOf(maxRows, lookTwice);
  // Raw rows (arrays): tens of thousands a day pass here, and only the kept ones become objects.
  for (const r of db.prepare(NEW_ROWS_SQL).raw().iterate(params) as Iterable<unknown[]>) rows.add(r);
  return rows.result();
}

/**
 * The period's rows, given newest first as arrays (id, subject, fact, source, created_at, expires_at), counted and
 * flagged one by one: both counts exact, at most 2 × maxRows rows kept. What every engine's newRows ends in.
 */
export function newRowsOf(maxRows: number, lookTwice: LookTwice): { add(r: unknown[]): void; result(): NewRows } {
  const flagged: FlaggedRow[] = [];
  const rest: FlaggedRow[] = [];
  let total = 0;
  let flaggedCount = 0;
  return {
    add(r) {
      total += 1;
      const reasons = lookTwice({ subject: r[1], fact: r[2], source: r[3] });
      if (reasons.length > 0) flaggedCount += 1;
      const list = reasons.length > 0 ? flagged : rest;
      if (list.length < maxRows) list.push({ ...memoryRow(r), reasons });
    },
    result() {
      const shown = [...flagged, ...rest].slice(0, maxRows);
      return { total, flagged: flaggedCount, shown, more: total - shown.length };
    },
  };
}

// Up to 2 × maxRows rows are held at once and a fact can be a whole fetched page: keep what render can show.
const KEEP_CHARS = 2000;
const keep = (v: unknown) => clip(v, KEEP_CHARS);

function memoryRow([id, subject, fact, source, createdAt, expiresAt]: unknown[]) {
  return {
    id: String(id),
    subject: keep(subject),
    fact: keep(fact),
    source: source === null || source === undefined ? '' : keep(source),
    createdAt: String(createdAt ?? ''),
    expiresAt: expiresAt === null || expiresAt === undefined ? null : String(expiresAt),
  };
}
