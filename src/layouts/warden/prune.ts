import { statSync } from 'node:fs';
import type { JobContext } from '../../job/job.js';
import type { PruneResult, StoreHandle } from '../contract.js';
import { journalMode, type Db } from '../../store/sqlite.js';
import { startCheckpointer } from '../../store/checkpointer.js';
import { storeBytes, THREAD_MIN_BYTES, warmStoreThread } from '../../store/thread.js';
import { deleteRoots, type DeletedRow, type Sql } from './delete.js';
import { EXPIRED_SQL, LONG_SUPERSEDED_SQL, PRUNABLE_SQL, pruneParams, type PruneRules } from './rules.js';
import { withMaintenanceLock } from '../../store/lock.js';
import { toCanonical } from '../../time/instants.js';
import { noProgress } from '../../progress/progress.js';

type PruneReason = 'expired' | 'superseded' | 'cascaded';

export type { PruneResult } from '../contract.js';

const ID_CAP = 1000;
/** A batch takes its roots in chunks of about this many milliseconds, so it ends within that of `batchMs`. */
const CHUNK_MS = 3;
/** Every this many batches the prune lets the checkpoint catch up, so that the WAL starts again from the top. */
const WAL_BATCHES = 4;
/**
 * How many checkpoints the prune waits for, at most, for one that no other connection's commit overtook. Without
 * that wait, beside an agent writing every few milliseconds, every write transaction began with the last commit's
 * frames not yet copied, and the WAL never started again from its top (26,000 frames at 1M rows): each agent commit
 * then found 1,000 frames or more in it and, whenever no checkpoint was running, ran SQLite's autocheckpoint itself,
 * fsyncs and all (its worst commit 45-85 ms).
 */
const RESTART_TRIES = 4;
/** The longest a commit keeps the write lock for the checkpoint thread to start (it takes well under a millisecond). */
const CHECKPOINT_START_MS = 5;
/** A root that at least this many rows are superseded by has its cascade counted in the batch's time. */
const HEAVY_CHILDREN = 16;
/**
 * What deleting a row in a root's cascade costs, in roots: the roots of a batch are neighbouring rows, the rows a
 * cascade takes are anywhere in the file (measured: ~0.02 ms a cascaded row against ~0.004 ms a root, at 1M rows).
 */
const CASCADE_COST = 4;
/**
 * A root whose cascade takes at least this many rows is deleted in pieces beside a writer: the rows superseded by it
 * first, each with its own cascade, in transactions of their own (deleteOlderVersions), then the root. In one piece, a
 * root 906 rows are superseded by held the write lock 47 ms at 1M rows (its rows are spread over the file: each
 * costs about as much to commit as to delete), and an agent that tried as it began waited 53 ms.
 */
const HUB_ROWS = 128;
/** SQLITE_MAX_TRIGGER_DEPTH: a cascade deeper fails (and heavyRoots' count goes no deeper; it bounds its recursion). */
const MAX_TRIGGER_DEPTH = 1000;
/** No other connection has committed for this long: nobody is writing, and batches may last `quietBatchMs`. */
const QUIET_AFTER_MS = 500;

/**
 * The longest a writer that has been waiting `waitedMs` can sleep before its next try. SQLite's busy handler
 * retries 1, 3, 8, 18, 33, 53, 78, 103, 128, 178, 228 ms after the first try, then every 100 ms.
 */
function retryGapMs(waitedMs: number): number {
  return waitedMs <= 128 ? 25 : waitedMs <= 228 ? 50 : 100;
}

/**
 * Both rules' candidates among the rowids in (`after`, `until`] (null: no bound), in ascending order, each with the
 * rule that selected it; every candidate of that range is in it.
 */
export interface Candidates {
  rowids: Float64Array;
  superseded: Uint8Array;
  after: number | null;
  until: number | null;
}

