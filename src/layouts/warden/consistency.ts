import type { Db } from '../../store/sqlite.js';
import type { OrphanRepair, OrphanRepairOptions, StoreHandle } from '../contract.js';
import type { PointId, PointRecord, RowVectors } from '../../vectors/contract.js';
import { finding, isProblem, ID_SAMPLE, type Finding } from '../../job/findings.js';
import type { Instant } from '../../time/instants.js';
import { usageError } from '../../core/errors.js';
import { withMaintenanceLock } from '../../store/lock.js';
import type { Progress } from '../../progress/progress.js';

/**
 * The two stores compared in one streaming pass over Qdrant, page by page, so memory stays flat however large the
 * store:
 * - points → rows: scroll each collection a page at a time and look the page's row ids up in SQLite; every row
 *   found to have its point gets a bit set (one bit per rowid and collection: 125 KB for 1,000,000 rows);
 * - rows → points: walk the live rows a page at a time (keyset on id); only the rows whose bit is not set (the
 *   missing ones, and rows written since the scroll) are asked about in Qdrant, with the same lookup as always.
 * Neither side's id set is ever held whole; only counts, the bits and capped id samples are kept. Without the
 * bits (a WITHOUT ROWID table, rowids too sparse) every live row is asked about, page by page.
 */
export interface ConsistencyOptions {
  now: Instant;
  /** Ids per page on both sides. */
  pageSize?: number;
  /** The job's signal: a long comparison stops between pages when the job is cancelled. */
  signal?: AbortSignal;
  /** Points scrolled so far, on a terminal (src/progress/progress.ts). */
  progress?: Progress;
}

export interface CollectionTally {
  collection: string;
  points: number;
  orphanPoints: number;
  missingPoints: number;
  payloadMismatch: number;
  unmappedPoints: number;
}

export interface ConsistencyReport {
  liveRows: number;
  /** Live rows whose id cannot be a point id in this mapping (`pointId: id` needs integers or UUIDs). */
  unmappableRows: number;
  collections: CollectionTally[];
  findings: Finding[];
}

// The unary `+` keeps SQLite off the superseded_by/expires_at indexes: with them (every live row has
// superseded_by NULL) each page sorted every live row after `after`, and 1,000,000 rows took minutes, not seconds.
// The first page starts at the lowest id that is not NULL (an INTEGER id sorts before any text, '' too); the next
// ones after the last id as SQLite gave it, so integer ids compare as integers.
const LIVE_PAGE = (withRowid: boolean, first: boolean) => `
SELECT ${withRowid ? 'rowid AS rid, ' : ''}id FROM memory
WHERE ${first ? 'id IS NOT NULL' : 'id > @after'} AND +superseded_by IS NULL AND (+expires_at IS NULL OR coalesce(warden_epoch(expires_at) > @now, 1))
ORDER BY id LIMIT @limit`;

const ROWS_BY_ID = (withRowid: boolean) => `SELECT ${withRowid ? 'rowid AS rid, ' : ''}id, fact FROM memory WHERE id IN (SELECT value FROM json_each(?))`;

/** Most bits the row marks may take, all collections together (32 MB); a wider rowid range goes without them. */
const MAX_MARKS = 2 ** 28;

/**
 * One bit per rowid of the memory table and collection: set when the scroll saw a point that this row's own
 * lookup would find. A set bit is proof enough; an unset one is only a reason to ask Qdrant. (A row deleted during
 * the check can leave its bit to a row inserted later with its rowid: a race of rows written mid-check, like those
 * any two-sided comparison has; the next check sees it.)
 */
export class RowMarks {
  private constructor(private readonly lowest: number, private readonly size: number, private readonly bits: Uint8Array[]) {}

  static for(db: Db, collections: number): RowMarks | undefined {
    let range: { lo: number | null; hi: number | null };
    try {
      range = db.prepare(`SELECT min(rowid) AS lo, max(rowid) AS hi FROM memory`).get() as typeof range;
    } catch {
      return undefined; // WITHOUT ROWID
    }
    const { lo, hi } = range;
    if (lo === null || hi === null || !Number.isSafeInteger(lo) || !Number.isSafeInteger(hi) || (hi - lo + 1) * collections > MAX_MARKS) return undefined;
    const size = hi - lo + 1;
    return new RowMarks(lo, size, Array.from({ length: collections }, () => new Uint8Array(Math.ceil(size / 8))));
  }

