import type { Db } from './sqlite.js';
import type { StoreHandle } from './open.js';
import { QdrantStore, type PointId, type PointRecord } from './qdrant.js';
import { finding, isProblem, ID_SAMPLE, type Finding } from '../findings.js';
import type { Instant } from '../time.js';
import { usageError } from '../errors.js';
import { withMaintenanceLock } from './lock.js';

/**
 * The two stores compared in one streaming pass, page by page, so memory stays flat however large the store:
 * - points → rows: scroll each collection a page at a time and look the page's row ids up in SQLite;
 * - rows → points: walk the live rows a page at a time (keyset on id) and ask Qdrant which of them have points.
 * Neither side's id set is ever held whole; only counts and capped id samples are kept.
 */
export interface ConsistencyOptions {
  now: Instant;
  /** Ids per page on both sides. */
  pageSize?: number;
  /** The job's signal: a long comparison stops between pages when the job is cancelled. */
  signal?: AbortSignal;
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
const LIVE_PAGE = `
SELECT id FROM memory
WHERE id > @after AND +superseded_by IS NULL AND (+expires_at IS NULL OR coalesce(warden_epoch(expires_at) > @now, 1))
ORDER BY id LIMIT @limit`;

const ROWS_BY_ID = `SELECT id, fact FROM memory WHERE id IN (SELECT value FROM json_each(?))`;

/** A capped sample of ids next to an exact count. */
class Sample {
  count = 0;
  readonly ids: string[] = [];
  add(id: string): void {
    this.count += 1;
    if (this.ids.length < ID_SAMPLE) this.ids.push(id);
  }
}

/** Orphans of one page of points: points whose row is gone from SQLite (retrievable, but deleted memories). */
export function orphansOfPage(db: Db, q: QdrantStore, points: PointRecord[]): { orphans: PointRecord[]; rows: Map<string, string>; unmapped: PointRecord[] } {
  const wanted = new Set<string>();
  for (const p of points) for (const id of q.rowIdsOf(p)) wanted.add(id);
  const rows = new Map<string, string>();
  if (wanted.size > 0) {
    for (const r of db.prepare(ROWS_BY_ID).all(JSON.stringify([...wanted])) as { id: string; fact: string }[]) rows.set(String(r.id), r.fact);
  }
  const orphans: PointRecord[] = [];
  const unmapped: PointRecord[] = [];
  for (const p of points) {
    const candidates = q.rowIdsOf(p);
    if (candidates.length === 0) unmapped.push(p);
    else if (!candidates.some((id) => rows.has(id))) orphans.push(p);
  }
  return { orphans, rows, unmapped };
}

/** Every page of a collection, in Qdrant's order. */
export async function* scrollPoints(q: QdrantStore, collection: string, pageSize: number): AsyncGenerator<PointRecord[]> {
  const keys = [q.config.payloadKey, ...(q.config.textKey ? [q.config.textKey] : [])];
  let offset: PointId | null = null;
  do {
    const page = await q.scrollPage(collection, offset, pageSize, keys);
    if (page.points.length > 0) yield page.points;
    offset = page.next;
  } while (offset !== null);
}

export async function checkConsistency(db: Db, q: QdrantStore, opts: ConsistencyOptions): Promise<ConsistencyReport> {
  const pageSize = opts.pageSize ?? 1000;
  const textKey = q.config.textKey;
  const orphans = new Sample();
  const mismatched = new Sample();
  const unmapped = new Sample();
  const tallies: CollectionTally[] = [];

  for (const collection of q.collections) {
    const t: CollectionTally = { collection, points: 0, orphanPoints: 0, missingPoints: 0, payloadMismatch: 0, unmappedPoints: 0 };
    tallies.push(t);
    for await (const page of scrollPoints(q, collection, pageSize)) {
      opts.signal?.throwIfAborted();
      t.points += page.length;
      const { orphans: lost, rows, unmapped: nameless } = orphansOfPage(db, q, page);
      for (const p of lost) orphans.add(`${collection}:${p.id}`);
      for (const p of nameless) unmapped.add(`${collection}:${p.id}`);
      t.orphanPoints += lost.length;
      t.unmappedPoints += nameless.length;
      if (!textKey) continue;
      for (const p of page) {
        const text = p.payload?.[textKey];
        if (typeof text !== 'string') continue; // the payload does not hold the text: nothing to compare
        const row = q.rowIdsOf(p).find((id) => rows.has(id));
        if (row !== undefined && rows.get(row) !== text) {
          mismatched.add(`${collection}:${p.id} (row ${row})`);
          t.payloadMismatch += 1;
        }
      }
    }
  }

  const missing = new Sample();
  let liveRows = 0;
  let unmappable = 0;
  const expect = q.config.expectPoints;
  if (expect !== 'none') {
    const page = db.prepare(LIVE_PAGE);
    let after = '';
    for (;;) {
      opts.signal?.throwIfAborted();
      const ids = (page.all({ after, now: opts.now, limit: pageSize }) as { id: unknown }[]).map((r) => String(r.id));
      if (ids.length === 0) break;
      after = ids[ids.length - 1]!;
      liveRows += ids.length;
      const mappable = q.config.pointId === 'id' ? ids.filter((id) => q.pointIdFor(id) !== null) : ids;
      unmappable += ids.length - mappable.length;
      const present = await Promise.all(q.collections.map((c) => q.rowsWithPoints(c, mappable)));
      for (const id of mappable) {
        const has = present.map((set) => set.has(id));
        const isMissing = expect === 'any' ? !has.some(Boolean) : !has.every(Boolean);
        if (!isMissing) continue;
        missing.add(id);
        has.forEach((ok, i) => {
          if (!ok) tallies[i]!.missingPoints += 1;
        });
      }
    }
  }

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

/** What `check` adds for a store with a Qdrant side: the comparison's counts per collection. */
export interface VectorSummary {
  liveRows: number;
  unmappableRows: number;
  collections: CollectionTally[];
}

/**
 * A check report with the cross-store findings merged in (problems and notes as `checkStore` sorts them).
 * Stores without Qdrant, or of another layout (which compares its stores its own way), come back unchanged.
 */
export async function withConsistency<R extends { ok: boolean; problems: Finding[]; notes: Finding[] }>(
  report: R,
  store: StoreHandle,
  opts: ConsistencyOptions,
): Promise<R & { vectors?: VectorSummary }> {
  if (store.config.layout !== 'warden' || !(store.vectors instanceof QdrantStore)) return report;
  const c = await checkConsistency(store.db, store.vectors, opts);
  const problems = [...report.problems, ...c.findings.filter(isProblem)];
  const notes = [...report.notes, ...c.findings.filter((f) => !isProblem(f))];
  return { ...report, ok: problems.length === 0, problems, notes, vectors: { liveRows: c.liveRows, unmappableRows: c.unmappableRows, collections: c.collections } };
}

export interface OrphanRepair {
  store: string;
  dryRun: boolean;
  deleted: number;
  /** `collection:pointId`, capped at ID_SAMPLE. */
  ids: string[];
  collections: { collection: string; deleted: number }[];
}

/**
 * Delete the points whose row no longer exists, page by page. Each page's orphans are looked up in SQLite a
 * second time right before the delete, so a row the agent wrote meanwhile keeps its point. A point that names
 * no row is never touched: it cannot be proved an orphan. (Agents should write the row before its vector, the
 * mirror of how memory-warden deletes.)
 */
export async function repairOrphans(store: StoreHandle, opts: { dryRun?: boolean; pageSize?: number; signal?: AbortSignal } = {}): Promise<OrphanRepair> {
  const q = store.vectors;
  if (!(q instanceof QdrantStore)) throw usageError(`${store.name}: no qdrant section in its config: there are no points to repair`);
  const out: OrphanRepair = { store: store.name, dryRun: opts.dryRun ?? false, deleted: 0, ids: [], collections: [] };
  const work = async () => {
    for (const collection of q.collections) {
      const tally = { collection, deleted: 0 };
      out.collections.push(tally);
      for await (const page of scrollPoints(q, collection, opts.pageSize ?? 1000)) {
        opts.signal?.throwIfAborted();
        const first = orphansOfPage(store.db, q, page).orphans;
        if (first.length === 0) continue;
        const still = out.dryRun ? first : orphansOfPage(store.db, q, first).orphans;
        if (!out.dryRun && still.length > 0) await q.deletePoints(collection, still.map((p) => p.id));
        tally.deleted += still.length;
        out.deleted += still.length;
        for (const p of still) if (out.ids.length < ID_SAMPLE) out.ids.push(`${collection}:${p.id}`);
      }
    }
  };
  if (out.dryRun) await work();
  else await withMaintenanceLock(store.path, 'repair orphans', work);
  return out;
}