/**
 * The candidates of one range of rowids: a store is read a range at a time, `candidateRows` rowids each, so that
 * what the prune holds of them stays the same whatever the store's size (every rowid of the store was held at once
 * before: 3.5M candidates, some 100 MB, at 10M rows). One pass over the range of the table (the superseded rule
 * reads the table anyway); the ranges together read it once. In rowid order: consecutive batches then touch
 * neighbouring table pages, so each page is written to the WAL about once instead of once per batch. A row both
 * rules select counts as expired.
 */
export function pruneCandidates(
  store: Pick<StoreHandle, 'db'>, rules: PruneRules, after: number | null, until: number | null, room: CandidateRoom,
): Candidates {
  const range = `${after === null ? '' : 'rowid > @after AND '}${until === null ? '' : 'rowid <= @until AND '}`;
  const rows = store.db
    .prepare(`SELECT rowid, CASE WHEN @expiredOn AND ${EXPIRED_SQL} THEN 0 ELSE 1 END FROM memory WHERE ${range}${PRUNABLE_SQL} ORDER BY rowid`)
    .raw()
    .iterate({ ...pruneParams(rules), ...(after === null ? {} : { after }), ...(until === null ? {} : { until }) }) as IterableIterator<[number, number]>;
  let n = 0;
  for (const [rowid, rule] of rows) {
    if (n === room.rowids.length) {
      const more = new Float64Array(Math.max(1024, 2 * n));
      more.set(room.rowids);
      room.rowids = more;
      const flags = new Uint8Array(more.length);
      flags.set(room.superseded);
      room.superseded = flags;
    }
    room.rowids[n] = rowid;
    room.superseded[n++] = rule;
  }
  return { rowids: room.rowids.subarray(0, n), superseded: room.superseded.subarray(0, n), after, until };
}

/**
 * Where a range's candidates are written: one room for all the ranges of a prune, grown to the most candidates
 * a range had (at most `candidateRows`), and written over by the next range once the last is done with. A new
 * pair of arrays per range was garbage the size of a range each time (4.5 MB at the default), outside the
 * JavaScript heap, which V8 collects only once tens of MB of it have piled up.
 */
export interface CandidateRoom { rowids: Float64Array; superseded: Uint8Array }

/**
 * The ranges of rowids the prune reads one at a time: `span` rowids each from the lowest, up to the highest rowid
 * when the prune began (rows written after it are the next run's). A gap in the rowids is stepped over.
 */
function* candidateRanges(store: Pick<StoreHandle, 'db'>, rules: PruneRules, span: number): Generator<Candidates> {
  const top = store.db.prepare('SELECT max(rowid) FROM memory').pluck().get() as number | null;
  if (top === null) return;
  const next = store.db.prepare('SELECT min(rowid) FROM memory WHERE rowid > ?').pluck();
  let after = (store.db.prepare('SELECT min(rowid) FROM memory').pluck().get() as number) - 1;
  const room = { rowids: new Float64Array(Math.min(span, 1 << 16)), superseded: new Uint8Array(Math.min(span, 1 << 16)) };
  while (after < top) {
    const until = Math.min(top, after + span);
    // The range before is done with: the generator is asked for the next range once every batch of it has run.
    const window = pruneCandidates(store, rules, after, until, room);
    if (window.rowids.length > 0) yield window;
    const first = until >= top ? null : (next.get(until) as number | null);
    if (first === null) return;
    after = first - 1;
  }
}

/**
 * The rows that many others are superseded by, each with how many rows its cascade takes (the rows superseded by
 * it, and theirs when those are such rows too): a batch that met one unawares held the write lock for the whole
 * cascade past its time (a row 906 others went with took 15-25 ms on its own). By rowid. One pass over the
 * non-null part of the superseded_by index.
 */