  mark(collection: number, rowid: number): void {
    const i = rowid - this.lowest;
    if (i >= 0 && i < this.size) this.bits[collection]![i >> 3]! |= 1 << (i & 7);
  }

  has(collection: number, rowid: number): boolean {
    const i = rowid - this.lowest;
    return i >= 0 && i < this.size && (this.bits[collection]![i >> 3]! & (1 << (i & 7))) !== 0;
  }
}

/** A capped sample of ids next to an exact count. */
class Sample {
  count = 0;
  readonly ids: string[] = [];
  add(id: string): void {
    this.count += 1;
    if (this.ids.length < ID_SAMPLE) this.ids.push(id);
  }
}

/** The rows of these ids in SQLite, id → fact; with `rowids`, each found row's rowid put there (for the row marks). */
function sqliteRowsById(db: Db, ids: string[], rowids?: Map<string, number>): Map<string, string> {
  const rows = new Map<string, string>();
  if (ids.length === 0) return rows;
  const found = db.prepare(ROWS_BY_ID(rowids !== undefined)).all(JSON.stringify(ids)) as { rid?: number; id: string; fact: string }[];
  for (const r of found) {
    rows.set(String(r.id), r.fact);
    if (r.rid !== undefined) rowids?.set(String(r.id), r.rid);
  }
  return rows;
}

/** Orphans of one page of points: points whose row is gone from SQLite (the bench's lookup floor reads this). */
export function orphansOfPage(db: Db, q: RowVectors, points: PointRecord[]): { orphans: PointRecord[]; unmapped: PointRecord[] } {
  const named = points.map((p) => q.rowIdsOf(p));
  return orphansAmong(points, named, sqliteRowsById(db, [...new Set(named.flat())]));
}

/** The points of a page that name rows none of which exists (orphans), and those that name no row at all. */
function orphansAmong(points: PointRecord[], named: string[][], rows: { has(id: string): boolean }): { orphans: PointRecord[]; unmapped: PointRecord[] } {
  const orphans: PointRecord[] = [];
  const unmapped: PointRecord[] = [];
  points.forEach((p, i) => {
    const candidates = named[i]!;
    if (candidates.length === 0) unmapped.push(p);
    else if (!candidates.some((id) => rows.has(id))) orphans.push(p);
  });
  return { orphans, unmapped };
}

/**
 * The rows of a page that the point-lookup of the rows → points side would find too (RowVectors.rowsWithPoints):
 * in payload mode only a string payload naming the row (Qdrant's keyword match); by point id, any row the point
 * names (rowIdsOf already checked the id against it).
 */
function markRows(q: RowVectors, points: PointRecord[], named: string[][], rowids: Map<string, number>, mark: (rowid: number) => void): void {
  points.forEach((p, i) => {
    if (q.config.pointId === 'payload') {
      const named = p.payload?.[q.config.payloadKey];
      const rowid = typeof named === 'string' ? rowids.get(named) : undefined;
      if (rowid !== undefined) mark(rowid);
      return;
    }
    for (const id of named[i]!) {
      const rowid = rowids.get(id);
      if (rowid !== undefined) mark(rowid);
    }
  });
}

/**
 * Every page of a collection, in Qdrant's order. The next page is already asked for while the caller works on
 * this one (SQLite lookups overlap Qdrant's answer); never more than two pages are held.
 */
export async function* scrollPoints(q: RowVectors, collection: string, pageSize: number): AsyncGenerator<PointRecord[]> {
  const keys = [q.config.payloadKey, ...(q.config.textKey ? [q.config.textKey] : [])];
  const ask = (offset: PointId | null) => {
    const pending = q.scrollPage(collection, offset, pageSize, keys);
    pending.catch(() => undefined); // awaited below; a caller that stops early leaves no unhandled rejection
    return pending;
  };
  let next: ReturnType<typeof ask> | null = ask(null);
  while (next !== null) {
    const page: Awaited<ReturnType<typeof ask>> = await next;
    next = page.next === null ? null : ask(page.next);
    if (page.points.length > 0) yield page.points;
  }
}

