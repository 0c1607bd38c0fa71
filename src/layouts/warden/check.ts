import type { CheckReport, StoreHandle } from '../contract.js';
import { journalMode } from '../../store/sqlite.js';
import { liveViewState, memoryColumns } from './schema.js';
import { finding, isProblem, ID_SAMPLE, type Finding } from '../../findings.js';
import { classifyTime, canonicalSql, toCanonical, type Instant } from '../../time.js';
import { LIVE_SQL, PRUNABLE_SQL, pruneParams } from './rules.js';
import { reviewDue as reviewRows, reviewDueCount } from './queue.js';
import type { Progress } from '../../progress.js';

export type { CheckReport } from '../contract.js';

export interface CheckOptions {
  now: Instant;
  reviewAfterDays: number;
  supersededAfterDays: number;
  /** The scans done of the report's (integrity, counts, chains, sources, timestamps, review, prune), on a terminal. */
  progress?: Progress;
}

const TIME_COLUMNS = ['created_at', 'confirmed_at', 'expires_at', 'last_used_at'] as const;
const NOT_NULL_TIMES = new Set(['created_at', 'confirmed_at']);


export function checkStore(store: StoreHandle, opts: CheckOptions): CheckReport {
  const { db } = store;
  const findings: Finding[] = [];
  const count = (sql: string, params: object = {}) => (db.prepare(sql).get(params) as { n: number }).n;
  const ids = (sql: string, params: object = {}) => (db.prepare(sql).all(params) as { id: string }[]).map((r) => String(r.id));

  opts.progress?.start('check', 7, 'steps');
  const integrityLines = (db.pragma('integrity_check') as { integrity_check: string }[]).map((r) => r.integrity_check);
  const integrity = integrityLines.join('; ');
  if (integrity !== 'ok') findings.push(finding('integrity', 'error', `PRAGMA integrity_check: ${integrityLines.slice(0, 5).join('; ')}`));

  const mode = journalMode(db);
  if (mode !== 'wal') findings.push(finding('not_wal', 'warning', `journal mode is ${mode}, not wal: the agent and maintenance block each other (init switches it on)`));

  const view = liveViewState(db);
  if (view === 'missing') findings.push(finding('no_live_view', 'warning', 'no live_memory view: retrieval should read live rows only (init adds it)'));
  if (view === 'old') findings.push(finding('old_live_view', 'warning', 'live_memory is an earlier definition that disagrees with prune on some expiry forms (init replaces it)'));
  if (view === 'foreign') findings.push(finding('foreign_live_view', 'info', 'live_memory is not memory-warden\'s definition: its expiry rule may differ from prune\'s'));

  opts.progress?.tick();
  const rows = count(`SELECT count(*) AS n FROM memory`);
  const live = count(`SELECT count(*) AS n FROM memory WHERE ${LIVE_SQL}`, { now: opts.now });

  opts.progress?.tick();
  const dangling = db
    .prepare(`SELECT m.id, m.superseded_by FROM pragma_foreign_key_check('memory') f JOIN memory m ON m.rowid = f.rowid`)
    .all() as { id: string; superseded_by: string }[];
  if (dangling.length > 0) {
    findings.push(
      finding('dangling', 'error',
        `${dangling.length} row(s) superseded by a row that no longer exists (foreign keys were off when it was deleted); never reset them to NULL — repair dangling deletes them`,
        dangling.map((r) => r.id)),
    );
  }

  opts.progress?.tick();
  const emptySource = ids(`SELECT id FROM memory WHERE source IS NULL OR trim(source) = '' LIMIT ${ID_SAMPLE}`);
  if (emptySource.length > 0) {
    const n = count(`SELECT count(*) AS n FROM memory WHERE source IS NULL OR trim(source) = ''`);
    findings.push(finding('empty_source', 'warning', `${n} row(s) with no source: they cannot be re-checked, only deleted`, emptySource, n));
  }

  opts.progress?.tick();
  findings.push(...timeFindings(store));
  opts.progress?.tick();

  // The same queue drift and the digest work from (src/layouts/warden/queue.ts).
  const due = { now: opts.now, afterDays: opts.reviewAfterDays };
  const reviewDue = reviewDueCount(db, due);
  if (reviewDue > 0) {
    const oldest = reviewRows(db, { ...due, limit: ID_SAMPLE }).map((r) => r.id);
    findings.push(finding('review_due', 'info', `${reviewDue} live row(s) confirmed more than ${opts.reviewAfterDays} days ago: due for review`, oldest, reviewDue));
  }

  opts.progress?.tick();
  const pending = count(`SELECT count(*) AS n FROM memory WHERE ${PRUNABLE_SQL}`,
    pruneParams({ now: opts.now, expired: true, supersededAfterDays: opts.supersededAfterDays }));
  if (pending > 0) findings.push(finding('prune_pending', 'info', `${pending} row(s) expired or long superseded: the next prune deletes them (and the older versions behind them)`, undefined, pending));

  opts.progress?.done();
  const problems = findings.filter(isProblem);
  return {
    ok: problems.length === 0,
    store: store.name,
    path: store.path,
    checkedAt: toCanonical(opts.now),
    rows,
    live,
    gap: rows - live,
    integrity,
    journalMode: mode,
    dangling: dangling.length,
    reviewDue,
    problems,
    notes: findings.filter((f) => !isProblem(f)),
  };
}

/** Timestamps not in canonical UTC form (repair timestamps rewrites them) and ones that are not times at all. */
function timeFindings(store: StoreHandle): Finding[] {
  const cols = memoryColumns(store.db);
  // Counts are exact; only a sample of ids is kept, so a store of a million odd timestamps stays small here.
  const tally = () => ({ n: 0, ids: [] as string[] });
  const nonCanonical = tally();
  const unparseable = tally();
  const missing = tally();
  const note = (t: ReturnType<typeof tally>, id: string, col: string) => {
    t.n += 1;
    if (t.ids.length < ID_SAMPLE) t.ids.push(`${id}:${col}`);
  };
  for (const col of TIME_COLUMNS) {
    if (!cols.has(col)) continue;
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