export function heavyRoots(store: Pick<StoreHandle, 'db'>): Map<number, number> {
  const rows = store.db
    .prepare(
      `SELECT m.rowid, h.id, h.n, m.superseded_by FROM (SELECT superseded_by AS id, count(*) AS n FROM memory
       WHERE superseded_by IS NOT NULL GROUP BY superseded_by HAVING count(*) >= ?) h JOIN memory m ON m.id = h.id`,
    )
    .raw()
    .all(HEAVY_CHILDREN) as [number, string, number, string | null][];
  const byId = new Map(rows.map(([rowid, id, n]) => [id, { rowid, n, below: [] as string[] }]));
  for (const [, id, , parent] of rows) if (parent !== null) byId.get(parent)?.below.push(id);
  const total = new Map<string, number>();
  // A ring of supersedes (an agent pointing versions at each other) counts each of its rows once: a count cut short
  // by the ring is not kept for the others, whose own count it is not. Past SQLite's trigger depth a cascade fails
  // anyway, and such chains are deleted from their oldest version up (src/layouts/warden/chain.ts).
  const cascade = (id: string, seen: Set<string>): { n: number; cut: boolean } => {
    const known = total.get(id);
    if (known !== undefined) return { n: known, cut: false };
    const hub = byId.get(id)!;
    seen.add(id);
    let n = hub.n;
    let cut = false;
    for (const child of hub.below) {
      if (seen.has(child) || seen.size >= MAX_TRIGGER_DEPTH) cut = true;
      else {
        const below = cascade(child, seen);
        n += below.n;
        cut ||= below.cut;
      }
    }
    if (!cut) total.set(id, n);
    return { n, cut };
  };
  const out = new Map<number, number>();
  for (const [id, hub] of byId) out.set(hub.rowid, cascade(id, new Set()).n);
  return out;
}

/** The rule that selected `rowid`, or 'cascaded' when none did (binary search: the rowids are sorted). */
function reasonOf(c: Candidates, rowid: number): PruneReason {
  let lo = 0;
  let hi = c.rowids.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    const at = c.rowids[mid]!;
    if (at === rowid) return c.superseded[mid] ? 'superseded' : 'expired';
    if (at < rowid) lo = mid + 1;
    else hi = mid - 1;
  }
  return 'cascaded';
}

/** Whether `rowid` is in the candidates' range (which holds every candidate of it). */
const inRange = (c: Candidates, rowid: number) => (c.after === null || rowid > c.after) && (c.until === null || rowid <= c.until);

/**
 * Of the rows a cascade took outside the candidates' range, the rule each met as it went (counted in the write
 * transaction, DeleteOptions.count); inside it, the candidates say. A row both rules select counts as expired.
 */
const OUT_OF_RANGE_RULE = `CASE WHEN (@after IS NULL OR rowid_ > @after) AND (@until IS NULL OR rowid_ <= @until) THEN NULL
  WHEN @expiredOn AND ${EXPIRED_SQL} THEN 'expired' WHEN ${LONG_SUPERSEDED_SQL} THEN 'superseded' END`;

/**
 * Each deleted row counts under the rule that selected it; one no rule selected went with the cascade. `ruled`:
 * the rows outside the candidates' range that a rule selected (the rest of those went with the cascade).
 */
function tally(
  result: PruneResult, rowids: readonly number[], rows: readonly DeletedRow[], candidates: Candidates, ruled = new Map<string, number>(),
): void {
  for (const rowid of rowids) result[inRange(candidates, rowid) ? reasonOf(candidates, rowid) : 'cascaded'] += 1;
  for (const reason of ['expired', 'superseded'] as const) {
    const n = ruled.get(reason) ?? 0;
    result[reason] += n;
    result.cascaded -= n;
  }
  result.deleted += rowids.length;
  for (const row of rows.slice(0, ID_CAP - result.ids.length)) result.ids.push(row.id);
  result.idsTruncated = result.deleted > result.ids.length;
}

/**
 * What a prune would delete, counted as it would count it: the whole closure at once (a cascade reached from two
 * ranges would count twice), in SQL, row by row, so that nothing of it is held here but the first ID_CAP ids (it was
 * an object per row: 3.5M at 10M rows). A row both rules select counts as expired; one no rule selects went with
 * the cascade.
 */
