import type { CheckReport, StoreHandle } from '../contract.js';
import { journalMode } from '../../store/sqlite.js';
import { startStoreThreadBeside, storeBytes, THREAD_MIN_BYTES } from '../../store/thread.js';
import { liveViewState, memoryColumns } from './schema.js';
import { finding, isProblem, ID_SAMPLE, type Finding } from '../../job/findings.js';
import type { Progress } from '../../progress/progress.js';
import { classifyTime, canonicalSql, textUpperBound, toCanonical, type Instant } from '../../time/instants.js';
import { liveSql, prunableSql, pruneParams, reviewCutoff } from './rules.js';
import { dueSql, reviewDue as reviewRows } from './queue.js';

export type { CheckReport } from '../contract.js';

export interface CheckOptions {
  now: Instant;
  reviewAfterDays: number;
  supersededAfterDays: number;
  /** Steps done, on a terminal (src/progress/progress.ts). */
  progress?: Progress;
  /** checkStoreConcurrently: below this file size integrity_check runs here, not on a thread (tests give 0). */
  threadMinBytes?: number;
}

const TIME_COLUMNS = ['created_at', 'confirmed_at', 'expires_at', 'last_used_at'] as const;
const NOT_NULL_TIMES = new Set(['created_at', 'confirmed_at']);


/** checkStore, with PRAGMA integrity_check on a second core (its own connection) while the rows are scanned here. */
export async function checkStoreConcurrently(store: StoreHandle, opts: CheckOptions): Promise<CheckReport> {
  // A small store is checked in less time than a thread takes to start (a V8 isolate, better-sqlite3 loaded again).
  if (storeBytes(store.db) < (opts.threadMinBytes ?? THREAD_MIN_BYTES)) return checkStore(store, opts);
  const integrity = integrityOnThread(store);
  let report: Rows;
  try {
    report = checkRows(store, opts);
  } catch (err) {
    integrity.cancel();
    throw err;
  }
  // A thread that could not run it (no worker, a function the schema needs): here, on the store's connection.
  return assemble(report, (await integrity.lines) ?? structure(store));
}


export function checkStore(store: StoreHandle, opts: CheckOptions): CheckReport {
  return assemble(checkRows(store, opts), structure(store));
}

const integrityCheck = (store: StoreHandle) =>
  (store.db.pragma('integrity_check') as { integrity_check: string }[]).map((r) => r.integrity_check);

type Rows = Omit<CheckReport, 'integrity' | 'ok' | 'dangling'> & { findings: Finding[] };

/** The report, findings in the order check always gave them: integrity first, dangling after the schema's. */
function assemble(r: Rows, s: Structure): CheckReport {
  const integrity = s.integrity.join('; ');
  const findings = [...r.findings];
  if (s.dangling.count > 0) {
    const at = findings.findIndex((f) => !['not_wal', 'no_live_view', 'old_live_view', 'foreign_live_view'].includes(f.code));
    findings.splice(at < 0 ? findings.length : at, 0, finding('dangling', 'error',
      `${s.dangling.count} row(s) superseded by a row that no longer exists (foreign keys were off when it was deleted); never reset them to NULL — repair dangling deletes them`,
      s.dangling.ids, s.dangling.count));
  }
  if (integrity !== 'ok') findings.unshift(finding('integrity', 'error', `PRAGMA integrity_check: ${s.integrity.slice(0, 5).join('; ')}`));
  const problems = findings.filter(isProblem);
  return {
    ok: problems.length === 0, store: r.store, path: r.path, checkedAt: r.checkedAt, rows: r.rows, live: r.live, gap: r.gap,
    integrity, journalMode: r.journalMode, dangling: s.dangling.count, reviewDue: r.reviewDue, problems, notes: findings.filter((f) => !isProblem(f)),
  };
}

