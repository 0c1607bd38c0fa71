import type { Config } from '../config/config.js';
import { expandHome, stateDbWithoutConfig } from '../config/read.js';
import { resolve } from 'node:path';
import { restoreJournalBase, withPendingRestore } from '../snapshot/journal.js';
import type { Db } from '../store/sqlite.js';
import type { JobContext } from '../job/job.js';
import type { CheckReport } from '../layouts/contract.js';
import { openStoreOnEngine, storeSelector } from '../layouts/open.js';
import { lastRun } from '../state/state.js';
import { parseInstant, toCanonical, type Instant } from '../time/instants.js';
import { jobsOf } from '../layouts/registry.js';
import { engineFor } from '../engines/registry.js';
import { lookTwiceReasons, lookTwiceRules, type LookTwiceRules } from './flags.js';
import { maskDeep } from '../text/credentials.js';
import { attachReviewLinks } from './review-links.js';
import { memoryTexts } from './texts.js';
import type { AwaitingVerdict, DigestModel, FailedJob, PruneSummary, SnapshotSummary, StoreSection } from './model.js';

export type { Period } from '../layouts/contract.js';
import type { Period } from '../layouts/contract.js';

export interface CollectOptions {
  config: Config;
  /** The state db: job runs, drift verdicts. */
  state: Db;
  stores: string[];
  period: Period;
  now: Instant;
  /** `all stores` or the store name of a per-store digest. */
  scope: string;
  /** A store's own start when earlier than period.start: an earlier digest had no report of it (ledger storeStarts). */
  storeStarts?: Record<string, Instant>;
  /**
   * Keep what this digest saw memories rewritten in place say (src/digest/texts.ts), the next digest's before.
   * Default true; a preview, which records nothing, says false (it still reads the record).
   */
  recordTexts?: boolean;
  /** For calling the integrity job's function (logger, signal); its clock is `now`. */
  ctx: Pick<JobContext, 'log' | 'signal'>;
  /**
   * Stores on other hosts of a fleet: `elsewhere` names a store's host when it is not this one, and `sections`
   * collects them there (src/digest/fleet.ts). Without it every store is read here.
   */
  fleet?: {
    elsewhere(store: string): string | null;
    sections(stores: string[]): Promise<StoreSection[]>;
  };
}

const AWAITING_SHOWN = 20;

/** Gather everything one digest says. Reads only; a store that cannot be read becomes a section saying so. */
export async function collectDigest(opts: CollectOptions): Promise<DigestModel> {
  const remote = opts.fleet ? opts.stores.filter((s) => opts.fleet!.elsewhere(s) !== null) : [];
  const masked = new Map<string, Promise<string>>();
  const byName = new Map((await collectSections({ ...opts, stores: opts.stores.filter((s) => !remote.includes(s)) }, masked)).map((s) => [s.name, s]));
  if (remote.length > 0) for (const s of await opts.fleet!.sections(remote)) if (remote.includes(s.name)) byName.set(s.name, s);
  const sections = opts.stores.map((name) => byName.get(name) ?? { ...emptySection(name, opts.config.review.afterDays), error: 'no report' });
  const failedGlobalJobs = failedJobs(opts.state, runsPeriod(opts.config, opts.period), null);
  const quiet =
    failedGlobalJobs.length === 0 &&
    sections.every((s) => !s.error && s.newRows.total === 0 && s.maintenance.failedJobs.length === 0 && s.maintenance.problems.length === 0);
  return {
    period: { start: toCanonical(opts.period.start), end: toCanonical(opts.period.end) },
    generatedAt: toCanonical(opts.now),
    scope: opts.scope,
    // Credentials never reach a rendered digest: every text field is masked here, before render clips it,
    // with the one catalogue of credentials (src/text/credentials.ts). Ids stay exact: the review commands need them.
    stores: await maskDeep(sections, SHOWN_EXACT, masked),
    failedGlobalJobs: await maskDeep(failedGlobalJobs, SHOWN_EXACT, masked),
    quiet,
  };
}

// Ids and the review page's links (our own, signed) are shown exactly: masking would break them.
const SHOWN_EXACT = new Set(['id', 'ids', 'memoryId', 'select', 'name', 'link']);

/** The sections of `opts.stores`, each read here: on the host that holds them. */
export async function collectSections(opts: CollectOptions, masked = new Map<string, Promise<string>>()): Promise<StoreSection[]> {
  const rules = lookTwiceRules(opts.config.digest.lookTwice);
  const sections: StoreSection[] = [];
  for (const name of opts.stores) sections.push(await collectStore(name, rules, opts, masked));
  return sections;
}