function dryRunTally(store: Pick<StoreHandle, 'db'>, rules: PruneRules, result: PruneResult): void {
  const rows = store.db.prepare(`
    WITH RECURSIVE doomed(id) AS (
      SELECT id FROM memory WHERE ${PRUNABLE_SQL}
      UNION
      SELECT m.id FROM memory m JOIN doomed d ON m.superseded_by = d.id
    )
    SELECT id, CASE WHEN @expiredOn AND ${EXPIRED_SQL} THEN 'expired' WHEN ${LONG_SUPERSEDED_SQL} THEN 'superseded' ELSE 'cascaded' END
    FROM memory WHERE id IN (SELECT id FROM doomed)`).raw().iterate(pruneParams(rules)) as IterableIterator<[string, PruneReason]>;
  for (const [id, reason] of rows) {
    result[reason] += 1;
    result.deleted += 1;
    if (result.ids.length < ID_CAP) result.ids.push(id);
  }
  result.idsTruncated = result.deleted > result.ids.length;
}

/** Prune of the brief's memory table (with its Qdrant side when configured), in short batches. */
export async function pruneWarden(store: StoreHandle, ctx: JobContext, { dryRun }: { dryRun: boolean }): Promise<PruneResult> {
  const started = Date.now();
  const opts = ctx.config.prune;
  const rules: PruneRules = { now: ctx.now(), expired: opts.expired, supersededAfterDays: opts.supersededAfterDays };
  const result: PruneResult = {
    store: store.name, now: toCanonical(rules.now), dryRun,
    deleted: 0, expired: 0, superseded: 0, cascaded: 0, batches: 0, ids: [], idsTruncated: false, durationMs: 0,
  };
  // Commits by others from here on end quiet mode (deleteInBatches): the scan for candidates counts as time watched,
  // and so does the time before it in which the store's files show no write (read after data_version: a commit
  // between the two is in the files' times, one after it in data_version).
  const version = store.db.prepare('PRAGMA data_version').pluck().get() as number;
  const watched: Watched = { version, since: performance.now(), lastWrite: lastWriteAt(store.path) };
  // On a store of some size, the checkpoint thread starts while the candidates are collected, and checkpoints from
  // the first batch on: until it does, an agent's commit that finds 1,000 frames in the WAL copies them itself.
  const earlyCheckpoints = !dryRun && journalMode(store.db) === 'wal' && storeBytes(store.db) >= THREAD_MIN_BYTES;
  if (earlyCheckpoints) warmStoreThread();
  if (dryRun) dryRunTally(store, rules, result);
  else {
    const ranges = candidateRanges(store, rules, opts.candidateRows);
    const first = ranges.next();
    if (!first.done) {
      const all = (function* () {
        yield first.value;
        yield* ranges;
      })();
      await withMaintenanceLock(store.path, 'prune', () => deleteInBatches(store, ctx, all, rules, result, watched, earlyCheckpoints));
    }
  }
  result.durationMs = Date.now() - started;
  return result;
}

/**
 * The store's data_version when the prune began watching for other connections' commits, when that was, and when
 * the store's files were last written before it (performance.now()'s clock).
 */
interface Watched { version: number; since: number; lastWrite: number }

/**
 * When anyone last wrote the store, as its files tell: the later mtime of the file and of a WAL with frames in it.
 * A commit writes the WAL (with a rollback journal, the file itself), so files older than QUIET_AFTER_MS mean no
 * commit in that time. An empty WAL says nothing: opening a WAL store creates it, a TRUNCATE checkpoint empties it
 * (and wrote the file first). Now when nothing can be read; a clock that puts the times in the future only delays
 * quiet mode.
 */
function lastWriteAt(path: string): number {
  let latest = Date.now();
  for (const file of [path, `${path}-wal`]) {
    try {
      const st = statSync(file);
      if (file === path) latest = st.mtimeMs;
      else if (st.size > 0) latest = Math.max(latest, st.mtimeMs);
    } catch {
      // no WAL (a rollback journal, or none since the last close): the file's own time
    }
  }
  return performance.now() - Math.max(0, Date.now() - latest);
}