/**
 * The store's rows as the comparison reads them, whatever engine holds them: SQLite's file (sqliteRows) or a
 * PostgreSQL schema (src/layouts/warden/postgres/consistency.ts).
 */
export interface RowSide {
  /** The rows of these ids that exist, id → fact; with `rowids`, each found row's mark number put there. */
  rowsById(ids: string[], rowids?: Map<string, number>): Promise<Map<string, string>>;
  /** The live rows at `now` after `after` (the last id of the page before; undefined: the first page), in id order. */
  livePage(after: unknown, limit: number, withRowid: boolean): Promise<{ rid?: number; id: unknown }[]>;
  /** One bit per row and collection, where the engine numbers its rows densely (SQLite's rowid); else none. */
  marks(collections: number): RowMarks | undefined;
}

/** The rows side of a SQLite store. */
export function sqliteRows(db: Db, now: Instant): RowSide {
  const pages = new Map<string, ReturnType<Db['prepare']>>();
  const page = (withRowid: boolean, first: boolean) => {
    const sql = LIVE_PAGE(withRowid, first);
    if (!pages.has(sql)) pages.set(sql, db.prepare(sql));
    return pages.get(sql)!;
  };
  return {
    rowsById: async (ids, rowids) => sqliteRowsById(db, ids, rowids),
    livePage: async (after, limit, withRowid) => (after === undefined
      ? page(withRowid, true).all({ now, limit })
      : page(withRowid, false).all({ after, now, limit })) as { rid?: number; id: unknown }[],
    marks: (collections) => RowMarks.for(db, collections),
  };
}

export async function checkConsistency(db: Db, q: RowVectors, opts: ConsistencyOptions): Promise<ConsistencyReport> {
  return compareWithVectors(sqliteRows(db, opts.now), q, opts);
}