export function emptySection(name: string, afterDays: number): StoreSection {
  return {
    name,
    select: { flag: '--store', value: name },
    newRows: { total: 0, flagged: 0, shown: [], more: 0 },
    review: { due: 0, afterDays, batch: [] },
    maintenance: {
      rows: 0, live: 0, problems: [], notes: [],
      pruned: { runs: 0, deleted: 0, expired: 0, superseded: 0, cascaded: 0 },
      lastSnapshot: null, awaitingPerson: { total: 0, shown: [] }, failedJobs: [],
    },
  };
}

/** `masked`: the digest's masks, which this fills ahead for the new rows (see maskDeep). */
async function collectStore(name: string, rules: LookTwiceRules, opts: CollectOptions, masked: Map<string, Promise<string>>): Promise<StoreSection> {
  const { config, state, now } = opts;
  const own = opts.storeStarts?.[name];
  const period = own !== undefined && own < opts.period.start ? { start: own, end: opts.period.end } : opts.period;
  const section = emptySection(name, config.review.afterDays);
  if (period !== opts.period) section.since = toCanonical(period.start);
  // What the state db knows never depends on the store being readable.
  const runs = runsPeriod(config, period);
  section.maintenance.pruned = pruneSummary(state, name, runs);
  section.maintenance.lastSnapshot = lastSnapshot(state, name, now);
  section.maintenance.awaitingPerson = awaitingPerson(state, name);
  section.maintenance.failedJobs = failedJobs(state, runs, name);

  const storeConfig = config.stores[name];
  if (!storeConfig) {
    section.error = 'not in config';
    return section;
  }
  section.select = storeSelector(name, storeConfig, resolve(expandHome(config.stateDb)) === stateDbWithoutConfig());
  try {
    // Through the store's engine: a SQLite file here, or a schema of a database every host reaches.
    const store = await openStoreOnEngine(config, name, { readonly: true });
    try {
      const [engine, layout] = await Promise.all([engineFor(store.config), jobsOf(store)]);
      const checked = recentCheck(state, name, await engine.identity(store), now) ?? await layout.check(store, { ctx: { config, log: opts.ctx.log, signal: opts.ctx.signal, now: () => now } });
      const report = withPendingRestore(checked, restoreJournalBase(config, name));
      section.maintenance.rows = report.rows;
      section.maintenance.live = report.live;
      section.maintenance.problems = report.problems;
      section.maintenance.notes = report.notes.filter((f) => f.code !== 'review_due');
      // Asked first: a layout may scan for the review queue elsewhere (warden: the store thread) while new rows are read.
      const reviewing = layout.reviewDue(store, { now, afterDays: config.review.afterDays, limit: config.review.batch });
      reviewing.catch(() => {}); // awaited below; new rows failing first must not leave it unhandled
      const texts = memoryTexts(state, name, now, opts.recordTexts !== false, (msg) => opts.ctx.log.warn({ store: name }, msg));
      section.newRows = await layout.newRows(store, { period, maxRows: config.digest.maxRows, lookTwice: (row) => lookTwiceReasons(row, rules), texts });
      // ...and the new rows are masked in it: collectDigest's masking of the whole model then finds them done.
      const maskingNew = maskDeep(section.newRows, SHOWN_EXACT, masked);
      maskingNew.catch(() => {}); // awaited below, after the review queue: its failure is reported there
      const review = await reviewing;
      await maskingNew;
      section.review.due = review.due;
      section.review.supersede = layout.correct !== undefined;
      section.review.batch = review.batch.map((r) => ({ id: r.id, subject: r.subject, fact: r.fact, source: r.source, confirmedAt: r.confirmed_at ?? '' }));
    } finally {
      await store.close();
    }
  } catch (err) {
    section.error = (err as Error).message.split('\n')[0] ?? String(err);
    opts.ctx.log.warn({ store: name, err: section.error }, 'digest could not read store');
  }
  attachReviewLinks(section, config, now, (msg) => opts.ctx.log.warn({ store: name }, msg));
  return section;
}

/** How old the last integrity run's report may be for the digest to show it instead of checking again. */
const REUSE_CHECK_MS = 26 * 3_600_000;

/**
 * The report of the store's last integrity run (the daily `integrity` job, or `run integrity`) when it checked this
 * same store at most REUSE_CHECK_MS before `now`: the digest then shows its counts and findings rather than reading
 * every page of the store a second time that day (integrity_check alone is most of a check). Null otherwise: no
 * run, an older one, another store under the same name, or a result not of a check report's shape.
 */
export function recentCheck(state: Db, store: string, file: string | undefined, now: Instant): CheckReport | null {
  const run = lastRun(state, 'integrity', store, 'ok');
  const r = parseJson(run?.result);
  // `file`, the store's identity (StoreEngine.identity): the same file, not the same path text (a relative path from
  // another working directory, or a file renamed over the store since, a restore, is another file), the same schema
  // of the same database; a run recorded before runs said which store has no `file`.
  if (!r || file === undefined || r.file !== file || typeof r.rows !== 'number' || typeof r.live !== 'number') return null;
  if (!Array.isArray(r.problems) || !Array.isArray(r.notes) || typeof r.ok !== 'boolean') return null;
  const at = parseInstant(r.checkedAt);
  if (at === null || at > now || now - at > REUSE_CHECK_MS) return null;
  return r as unknown as CheckReport;
}

