import type { Db } from '../../store/sqlite.js';
import type { VectorSink } from '../../vectors/sink.js';
import { transientError } from '../../core/errors.js';
import { addCounts, countCaptured, deepRoots, deleteChain, isTriggerDepth, statement } from './chain.js';

// The delete vocabulary lives in chain.ts, which delete.ts calls (one arrow between the two files).
export type { DeletedRow, RootKey, Sql } from './chain.js';
import type { DeletedRow, RootKey, Sql } from './chain.js';

/** Where the roots are named by rowid, the closure and the DELETE start from those rows' ids. */
const rootIds = (key: RootKey) =>
  key === 'rowid' ? `SELECT id FROM memory WHERE rowid IN (SELECT value FROM json_each(@roots))` : `SELECT value FROM json_each(@roots)`;


const closureSql = (key: RootKey) => `
WITH RECURSIVE doomed(id) AS (
  ${rootIds(key)}
  UNION
  SELECT m.id FROM memory m JOIN doomed d ON m.superseded_by = d.id
)
SELECT m.id FROM doomed d JOIN memory m ON m.id = d.id`;

/**
 * The rows that deleting `roots` removes: the roots and, through ON DELETE CASCADE, every older version whose
 * supersede chain leads to one of them.
 */
export function cascadeClosure(db: Db, roots: readonly (string | number)[], key: RootKey = 'id'): DeletedRow[] {
  if (roots.length === 0) return [];
  return db.prepare(`SELECT id, rowid, NULL AS reason FROM memory WHERE id IN (${closureSql(key)})`).all({ roots: JSON.stringify(roots) }) as DeletedRow[];
}

/**
 * Every row a delete removes, the cascade included, is captured by a TEMP trigger (this connection only; the
 * store's schema is not touched) into a TEMP table, inside the same transaction. That is how a batch learns its
 * exact cascade without walking the chains a second time. The columns the prune rules read are captured with it:
 * a `count` expression can ask, of a row the cascade took, which rule it met as it went.
 */
const CAPTURE_DDL = `
CREATE TEMP TABLE IF NOT EXISTS warden_deleted (id, rowid_ INTEGER, expires_at, created_at, superseded_by);
CREATE TEMP TRIGGER IF NOT EXISTS warden_capture AFTER DELETE ON main.memory BEGIN
  INSERT INTO warden_deleted VALUES (OLD.id, OLD.rowid, OLD.expires_at, OLD.created_at, OLD.superseded_by);
END;`;

const prepared = new WeakSet<Db>();

function prepareConnection(db: Db): void {
  // Not only a mark: setting temp_store (erase does before VACUUM) drops the TEMP objects made here.
  if (prepared.has(db) && statement(db, `SELECT 1 FROM temp.sqlite_schema WHERE name = 'warden_capture'`).get() !== undefined) return;
  // TEMP objects in memory: on a file, every captured row also went through the temp file's rollback journal,
  // a fifth of a prune batch's time. Changing temp_store drops TEMP objects, so only while there are none.
  if (db.prepare(`SELECT count(*) FROM temp.sqlite_schema`).pluck().get() === 0) db.pragma('temp_store = MEMORY');
  db.exec(CAPTURE_DDL);
  prepared.add(db);
}

export interface DeleteOptions {
  vectors?: VectorSink | undefined;
  /** Re-checked by the DELETE itself, inside the write transaction: a root the agent changed meanwhile stays. */
  recheck?: Sql;
  /**
   * Called inside the write transaction before anything is deleted (each attempt); throwing rolls it back with
   * nothing deleted. A person's decision looks at the whole chain there, as it will be deleted.
   */
  beforeDelete?: () => void;
  /** How `roots` name the rows. Default id. */
  key?: RootKey;
  /** A SQL expression over each deleted row's `id` (and @roots) saying why it went. */
  classify?: Sql;
  /** Called inside the write transaction, after the delete, with every row removed (e.g. to record it). */
  beforeCommit?: (deleted: DeletedRow[]) => void;
  /**
   * A SQL expression over each removed row (its id, rowid_, expires_at, created_at and superseded_by, as they were)
   * and the callers' parameters: the rows are counted by its value, in the transaction (`counts`); NULL: not counted.
   */
  count?: Sql;
  /** Called after each commit. A deep chain is deleted over several transactions, each with its beforeCommit. */
  afterCommit?: () => void;
  /**
   * Awaited before each of the transactions that delete a deep chain, so the agent's writes get in; false stops there
   * (the chain left is shorter and valid; the next run finishes it). Default: a few milliseconds' pause.
   */
  pause?: () => Promise<boolean>;
  maxAttempts?: number;
  /**
   * Delete the roots in chunks of `chunk` inside the transaction, and take no chunk that would end past `ms` at the
   * last chunk's time per unit of weight: the write lock is then held for about that long however fast or slow the
   * rows go. Roots left over are the caller's to pass again (with a vector store their vectors are already gone;
   * the rows follow with that next call, as they would after a crash).
   */
  budget?: DeleteBudget;
  /**
   * deleteRoots only: return at most this many rows in `deleted` (every removed row's rowid is in `rowids`
   * anyway). Turning thousands of rows into objects took a tenth of a prune batch. Ignored with a vector store
   * or `beforeCommit`, which need them all.
   */
  rows?: number;
}