/** The comparison of a store's rows (any engine's) with its Qdrant collections. */
export async function compareWithVectors(side: RowSide, q: RowVectors, opts: ConsistencyOptions): Promise<ConsistencyReport> {
  const pageSize = opts.pageSize ?? 1000;
  const textKey = q.config.textKey;
  const orphans = new Sample();
  const mismatched = new Sample();
  const unmapped = new Sample();
  const tallies: CollectionTally[] = [];
  const expect = q.config.expectPoints;
  const marks = expect === 'none' ? undefined : side.marks(q.collections.length);

  opts.progress?.start('compare', undefined, 'points');
  for (const [index, collection] of q.collections.entries()) {
    const t: CollectionTally = { collection, points: 0, orphanPoints: 0, missingPoints: 0, payloadMismatch: 0, unmappedPoints: 0 };
    tallies.push(t);
    for await (const page of scrollPoints(q, collection, pageSize)) {
      opts.signal?.throwIfAborted();
      t.points += page.length;
      opts.progress?.tick(page.length);
      const rowids = marks ? new Map<string, number>() : undefined;
      const named = page.map((p) => q.rowIdsOf(p));
      const wanted = [...new Set(named.flat())];
      const rows = wanted.length === 0 ? new Map<string, string>() : await side.rowsById(wanted, rowids);
      const { orphans: lost, unmapped: nameless } = orphansAmong(page, named, rows);
      if (marks && rowids) markRows(q, page, named, rowids, (rowid) => marks.mark(index, rowid));
      for (const p of lost) orphans.add(`${collection}:${p.id}`);
      for (const p of nameless) unmapped.add(`${collection}:${p.id}`);
      t.orphanPoints += lost.length;
      t.unmappedPoints += nameless.length;
      if (!textKey) continue;
      for (const [i, p] of page.entries()) {
        const text = p.payload?.[textKey];
        if (typeof text !== 'string') continue; // the payload does not hold the text: nothing to compare
        const row = named[i]!.find((id) => rows.has(id));
        if (row !== undefined && rows.get(row) !== text) {
          mismatched.add(`${collection}:${p.id} (row ${row})`);
          t.payloadMismatch += 1;
        }
      }
    }
  }

  const { missing, liveRows, unmappable } = expect === 'none'
    ? { missing: new Sample(), liveRows: 0, unmappable: 0 }
    : await rowsWithoutPoints(side, q, marks, tallies, { ...opts, pageSize });
  opts.progress?.done();

  const findings: Finding[] = [];
  const where = q.collections.join(', ');
  if (orphans.count > 0) {
    findings.push(finding('orphan_points', 'error',
      `${orphans.count} point(s) in Qdrant (${where}) whose row no longer exists: deleted memories that retrieval still returns (repair orphans deletes them)`,
      orphans.ids, orphans.count));
  }
  if (missing.count > 0) {
    findings.push(finding('missing_points', 'warning',
      `${missing.count} live row(s) with no point in ${expect === 'any' ? 'any of' : 'each of'} ${where}: retrieval cannot find them`,
      missing.ids, missing.count));
  }
  if (mismatched.count > 0) {
    findings.push(finding('payload_mismatch', 'warning',
      `${mismatched.count} point(s) whose payload "${textKey}" differs from the row's fact: retrieval returns text the store no longer holds`,
      mismatched.ids, mismatched.count));
  }
  if (unmapped.count > 0) {
    findings.push(finding('unmapped_points', 'warning',
      `${unmapped.count} point(s) that name no row (${q.config.pointId === 'id' ? 'id' : `payload "${q.config.payloadKey}"`} missing or not matching): cannot be checked, never deleted by repair`,
      unmapped.ids, unmapped.count));
  }
  if (unmappable > 0) {
    findings.push(finding('unmappable_rows', 'warning',
      `${unmappable} live row id(s) that cannot be Qdrant point ids (pointId: id needs unsigned integers or UUIDs): use pointId payload or uuid5`,
      undefined, unmappable));
  }
  return { liveRows, unmappableRows: unmappable, collections: tallies, findings };
}

/**
 * rows → points: the live rows, a page at a time (keyset on id). A row the scroll vouched for (its bit set in
 * every collection, or in one for `expectPoints: any`) is done; the rest are asked about in Qdrant, a page of them
 * at a time: the missing rows, and rows written since the scroll.
 */
async function rowsWithoutPoints(
  side: RowSide, q: RowVectors, marks: RowMarks | undefined, tallies: CollectionTally[], opts: ConsistencyOptions & { pageSize: number },
): Promise<{ missing: Sample; liveRows: number; unmappable: number }> {
  const expect = q.config.expectPoints;
  const isMissing = (has: boolean[]) => (expect === 'any' ? !has.some(Boolean) : !has.every(Boolean));
  const missing = new Sample();
  let liveRows = 0;
  let unmappable = 0;
  let unsure: { id: string; seen: boolean[] }[] = [];
  const settle = async () => {
    const present = await Promise.all(q.collections.map((c, i) => q.rowsWithPoints(c, unsure.filter((r) => !r.seen[i]).map((r) => r.id))));
    for (const { id, seen } of unsure) {
      const has = seen.map((ok, i) => ok || present[i]!.has(id));
      if (!isMissing(has)) continue;
      missing.add(id);
      has.forEach((ok, i) => {
        if (!ok) tallies[i]!.missingPoints += 1;
      });
    }
    unsure = [];
  };
  let after: unknown;
  for (;;) {
    opts.signal?.throwIfAborted();
    const found = await side.livePage(after, opts.pageSize, marks !== undefined);
    if (found.length === 0) break;
    after = found[found.length - 1]!.id;
    liveRows += found.length;
    for (const r of found) {
      const id = String(r.id);
      if (q.config.pointId === 'id' && q.pointIdFor(id) === null) {
        unmappable += 1;
        continue;
      }
      const seen = q.collections.map((_, i) => marks !== undefined && marks.has(i, r.rid!));
      if (isMissing(seen)) unsure.push({ id, seen });
    }
    if (unsure.length >= opts.pageSize) await settle();
  }
  await settle();
  return { missing, liveRows, unmappable };
}