/**
 * The window of memory-warden's own job runs a digest reports: its period moved on by digest.settleSeconds. A period
 * ends that margin before the digest is made, so that a row an agent is still writing goes in the next one; a job
 * run is recorded whole when it ends, and needs none. Moved on, the window ends when the digest is made (a prune a
 * moment before is in it, not "no prune ran") and starts when the last one was made: consecutive digests' windows
 * meet, and no run is told twice or never.
 */
export function runsPeriod(config: Config, period: Period): Period {
  const settle = config.digest.settleSeconds * 1000;
  return { start: period.start + settle, end: period.end + settle };
}

/** job_runs times are written canonical by the runner, so text comparison is exact here. */
function periodText(period: Period): [string, string] {
  return [toCanonical(period.start), toCanonical(period.end)];
}

export function failedJobs(state: Db, period: Period, store: string | null): FailedJob[] {
  const sql = `SELECT job, store, finished_at, error FROM job_runs
    WHERE outcome = 'failed' AND finished_at >= ? AND finished_at < ? AND store IS ?
    ORDER BY finished_at DESC, id DESC`;
  return (state.prepare(sql).all(...periodText(period), store) as Record<string, unknown>[]).map((r) => ({
    job: String(r.job), store: r.store === null ? null : String(r.store), finishedAt: String(r.finished_at), error: String(r.error ?? ''),
  }));
}

function parseJson(text: unknown): Record<string, unknown> | null {
  if (typeof text !== 'string') return null;
  try {
    const v: unknown = JSON.parse(text);
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);

export function pruneSummary(state: Db, store: string, period: Period): PruneSummary {
  const runs = state.prepare(`SELECT result FROM job_runs WHERE job = 'prune' AND store = ? AND outcome = 'ok' AND finished_at >= ? AND finished_at < ?`)
    .all(store, ...periodText(period)) as { result: string | null }[];
  const sum: PruneSummary = { runs: 0, deleted: 0, expired: 0, superseded: 0, cascaded: 0 };
  for (const run of runs) {
    const r = parseJson(run.result);
    if (!r || r.dryRun === true) continue;
    sum.runs += 1;
    sum.deleted += num(r.deleted);
    sum.expired += num(r.expired);
    sum.superseded += num(r.superseded);
    sum.cascaded += num(r.cascaded);
    if (r.counts && typeof r.counts === 'object') {
      sum.counts ??= {};
      for (const [k, v] of Object.entries(r.counts as Record<string, unknown>)) sum.counts[k] = (sum.counts[k] ?? 0) + num(v);
    }
  }
  return sum;
}

/**
 * The last snapshot run that succeeded. Its result is read defensively (the snapshot job owns its shape): a
 * folder or path if it names one, the first parseable time it carries, else when the run finished.
 */
export function lastSnapshot(state: Db, store: string, now: Instant): SnapshotSummary | null {
  const run = lastRun(state, 'snapshot', store, 'ok');
  if (!run) return null;
  const r = parseJson(run.result) ?? {};
  const where = ['folder', 'path', 'dir', 'directory', 'target'].map((k) => r[k]).find((v) => typeof v === 'string' && v !== '') as string | undefined;
  const times = ['takenAt', 'taken_at', 'finishedAt', 'finished_at', 'at', 'time', 'startedAt', 'started_at', 'now'].map((k) => r[k]);
  const taken = times.map(parseInstant).find((t) => t !== null) ?? parseInstant(run.finished_at) ?? parseInstant(run.started_at);
  if (taken === null || taken === undefined) return { where: where ?? null, takenAt: String(run.finished_at ?? ''), ageHours: NaN };
  return { where: where ?? null, takenAt: toCanonical(taken), ageHours: Math.max(0, (now - taken) / 3_600_000) };
}

export function awaitingPerson(state: Db, store: string): { total: number; shown: AwaitingVerdict[] } {
  const where = `store = ? AND needs_person = 1 AND resolved_at IS NULL`;
  const total = (state.prepare(`SELECT count(*) AS n FROM drift_verdicts WHERE ${where}`).get(store) as { n: number }).n;
  const rows = state.prepare(`SELECT memory_id, verdict, verifier, evidence, checked_at FROM drift_verdicts WHERE ${where} ORDER BY checked_at, id LIMIT ${AWAITING_SHOWN}`)
    .all(store) as Record<string, unknown>[];
  return {
    total,
    shown: rows.map((r) => ({
      memoryId: String(r.memory_id), verdict: String(r.verdict), verifier: r.verifier === null ? null : String(r.verifier),
      evidence: r.evidence === null ? null : String(r.evidence), checkedAt: String(r.checked_at),
    })),
  };
}
