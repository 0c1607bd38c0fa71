import type { Db } from '../../store/sqlite.js';
import { canonicalBound, canonicalSql, textUpperBound, DAY_MS } from '../../time/instants.js';
import { clip } from '../../text/untrusted.js';
import type { FlaggedRow, LookTwice, NewRows, Period } from '../contract.js';

/**
 * Rows whose created_at, as an instant, falls in [start, end). The text bounds only skip rows that cannot
 * qualify (any ISO-8601 text of an instant sorts within two days of its UTC date), and let SQLite read just that
 * range off an index on created_at where a store has one (init makes none: measured in the history of BENCHMARKS.md).
 * Canonical text then compares as text (it holds whole seconds: `>= start` is `> text(start − 1 ms)`, `< end` is
 * `<= text(end − 1 ms)`); only other forms reach warden_epoch. Every row is looked at once, so both counts are exact.
 * Newest first by julianday(), which reads every instant as parseInstant does, to the millisecond
 * (test/store/instant-rule.test.ts), then by id: SQLite no longer sorts the day's rows (tens of thousands of whole
 * rows, which spilled to a temp file past its cache), the kept ones are chosen here (newRowsOf's `newest`). Read
 * newest rowid first, as rows are mostly written in time order: past the first maxRows of a list, most rows are
 * older than all it keeps, and are counted and flagged but never copied.
 */
const NEW_ROWS_SQL = `
  SELECT id, subject, fact, source, created_at, expires_at, julianday(created_at) FROM memory
  WHERE created_at >= @lower AND created_at < @upper
    AND CASE WHEN ${canonicalSql('created_at')} THEN created_at > @startBefore AND created_at <= @endBefore
        ELSE warden_epoch(created_at) >= @start AND warden_epoch(created_at) < @end END`;
const NEWEST_ROWID_FIRST = `${NEW_ROWS_SQL} ORDER BY rowid DESC`;

/** Newest rowid first where that costs no sort (a scan of the table); read off an index on created_at, as it comes. */
function newRowsSql(db: Db): string {
  const plan = (db.prepare(`EXPLAIN QUERY PLAN ${NEWEST_ROWID_FIRST}`).all(PLAN_PARAMS) as { detail: string }[]).map((r) => r.detail).join('; ');
  return /TEMP B-TREE/.test(plan) ? NEW_ROWS_SQL : NEWEST_ROWID_FIRST;
}
const PLAN_PARAMS = { lower: '', upper: '', start: 0, end: 0, startBefore: '', endBefore: '' };

export function newRows(db: Db, period: Period, maxRows: number, lookTwice: LookTwice): NewRows {
  const lower = new Date(period.start - 2 * DAY_MS).toISOString().slice(0, 10);
  const params = {
    lower, upper: textUpperBound(period.end), start: period.start, end: period.end,
    startBefore: canonicalBound(period.start - 1), endBefore: canonicalBound(period.end - 1),
  };
  const rows = newRowsOf(maxRows, lookTwice, 'newest');
  // Raw rows (arrays): tens of thousands a day pass here, and only the kept ones become objects.
  for (const r of db.prepare(newRowsSql(db)).raw().iterate(params) as Iterable<unknown[]>) rows.add(r);
  return rows.result();
}

/**
 * The period's rows as arrays (id, subject, fact, source, created_at, expires_at), counted and flagged one by one:
 * both counts exact, at most 2 × maxRows rows kept (4 × maxRows while choosing). What every engine's newRows ends
 * in. `given`: 'ordered', the rows come newest first; 'newest', in any order, each with its julianday(created_at)
 * seventh, and the newest are chosen here as SQLite's `ORDER BY julianday(created_at) DESC, id DESC` orders them.
 */
export function newRowsOf(maxRows: number, lookTwice: LookTwice, given: 'ordered' | 'newest' = 'ordered'): { add(r: unknown[]): void; result(): NewRows } {
  const flagged = given === 'ordered' ? firstOnes(maxRows) : newestOnes(maxRows);
  const rest = given === 'ordered' ? firstOnes(maxRows) : newestOnes(maxRows);
  let total = 0;
  let flaggedCount = 0;
  return {
    add(r) {
      total += 1;
      const reasons = lookTwice({ subject: r[1], fact: r[2], source: r[3] });
      if (reasons.length > 0) flaggedCount += 1;
      (reasons.length > 0 ? flagged : rest).offer(r, reasons);
    },
    result() {
      const shown = [...flagged.kept(), ...rest.kept()].slice(0, maxRows);
      return { total, flagged: flaggedCount, shown, more: total - shown.length };
    },
  };
}

interface Kept { offer(r: unknown[], reasons: string[]): void; kept(): FlaggedRow[] }

/** The first `max` rows offered. */
function firstOnes(max: number): Kept {
  const list: FlaggedRow[] = [];
  return {
    offer(r, reasons) {
      if (list.length < max) list.push({ ...memoryRow(r), reasons });
    },
    kept: () => list,
  };
}

interface Candidate { day: number | null; id: unknown; row: FlaggedRow }

/**
 * The `max` newest rows offered in any order, newest first: by julianday (r[6]) descending, nulls last, then by id
 * descending, as SQLite orders values (sqliteOrder). Candidates gather up to 2 × max, are sorted and cut to max; from
 * then on a row no newer than the last kept is passed over before it is copied.
 */
function newestOnes(max: number): Kept {
  let list: Candidate[] = [];
  let last: Candidate | undefined;
  const cut = () => {
    list.sort(newerFirst);
    if (list.length > max) list = list.slice(0, max);
    last = list.length === max ? list[max - 1] : undefined;
  };
  return {
    offer(r, reasons) {
      if (max === 0) return;
      const day = typeof r[6] === 'number' ? r[6] : null;
      if (last && newerFirst({ day, id: r[0] }, last) >= 0) return;
      list.push({ day, id: r[0], row: { ...memoryRow(r), reasons } });
      if (list.length >= 2 * max) cut();
    },
    kept() {
      cut();
      return list.map((c) => c.row);
    },
  };
}

/** Negative when `a` comes first in `ORDER BY julianday(created_at) DESC, id DESC`. */
function newerFirst(a: Pick<Candidate, 'day' | 'id'>, b: Pick<Candidate, 'day' | 'id'>): number {
  if (a.day !== b.day) {
    if (a.day === null) return 1;
    if (b.day === null) return -1;
    return b.day - a.day;
  }
  return sqliteOrder(b.id, a.id);
}

/**
 * SQLite's order of two values as better-sqlite3 gives them (BINARY collation): NULL, then numbers, then text by
 * its UTF-8 bytes, then blobs by their bytes.
 */
export function sqliteOrder(a: unknown, b: unknown): number {
  const rank = (v: unknown) => (v === null || v === undefined ? 0 : typeof v === 'number' || typeof v === 'bigint' ? 1 : typeof v === 'string' ? 2 : 3);
  const ra = rank(a);
  const rb = rank(b);
  if (ra !== rb) return ra - rb;
  if (ra === 0) return 0;
  if (ra === 1) return (a as number) < (b as number) ? -1 : (a as number) > (b as number) ? 1 : 0;
  const bytes = (v: unknown) => (typeof v === 'string' ? Buffer.from(v, 'utf8') : Buffer.from(v as Uint8Array));
  return Buffer.compare(bytes(a), bytes(b));
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