export interface DeleteBudget {
  ms: number;
  /** The weight a chunk takes (at least one root). */
  chunk: number;
  /**
   * What deleting a root costs, in units of a root that takes no other row with it (default 1 each): a root that
   * a few hundred rows are superseded by takes them all in its cascade, and goes in a chunk of its own, or waits
   * for the next call when it would not fit in what is left of `ms`.
   */
  weight?: (root: string | number) => number;
}

/** What one deleteRoots call did: the rows removed, how many of the roots it got to, and its time in the lock. */
export interface DeleteOutcome {
  /** The rows removed, cascade included (with `rows`, only the first of them). */
  deleted: DeletedRow[];
  /** The rowid of every row removed. */
  rowids: number[];
  consumed: number;
  /** Time spent deleting, inside the transaction. */
  deleteMs: number;
  /** Time the write lock was held: BEGIN IMMEDIATE to COMMIT. */
  lockMs: number;
  /** The removed rows by the value of `count` (empty without it). */
  counts: Map<string, number>;
}

class ChainGrew extends Error {}

/** Each transaction of a deep chain's delete holds the write lock about this long when the caller set no budget. */
const CHAIN_MS = 40;
/** Calls that search each chunk for deep chains after one was found on the same connection. */
const DEEP_CALLS = 16;
const deepLately = new WeakMap<Db, number>();
/** A chunk slower than this (and than the whole budget) turns the search for deep chains on. */
const SLOW_CHUNK_MS = 20;
const shortPause = () => new Promise<boolean>((r) => setTimeout(() => r(true), 5));

/**
 * Delete `roots` with their cascade through both stores. Vectors first (outside the SQLite write lock, so the
 * agent is never blocked on a network call), then one short write transaction that re-checks each root. If an
 * agent wrote a new row into a doomed chain in between, the cascade would remove a row whose vectors are still
 * there: the transaction is rolled back, the newcomers' vectors are deleted too, and the batch is tried again.
 * A root whose chain is too deep to cascade goes after that transaction, from its oldest version up, over
 * short transactions of its own (src/layouts/warden/chain.ts).
 */
export async function deleteWithCascade(db: Db, roots: readonly (string | number)[], opts: DeleteOptions = {}): Promise<DeletedRow[]> {
  return (await deleteRoots(db, roots, opts)).deleted;
}

/** The chunk that starts at `from`: roots up to `chunk` in weight, at least one; where it ends, and its weight. */
export function chunkAt(roots: readonly (string | number)[], from: number, budget: DeleteBudget): { end: number; weight: number } {
  let end = from;
  let weight = 0;
  while (end < roots.length) {
    const w = budget.weight?.(roots[end]!) ?? 1;
    if (end > from && weight + w > budget.chunk) break;
    weight += w;
    end += 1;
  }
  return { end, weight };
}