function checkRows(store: StoreHandle, opts: CheckOptions): Rows {
  const { db } = store;
  const findings: Finding[] = [];
  const ids = (sql: string, params: object = {}) => (db.prepare(sql).all(params) as { id: string }[]).map((r) => String(r.id));

  opts.progress?.start('check', 4, 'steps');
  const mode = journalMode(db);
  if (mode !== 'wal') findings.push(finding('not_wal', 'warning', `journal mode is ${mode}, not wal: the agent and maintenance block each other (init switches it on)`));

  const view = liveViewState(db);
  if (view === 'missing') findings.push(finding('no_live_view', 'warning', 'no live_memory view: retrieval should read live rows only (init adds it)'));
  if (view === 'old') findings.push(finding('old_live_view', 'warning', 'live_memory is an earlier definition that disagrees with prune on some expiry forms (init replaces it)'));
  if (view === 'foreign') findings.push(finding('foreign_live_view', 'info', 'live_memory is not memory-warden\'s definition: its expiry rule may differ from prune\'s'));

  opts.progress?.tick();
  const t = tallyRows(store, opts);
  opts.progress?.tick();

  if (t.emptySource > 0) {
    const sample = ids(`SELECT id FROM memory WHERE source IS NULL OR trim(source) = '' LIMIT ${ID_SAMPLE}`);
    findings.push(finding('empty_source', 'warning', `${t.emptySource} row(s) with no source: they cannot be re-checked, only deleted`, sample, t.emptySource));
  }

  findings.push(...timeFindings(store, TIME_COLUMNS.filter((c) => (t.odd[c] ?? 0) > 0)));
  opts.progress?.tick();

  // The same queue drift and the digest work from (src/layouts/warden/queue.ts).
  const due = { now: opts.now, afterDays: opts.reviewAfterDays };
  if (t.reviewDue > 0) {
    const oldest = reviewRows(db, { ...due, limit: ID_SAMPLE, canonicalOnly: t.odd.confirmed_at === 0 }).map((r) => r.id);
    findings.push(finding('review_due', 'info', `${t.reviewDue} live row(s) confirmed more than ${opts.reviewAfterDays} days ago: due for review`, oldest, t.reviewDue));
  }

  opts.progress?.done();
  if (t.pending > 0) findings.push(finding('prune_pending', 'info', `${t.pending} row(s) expired or long superseded: the next prune deletes them (and the older versions behind them)`, undefined, t.pending));

  return {
    store: store.name,
    path: store.path,
    checkedAt: toCanonical(opts.now),
    rows: t.rows,
    live: t.live,
    gap: t.rows - t.live,
    journalMode: mode,
    reviewDue: t.reviewDue,
    problems: [],
    notes: [],
    findings,
  };
}

interface Tally {
  rows: number;
  live: number;
  emptySource: number;
  reviewDue: number;
  pending: number;
  /** Per time column, the values that are not canonical (or missing where they may not be). */
  odd: Record<string, number>;
}

/**
 * Every count check reports, in one pass over the table. Each timestamp is tested for canonical form once (one
 * datetime() call, in the inner query, which the LIMIT keeps from being merged into the outer one); the live,
 * review and prune rules then compare canonical text as text and send only other forms to warden_epoch. These
 * are the rules of src/store/rules.ts and src/drift/queue.ts, handed the tested columns.
 */
function tallyRows(store: StoreHandle, opts: CheckOptions): Tally {
  const cols = memoryColumns(store.db);
  const times = TIME_COLUMNS.filter((c) => cols.has(c));
  const flag = (c: string) => `canon_${c}`;
  const others = times.filter((c) => c !== 'confirmed_at');
  // As a value (not a condition) every part of canonicalSql is evaluated: NULL, the usual expiry, skips them all.
  const canonical = (c: string) => `CASE WHEN ${c} IS NULL THEN 0 ELSE ${canonicalSql(c)} END`;
  const tested = `SELECT superseded_by, source, ${times.join(', ')}, ${others.map((c) => `${canonical(c)} AS ${flag(c)}`).join(', ')} FROM memory LIMIT -1`;
  // confirmed_at is created_at until a row is first confirmed (both default to datetime('now')): tested once.
  const inner = `SELECT *, CASE WHEN confirmed_at IS created_at THEN ${flag('created_at')} ELSE ${canonical('confirmed_at')} END AS ${flag('confirmed_at')} FROM (${tested}) LIMIT -1`;
  const odd = times.map((c) => `count(*) FILTER (WHERE ${NOT_NULL_TIMES.has(c) ? `${c} IS NULL OR ` : ''}(${c} IS NOT NULL AND NOT ${flag(c)})) AS odd_${c}`);
  const live = liveSql(flag('expires_at'));
  // FILTER clauses, not sum(condition): only a WHERE-like condition stops at the first false AND (or true OR); as
  // a value SQLite evaluates both sides, and called warden_epoch on every NULL expiry. trim() only for what can
  // be all spaces: text below '!', or a blob.
  const sql = `SELECT count(*) AS rows, count(*) FILTER (WHERE ${live}) AS live,
      count(*) FILTER (WHERE source IS NULL OR ((source < '!' OR source >= x'') AND trim(source) = '')) AS emptySource,
      count(*) FILTER (WHERE ${live} AND ${dueSql(flag('confirmed_at'), flag('expires_at'))}) AS reviewDue,
      count(*) FILTER (WHERE ${prunableSql({ expires_at: flag('expires_at'), created_at: flag('created_at') })}) AS pending,
      ${odd.join(', ')}
    FROM (${inner})`;
  const cutoff = reviewCutoff(opts.now, opts.reviewAfterDays);
  const params = {
    ...pruneParams({ now: opts.now, expired: true, supersededAfterDays: opts.supersededAfterDays }),
    now: opts.now, cutoff, upper: textUpperBound(cutoff),
  };
  const r = store.db.prepare(sql).get(params) as Record<string, number>;
  return {
    rows: r.rows!, live: r.live!, emptySource: r.emptySource!, reviewDue: r.reviewDue!, pending: r.pending!,
    odd: Object.fromEntries(times.map((c) => [c, r[`odd_${c}`] ?? 0])),
  };
}