/** What `check` adds for a store with a Qdrant side: the comparison's counts per collection. */
export interface VectorSummary {
  liveRows: number;
  unmappableRows: number;
  collections: CollectionTally[];
}

/**
 * A check report with the cross-store findings merged in (problems and notes as `checkStore` sorts them): the
 * warden layout's half of its check (mem0 compares its stores its own way). A store without Qdrant comes back
 * unchanged.
 */
export async function withConsistency<R extends { ok: boolean; problems: Finding[]; notes: Finding[] }>(
  report: R,
  store: StoreHandle,
  opts: ConsistencyOptions,
): Promise<R & { vectors?: VectorSummary }> {
  if (!store.vectors) return report;
  return mergeConsistency(report, await checkConsistency(store.db, store.vectors, opts));
}

/** A check report with a comparison's findings merged in, and its counts under `vectors`. */
export function mergeConsistency<R extends { ok: boolean; problems: Finding[]; notes: Finding[] }>(report: R, c: ConsistencyReport): R & { vectors: VectorSummary } {
  const problems = [...report.problems, ...c.findings.filter(isProblem)];
  const notes = [...report.notes, ...c.findings.filter((f) => !isProblem(f))];
  return { ...report, ok: problems.length === 0, problems, notes, vectors: { liveRows: c.liveRows, unmappableRows: c.unmappableRows, collections: c.collections } };
}

/**
 * Delete the points whose row no longer exists, page by page. Each page's orphans are looked up in SQLite a
 * second time right before the delete, so a row the agent wrote meanwhile keeps its point. A point that names
 * no row is never touched: it cannot be proved an orphan. (Agents should write the row before its vector, the
 * mirror of how memory-warden deletes.)
 */
export async function repairOrphans(store: StoreHandle, opts: OrphanRepairOptions = {}): Promise<OrphanRepair> {
  const rowsOf = async (ids: string[]) =>
    new Set((store.db.prepare(ROWS_BY_ID(false)).all(JSON.stringify(ids)) as { id: unknown }[]).map((r) => String(r.id)));
  return repairOrphansWith(store, rowsOf, (work) => withMaintenanceLock(store.path, 'repair orphans', work), opts);
}

/**
 * repair orphans over any engine's rows: `rowsOf` says which of the ids are rows of the store now, `locked` runs the
 * deletes under the store's maintenance lock (a dry run takes none).
 */
export async function repairOrphansWith(
  store: { name: string; vectors?: RowVectors },
  rowsOf: (ids: string[]) => Promise<Set<string>>,
  locked: (work: () => Promise<void>) => Promise<void>,
  opts: OrphanRepairOptions,
): Promise<OrphanRepair> {
  const q = store.vectors;
  if (!q) throw usageError(`${store.name}: no qdrant section in its config: there are no points to repair`);
  const out: OrphanRepair = { store: store.name, dryRun: opts.dryRun ?? false, deleted: 0, ids: [], collections: [] };
  const orphansOf = async (points: PointRecord[]) => {
    const named = points.map((p) => q.rowIdsOf(p));
    const wanted = [...new Set(named.flat())];
    return orphansAmong(points, named, wanted.length === 0 ? new Set() : await rowsOf(wanted)).orphans;
  };
  const work = async () => {
    for (const collection of q.collections) {
      const tally = { collection, deleted: 0 };
      out.collections.push(tally);
      for await (const page of scrollPoints(q, collection, opts.pageSize ?? 1000)) {
        opts.signal?.throwIfAborted();
        const first = await orphansOf(page);
        if (first.length === 0) continue;
        const still = out.dryRun ? first : await orphansOf(first);
        if (!out.dryRun && still.length > 0) await q.deletePoints(collection, still.map((p) => p.id));
        tally.deleted += still.length;
        out.deleted += still.length;
        for (const p of still) if (out.ids.length < ID_SAMPLE) out.ids.push(`${collection}:${p.id}`);
      }
    }
  };
  if (out.dryRun) await work();
  else await locked(work);
  return out;
}