/** deleteWithCascade, also saying how far it got (with `budget`, not necessarily through every root). */
export async function deleteRoots(db: Db, roots: readonly (string | number)[], opts: DeleteOptions = {}): Promise<DeleteOutcome> {
  if (roots.length === 0) return { deleted: [], rowids: [], consumed: 0, deleteMs: 0, lockMs: 0, counts: new Map() };
  prepareConnection(db);
  const params = { ...opts.recheck?.params, ...opts.classify?.params, roots: JSON.stringify(roots) };
  const key = opts.key ?? 'id';
  const remove = statement(db, `DELETE FROM memory WHERE ${key} IN (SELECT value FROM json_each(@roots))`);
  // The roots that still qualify are read first, in the same transaction, and the DELETE names only them. With the
  // rule in the DELETE's own WHERE, SQLite kept a copy of every page the transaction's deletes touched in the
  // statement journal, in memory (temp_store = MEMORY) until the commit: some 80 MB of a batch at 10M rows.
  const due = opts.recheck ? statement(db, `SELECT json_group_array(${key}) FROM memory WHERE ${key} IN (SELECT value FROM json_each(@roots)) AND (${opts.recheck.sql})`, 'pluck') : null;
  const removeRoots = (rootsJson: string) => remove.run({ roots: due ? due.get({ ...params, roots: rootsJson }) : rootsJson });
  const captured = statement(db, `SELECT id, rowid_ AS rowid, ${opts.classify?.sql ?? 'NULL'} AS reason FROM temp.warden_deleted LIMIT @rows`);
  const capturedRowids = statement(db, `SELECT rowid_ FROM temp.warden_deleted`, 'pluck');
  const rows = opts.vectors || opts.beforeCommit ? -1 : opts.rows ?? -1; // LIMIT -1: all of them
  const clear = statement(db, `DELETE FROM temp.warden_deleted`);
  const vectorsGone = new Set<string>();
  const attempts = opts.maxAttempts ?? 5;
  // Once a batch has met a chain too deep for ON DELETE CASCADE, each chunk is first searched for deep roots,
  // which are then deleted from their oldest version up (src/layouts/warden/chain.ts). Short chains never pay for that
  // search; a store with deep chains has it for the next DEEP_CALLS calls too, as deep chains tend to come in
  // numbers (each found costs a failed cascade of SQLITE_MAX_TRIGGER_DEPTH versions, about a second).
  let deepSearch = (deepLately.get(db) ?? 0) > 0;
  if (deepSearch) deepLately.set(db, deepLately.get(db)! - 1);
  const deep: (string | number)[] = [];
  const takeShallow = (chunk: string) => {
    if (!deepSearch) return chunk;
    const found = deepRoots(db, chunk, key);
    if (found.length === 0) return chunk;
    for (const r of found) deep.push(r);
    deepLately.set(db, DEEP_CALLS);
    const skip = new Set(found);
    return JSON.stringify((JSON.parse(chunk) as (string | number)[]).filter((r) => !skip.has(r)));
  };
  for (let attempt = 1; attempt <= attempts; attempt++) {
    if (opts.vectors) {
      const planned = cascadeClosure(db, roots, key).map((r) => r.id).filter((id) => !vectorsGone.has(id));
      if (planned.length > 0) {
        await opts.vectors.deleteForRows(planned);
        planned.forEach((id) => vectorsGone.add(id));
      }
    }
    try {
      const locked = performance.now();
      const outcome = db.transaction((): Omit<DeleteOutcome, 'lockMs'> => {
        const started = performance.now();
        clear.run();
        deep.length = 0;
        opts.beforeDelete?.();
        let consumed = roots.length;
        if (!opts.budget) removeRoots(takeShallow(params.roots));
        else {
          const { ms } = opts.budget;
          consumed = 0;
          let next = chunkAt(roots, 0, opts.budget);
          let msPerWeight = 0;
          do {
            const at = performance.now();
            removeRoots(takeShallow(JSON.stringify(roots.slice(consumed, next.end))));
            const took = performance.now() - at;
            // A cascade is quadratic in its depth: one chunk that alone outlasts the budget met chains deep enough
            // (hundreds of versions) to be deleted from the oldest up from the next call on.
            if (!deepSearch && took > Math.max(ms, SLOW_CHUNK_MS)) deepLately.set(db, DEEP_CALLS);
            msPerWeight = took / next.weight;
            consumed = next.end;
            next = chunkAt(roots, consumed, opts.budget);
            // No chunk starts that would end past the budget at the last chunk's time per weight.
          } while (consumed < roots.length && performance.now() - started + msPerWeight * next.weight <= ms);
        }
        const deleted = rows === 0 ? [] : (captured.all({ ...params, rows }) as DeletedRow[]);
        const rowids = rows === -1 ? deleted.map((r) => r.rowid) : (capturedRowids.all() as number[]);
        const counts = countCaptured(db, opts.count, params);
        clear.run();
        if (opts.vectors && deleted.some((r) => !vectorsGone.has(r.id))) throw new ChainGrew();
        opts.beforeCommit?.(deleted);
        return { deleted, rowids, consumed, deleteMs: performance.now() - started, counts };
      }).immediate();
      const lockMs = performance.now() - locked;
      opts.afterCommit?.();
      await deleteDeepChains(db, deep, opts, { key, params, vectorsGone, rows }, outcome);
      return { ...outcome, lockMs };
    } catch (err) {
      if (isTriggerDepth(err) && !deepSearch) {
        deepSearch = true;
        attempt -= 1; // not the chains changing: the same batch again, deep chains set aside
        continue;
      }
      if (!(err instanceof ChainGrew)) throw err;
    }
  }
  throw transientError(`delete: supersede chains kept changing during ${attempts} attempts; try again`);
}

/** The deep roots a batch set aside, each with its chain from the oldest version up; their rows join `outcome`. */
async function deleteDeepChains(
  db: Db, deep: readonly (string | number)[], opts: DeleteOptions,
  batch: { key: RootKey; params: Record<string, unknown>; vectorsGone: Set<string>; rows: number },
  outcome: Pick<DeleteOutcome, 'deleted' | 'rowids' | 'counts'>,
): Promise<void> {
  for (const root of deep) {
    const chain = await deleteChain(db, root, {
      key: batch.key, params: batch.params, vectorsGone: batch.vectorsGone, vectors: opts.vectors, recheck: opts.recheck,
      classify: opts.classify, count: opts.count, ms: opts.budget?.ms ?? CHAIN_MS, beforeCommit: opts.beforeCommit, afterCommit: opts.afterCommit,
      pause: opts.pause ?? shortPause,
    });
    addCounts(outcome.counts, chain.counts);
    // Loops, not push(...rows): a chain's rows can outnumber what a call's arguments may be.
    for (const rowid of chain.rowids) outcome.rowids.push(rowid);
    const room = batch.rows === -1 ? chain.deleted.length : Math.max(0, batch.rows - outcome.deleted.length);
    for (const row of chain.deleted.slice(0, room)) outcome.deleted.push(row);
  }
}