/** Timestamps not in canonical UTC form (repair timestamps rewrites them) and ones that are not times at all. */
function timeFindings(store: StoreHandle, columns: readonly string[]): Finding[] {
  // Counts are exact; only a sample of ids is kept, so a store of a million odd timestamps stays small here.
  const tally = () => ({ n: 0, ids: [] as string[] });
  const nonCanonical = tally();
  const unparseable = tally();
  const missing = tally();
  const note = (t: ReturnType<typeof tally>, id: string, col: string) => {
    t.n += 1;
    if (t.ids.length < ID_SAMPLE) t.ids.push(`${id}:${col}`);
  };
  for (const col of columns) {
    // canonicalSql holds exactly for valid canonical text; only the rest is looked at in JS. NULL is fine
    // where the column may be empty (expires_at, last_used_at), so those rows are not even read.
    const nullOdd = NOT_NULL_TIMES.has(col) ? `${col} IS NULL OR ` : '';
    const odd = store.db.prepare(`SELECT id, ${col} AS v FROM memory WHERE ${nullOdd}(${col} IS NOT NULL AND NOT ${canonicalSql(col)})`);
    for (const { id, v } of odd.iterate() as Iterable<{ id: string; v: unknown }>) {
      if (v === null) note(missing, id, col);
      else note(classifyTime(v) === 'unparseable' ? unparseable : nonCanonical, id, col);
    }
  }
  const out: Finding[] = [];
  if (nonCanonical.n > 0) out.push(finding('noncanonical_time', 'warning', `${nonCanonical.n} timestamp(s) not in canonical UTC form YYYY-MM-DD HH:MM:SS (repair timestamps rewrites them)`, nonCanonical.ids, nonCanonical.n));
  if (unparseable.n > 0) out.push(finding('unparseable_time', 'error', `${unparseable.n} timestamp(s) that are not ISO-8601 instants: never treated as expired, fix by hand`, unparseable.ids, unparseable.n));
  if (missing.n > 0) out.push(finding('missing_time', 'warning', `${missing.n} created_at/confirmed_at value(s) missing`, missing.ids, missing.n));
  return out;
}

/**
 * PRAGMA integrity_check and foreign_key_check on a second connection on a worker thread (src/store/thread.ts):
 * integrity_check reads every page and index, as much time as the rest of check together, and runs beside it on
 * the second core. `lines` is null when the thread could not do it (the caller then runs it on the store's
 * connection and gets the error there, naming the file).
 */
interface Structure {
  integrity: string[];
  /** Rows whose superseded_by names no row (PRAGMA foreign_key_check): how many, and the first ids. */
  dangling: { count: number; ids: string[] };
}

const DANGLING_SQL = `SELECT m.id FROM pragma_foreign_key_check('memory') f JOIN memory m ON m.rowid = f.rowid`;

function structure(store: StoreHandle): Structure {
  const all = store.db.prepare(DANGLING_SQL).pluck().all() as unknown[];
  return { integrity: integrityCheck(store), dangling: { count: all.length, ids: all.slice(0, ID_SAMPLE).map(String) } };
}

function integrityOnThread(store: StoreHandle): { lines: Promise<Structure | null>; cancel(): void } {
  const thread = startStoreThreadBeside(store);
  const lines = thread.call('integrity', { danglingSql: DANGLING_SQL, sample: ID_SAMPLE }).then((r) => {
    void thread.close();
    const m = r?.result as Structure | undefined;
    return m && Array.isArray(m.integrity) ? m : null;
  });
  return { lines, cancel: () => thread.terminate() };
}