/**
 * The agent's writes get in between batches. SQLite has no queue of waiting writers: a writer that finds the lock
 * taken sleeps 1, 2, 5, 10, 15, 20, 25, 25 … ms and tries again. So each batch holds the lock for about
 * `batchMs`, then leaves it free for a window of up to `pauseMs`, long enough for one of those retries to fall
 * inside it. The window closes as soon as another connection has committed (the writer that was waiting got in),
 * so a busy agent costs the prune only the time until its next retry. batchMs (15) is sized to those retries: a
 * writer that tried as the batch began retries 18 ms later and finds the lock free, and a batch that overran by
 * as much again still ends before its retry at 33 ms (a root whose cascade takes hundreds of rows is weighed as
 * such: heavyRoots). Nobody can see a writer
 * that waits (between its tries it holds no lock), only its commits (PRAGMA data_version); when none came for
 * QUIET_AFTER_MS, batches last quietBatchMs, and each window lasts until any writer that began waiting during the
 * batch has tried again (retryGapMs). Several writers fare better with windows
 * that always last `pauseMs` (`prune.windowEndsOnCommit: false`): one whose retries have backed off to 50 or
 * 100 ms sleeps rarely hits a window that the first commit ended.
 *
 * Each batch's checkpoint runs on a thread of its own (src/store/checkpointer.ts), asked for as the commit returns,
 * while the window and the next batch go on; it copies until every frame is in the file, the agent's too. The
 * agent's commits then find a checkpoint running (their own autocheckpoint gives up at once) or nothing left to
 * copy (they start the WAL again from the top), instead of copying the batch and waiting for its fsyncs. A WAL
 * only starts again from its beginning at a write transaction that began with every frame copied, so every few
 * batches, after the window, the prune waits for a checkpoint that copied everything with no commit overtaking it
 * (RESTART_TRIES): the WAL holds those few batches, not the whole prune.
 */
