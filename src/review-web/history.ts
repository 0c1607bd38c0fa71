import type { Config } from '../config/config.js';
import type { Db } from '../store/sqlite.js';
import type { AnyStoreHandle } from '../layouts/contract.js';
import { jobsOf } from '../layouts/registry.js';
import { lookTwiceReasons, lookTwiceRules } from '../digest/flags.js';
import { DAY_MS, toCanonical, type Instant } from '../time/instants.js';

/** One UTC day of one store, as far as it was recorded; null where nothing ran that day. */
export interface DayFigures {
  day: string;
  /** From the day's last integrity run (job_runs.result): the health gap is rows − live. */
  rows: number | null;
  live: number | null;
  /** Rows the day's prune runs deleted (dry runs not counted). */
  pruned: number;
  /** Rows created that day that are still in the store, and how many of them the digest flags to look twice. */
  newRows: number;
  flagged: number;
}

export const HISTORY_DAYS = 30;

interface RunRow {
  job: string;
  finished_at: string;
  result: string | null;
}

function parse(text: string | null): Record<string, unknown> {
  try {
    const v = JSON.parse(text ?? 'null') as unknown;
    return v && typeof v === 'object' ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

/** The last HISTORY_DAYS days up to today, oldest first: job runs from the state db, new rows from the store. */
export async function storeHistory(config: Config, state: Db, store: AnyStoreHandle, now: Instant): Promise<DayFigures[]> {
  const today = Math.floor(now / DAY_MS) * DAY_MS;
  const first = today - (HISTORY_DAYS - 1) * DAY_MS;
  const days: DayFigures[] = [];
  for (let t = first; t <= today; t += DAY_MS) days.push({ day: toCanonical(t).slice(0, 10), rows: null, live: null, pruned: 0, newRows: 0, flagged: 0 });
  const byDay = new Map(days.map((d) => [d.day, d]));

  const runs = state
    .prepare(`SELECT job, finished_at, result FROM job_runs WHERE store = ? AND outcome = 'ok' AND job IN ('integrity', 'prune') AND finished_at >= ? ORDER BY finished_at, id`)
    .all(store.name, toCanonical(first)) as RunRow[];
  for (const r of runs) {
    const d = byDay.get(r.finished_at.slice(0, 10));
    if (!d) continue;
    const res = parse(r.result);
    if (r.job === 'integrity') {
      d.rows = num(res.rows) ?? d.rows;
      d.live = num(res.live) ?? d.live;
    } else if (res.dryRun !== true) d.pruned += num(res.deleted) ?? 0;
  }

  const rules = lookTwiceRules(config.digest.lookTwice);
  const layout = await jobsOf(store);
  for (const d of days) {
    const start = Date.parse(`${d.day}T00:00:00Z`);
    const n = await layout.newRows(store, { period: { start, end: Math.min(start + DAY_MS, now) }, maxRows: 0, lookTwice: (row) => lookTwiceReasons(row, rules) });
    d.newRows = n.total;
    d.flagged = n.flagged;
  }
  return days;
}