async function deleteInBatches(
  store: StoreHandle, ctx: JobContext, ranges: Iterable<Candidates>, rules: PruneRules, result: PruneResult, watched: Watched,
  earlyCheckpoints: boolean,
): Promise<void> {
  const opts = ctx.config.prune;
  const rule = { sql: PRUNABLE_SQL, params: pruneParams(rules) };
  const heavy = heavyRoots(store);
  // Beside a writer, a hub not yet taken apart weighs more than any batch can take: it waits to be a batch's first
  // root, where its older versions go first (deleteOlderVersions). A quiet batch takes it whole.
  let splitting = false;
  const isHub = (rowid: number) => (heavy.get(rowid) ?? 0) >= HUB_ROWS;
  const weight = (rowid: string | number) =>
    splitting && isHub(rowid as number) ? Infinity : 1 + CASCADE_COST * (heavy.get(rowid as number) ?? 0);
  const restore = tuneForPrune(store.db);
  const checkpointer = journalMode(store.db) === 'wal' ? startCheckpointer(store.path) : null;
  try {
    if (earlyCheckpoints) await checkpointer?.ready();
    // Start small (the first batch meets a cold cache); then each batch is offered the roots that should fill
    // batchMs and a little over, and takes chunks of them until its time is up (the budget, not the offer, bounds
    // how long it holds the lock: a quiet prune reaches its long batches at the second batch, not the tenth).
    let offer = Math.min(opts.batchSize, 100);
    let chunk = 50;
    let overhead = 0; // lock time beyond the deletes (collecting what went, the commit), smoothed
    let windows = 0;
    // Nobody else has committed for QUIET_AFTER_MS: batches go on for quietBatchMs instead of batchMs, and the window
    // after each lasts until any writer that began waiting during it has tried again once (retryGapMs). A writer
    // that turns up then waits for one such batch; its commit ends quiet mode at once.
    const quietMs = opts.pauseMs > 0 ? Math.max(opts.batchMs, opts.quietBatchMs) : opts.batchMs;
    const version = store.db.prepare('PRAGMA data_version').pluck();
    let lastVersion = version.get() as number;
    // Nobody committed while the candidates were collected: as quiet as that and the files' last write say. Someone
    // did: as if just now.
    let lastCommit = lastVersion === watched.version ? Math.min(watched.since, watched.lastWrite) : performance.now();
    let windowMs = opts.pauseMs;
    const quiet = () => performance.now() - lastCommit > QUIET_AFTER_MS;
    // Each commit's checkpoint is asked for the moment it returns (src/store/checkpointer.ts), with the write lock
    // taken again until the thread is checkpointing: an agent's commit in between would find the batch not copied and
    // no checkpoint running, and copy it itself (SQLite's autocheckpoint), waiting for both fsyncs.
    const afterCommit = () => {
      if (!checkpointer) return;
      store.db.exec('BEGIN IMMEDIATE');
      try {
        checkpointer.requestStarted(CHECKPOINT_START_MS);
      } finally {
        store.db.exec('ROLLBACK');
      }
    };
    // After each batch (and each transaction of a deep chain's delete): the agent's window.
    const letWritersIn = async (): Promise<boolean> => {
      const window = performance.now();
      const before = version.get() as number;
      if (before !== lastVersion) lastCommit = performance.now(); // only another connection's commit changes it
      // The window closes early once another connection has committed: the writer that was waiting got in.
      const open = () => {
        lastVersion = version.get() as number;
        if (lastVersion === before) return true;
        lastCommit = performance.now();
        return !opts.windowEndsOnCommit;
      };
      while (performance.now() - window < windowMs && open() && !ctx.signal.aborted) {
        await new Promise((r) => setTimeout(r, 1));
      }
      if (++windows % WAL_BATCHES === 0 && checkpointer) {
        // The WAL starts again from its top only at a write transaction that began with every frame copied. The
        // window's commits left frames the checkpoint has not copied yet: the next batch waits (the lock free)
        // until a checkpoint has copied them with no commit meanwhile, a few tries at most.
        for (let tries = 0; tries < RESTART_TRIES && !ctx.signal.aborted; tries++) {
          const seen = version.get() as number;
          checkpointer.request();
          await checkpointer.idle();
          lastVersion = version.get() as number;
          if (lastVersion === seen) break;
          lastCommit = performance.now();
        }
      }
      return !ctx.signal.aborted;
    };
    const hubIdOf = store.db.prepare('SELECT id FROM memory WHERE rowid = ?').pluck();
    const olderVersions = store.db.prepare('SELECT rowid FROM memory WHERE superseded_by = @hubId AND id <> @hubId ORDER BY rowid').pluck();
    const HUB_DUE = `SELECT 1 FROM memory WHERE id = @hubId AND (${PRUNABLE_SQL})`;
    const hubDue = store.db.prepare(HUB_DUE);
    /**
     * The rows `hub` is superseded by, each with its own cascade, in transactions of half a batch's time (a row
     * spread over the file takes about as long to commit as to delete), windows between them. Each transaction
     * deletes only rows still superseded by the hub while the hub still meets the rule: what the hub's cascade would
     * take at that moment. A hub the agent changed meanwhile keeps the rows not yet deleted. False: interrupted.
     */
    const deleteOlderVersions = async (hub: number, candidates: Candidates, count: Sql): Promise<boolean> => {
      const hubId = hubIdOf.get(hub) as string | undefined;
      if (hubId === undefined) return true;
      const below = olderVersions.all({ hubId }) as number[];
      const recheck = { sql: `superseded_by = @hubId AND EXISTS (${HUB_DUE})`, params: { ...rule.params, hubId } };
      let part = 16;
      for (let j = 0; j < below.length; ) {
        if (!(await letWritersIn())) return false;
        const budget = { ms: Math.max(1, opts.batchMs - overhead) / 2, chunk: part, weight };
        const rows = ID_CAP - result.ids.length;
        // Offered about what the budget takes: with a vector store, the offered rows' vectors go before the transaction.
        const outcome = await deleteRoots(store.db, below.slice(j, j + Math.max(64, 3 * part)), { key: 'rowid', vectors: store.vectors, recheck, count, budget, rows, pause: letWritersIn, afterCommit });
        j += outcome.consumed;
        tally(result, outcome.rowids, outcome.deleted, candidates, outcome.counts);
        result.batches += 1;
        part = Math.max(4, Math.round((CHUNK_MS * outcome.consumed) / Math.max(outcome.deleteMs, 0.1)));
        if (outcome.rowids.length === 0 && hubDue.get(recheck.params) === undefined) break;
      }
      return letWritersIn();
    };
    // The candidates are read a range at a time: on a terminal, their number is counted first (one more read of the
    // table, paid only where someone watches the line).
    const shown = ctx.progress !== undefined && ctx.progress !== noProgress;
    const toDo = shown ? (store.db.prepare(`SELECT count(*) FROM memory WHERE ${PRUNABLE_SQL}`).pluck().get(pruneParams(rules)) as number) : undefined;
    ctx.progress?.start('prune', toDo, 'rows');
    let first = true;
    let offered = 0;
    for (const candidates of ranges) {
      const count = { sql: OUT_OF_RANGE_RULE, params: { after: candidates.after, until: candidates.until } };
      for (let i = 0; i < candidates.rowids.length; ) {
        if (!first) await letWritersIn();
        first = false;
        if (ctx.signal.aborted) {
          ctx.log.warn({ store: store.name, done: result.deleted }, 'prune interrupted; the next run finishes it');
          return;
        }
        const calm = quiet();
        const batchMs = calm ? quietMs : opts.batchMs;
        splitting = !calm;
        const hub = candidates.rowids[i]!;
        if (splitting && isHub(hub)) {
          if (!(await deleteOlderVersions(hub, candidates, count))) continue;
          heavy.delete(hub); // what is left of its cascade is what the agent added since
        }
        const roots = Array.from(candidates.rowids.subarray(i, i + offer));
        const budget = { ms: Math.max(1, batchMs - overhead), chunk, weight };
        const rows = ID_CAP - result.ids.length; // ids are listed up to ID_CAP; past it, rowids are enough
        const outcome = await deleteRoots(store.db, roots, { key: 'rowid', vectors: store.vectors, recheck: rule, count, budget, rows, pause: letWritersIn, afterCommit });
        i += outcome.consumed;
        offered += outcome.consumed;
        tally(result, outcome.rowids, outcome.deleted, candidates, outcome.counts);
        ctx.progress?.set(toDo === undefined ? offered : Math.min(offered, toDo));
        result.batches += 1;
        const spent = outcome.lockMs - outcome.deleteMs;
        overhead = result.batches === 1 ? spent : 0.7 * overhead + 0.3 * spent;
        const msPerRoot = Math.max(outcome.deleteMs, 0.1) / outcome.consumed;
        let weighed = 0;
        for (let r = 0; r < outcome.consumed; r++) weighed += weight(roots[r]!);
        chunk = Math.max(10, Math.round((CHUNK_MS * weighed) / Math.max(outcome.deleteMs, 0.1)));
        offer = Math.max(50, Math.min(opts.batchSize, Math.round((1.5 * batchMs) / msPerRoot)));
        windowMs = calm && quietMs > opts.batchMs ? Math.max(opts.pauseMs, retryGapMs(outcome.lockMs) + 5) : opts.pauseMs;
      }
    }
    checkpointer?.request();
    await checkpointer?.idle();
  } finally {
    ctx.progress?.done();
    await checkpointer?.close();
    restore();
  }
}

/**
 * For the length of the prune: a page cache of 64 MB, so that the few thousand pages a batch dirties stay in it
 * until the commit instead of spilling to the WAL halfway, and no checkpoint inside the prune's own commits (the
 * checkpointer thread does them).
 */
function tuneForPrune(db: Db): () => void {
  const cacheSize = db.pragma('cache_size', { simple: true }) as number;
  const autoCheckpoint = db.pragma('wal_autocheckpoint', { simple: true }) as number;
  db.pragma('cache_size = -65536');
  db.pragma('wal_autocheckpoint = 0');
  return () => {
    db.pragma(`cache_size = ${cacheSize}`);
    db.pragma(`wal_autocheckpoint = ${autoCheckpoint}`);
  };
}

