import type Database from 'better-sqlite3';
import type { Db } from '../../store/sqlite.js';
import type { VectorSink } from '../../vectors/sink.js';
import { transientError } from '../../core/errors.js';

/** A row a delete removed, and (when the caller asked) why. */
export interface DeletedRow {
  id: string;
  rowid: number;
  reason: string | null;
}

/** Roots are named by id, or by rowid (prune: read straight off the covering indexes, no table lookup). */
export type RootKey = 'id' | 'rowid';

/** A SQL fragment with its named parameters. */
export interface Sql {
  sql: string;
  params?: Record<string, unknown>;
}

/**
 * Deep supersede chains, deleted from the oldest version up.
 *
 * ON DELETE CASCADE is run by SQLite as nested trigger programs, one level per version: a DELETE whose cascade is
 * more than SQLITE_MAX_TRIGGER_DEPTH (1000) versions deep fails with "too many levels of trigger recursion", and
 * well before that the cascade costs time quadratic in the depth (900 versions: over 100 ms in one statement).
 * An agent's own data reaches that (a fact corrected often, or a hostile agent), so a root whose chain is deep
 * is deleted here instead: its older versions, deepest first, one row per DELETE (nothing points at a row any
 * more when it goes, so no cascade fires), in short transactions. Between two of them the store holds a shorter,
 * valid chain: nothing dangles, live_memory is unchanged, and a crash leaves what the next run finishes.
 */

type Statement = Database.Statement<unknown[]>;
const statements = new WeakMap<Db, Map<string, Statement>>();

/**
 * `sql` prepared once per connection (in `mode`: rows as objects, plucked or raw). A statement prepared per batch is
 * finalized only when V8 collects its wrapper, which a small heap rarely does: over the thousands of batches of a
 * large store's prune the compiled statements piled up in native memory, out of the heap's sight.
 */
export function statement(db: Db, sql: string, mode: 'rows' | 'pluck' | 'raw' = 'rows'): Statement {
  let cache = statements.get(db);
  if (!cache) statements.set(db, (cache = new Map()));
  const key = `${mode}:${sql}`;
  let st = cache.get(key);
  if (!st) {
    st = db.prepare(sql);
    if (mode === 'pluck') st.pluck();
    else if (mode === 'raw') st.raw();
    cache.set(key, st);
  }
  return st;
}

/** The captured rows by the value of `count`, read before they are cleared. */
export function countCaptured(db: Db, count: Sql | undefined, params: Record<string, unknown>): Map<string, number> {
  const out = new Map<string, number>();
  if (!count) return out;
  const rows = statement(db, `SELECT k, count(*) FROM (SELECT ${count.sql} AS k FROM temp.warden_deleted) WHERE k IS NOT NULL GROUP BY k`, 'raw').all({ ...params, ...count.params }) as [unknown, number][];
  for (const [k, n] of rows) out.set(String(k), n);
  return out;
}

/** Adds `more` into `into`. */
export function addCounts(into: Map<string, number>, more: ReadonlyMap<string, number>): void {
  for (const [k, n] of more) into.set(k, (into.get(k) ?? 0) + n);
}

/** A root whose cascade reaches this depth takes the path of this file (once a batch has met a deep chain). */
export const DEEP = 64;

/** The roots among `rootsJson` whose chain of older versions is at least DEEP versions deep. */
export function deepRoots(db: Db, rootsJson: string, key: RootKey): (string | number)[] {
  // UNION ALL with the depth bound: it also ends on a cycle (an agent can point versions at each other in a ring).
  return db.prepare(`
    WITH RECURSIVE sub(root, id, n) AS (
      SELECT r.value, m.id, 0 FROM json_each(@roots) r JOIN memory m ON m.${key} = r.value
      UNION ALL
      SELECT sub.root, m.id, sub.n + 1 FROM memory m JOIN sub ON m.superseded_by = sub.id WHERE sub.n < ${DEEP}
    )
    SELECT DISTINCT root FROM sub WHERE n = ${DEEP}`).pluck().all({ roots: rootsJson }) as (string | number)[];
}

interface Version {
  id: string;
  rowid: number;
}

/** The root and every older version behind it, deepest first (the root last); empty once the root is gone. */
function planChain(db: Db, root: string | number, key: RootKey): { versions: Version[]; ring: boolean } {
  const top = db.prepare(`SELECT id, rowid, superseded_by AS up FROM memory WHERE ${key} = ?`).get(root) as (Version & { up: string | null }) | undefined;
  if (!top) return { versions: [], ring: false };
  // Each row supersedes into one row, so walking down from the root meets no row twice, except the root itself
  // when the root is on a ring: the walk stops there.
  const versions = db.prepare(`
    WITH RECURSIVE sub(id, rid, n) AS (
      SELECT @id, @rowid, 0
      UNION ALL
      SELECT m.id, m.rowid, sub.n + 1 FROM memory m JOIN sub ON m.superseded_by = sub.id WHERE m.id <> @id
    )
    SELECT id, rid AS rowid FROM sub ORDER BY n DESC`).all({ id: top.id, rowid: top.rowid }) as Version[];
  return { versions, ring: top.up !== null && top.up !== top.id && versions.some((v) => v.id === top.up) };
}

export interface ChainOptions {
  key: RootKey;
  vectors?: VectorSink | undefined;
  /** The root must still satisfy this, in every transaction; once it does not, the rest of its chain stays. */
  recheck?: Sql;
  /** Parameters of the callers' SQL (recheck, classify), @roots included. */
  params: Record<string, unknown>;
  classify?: Sql;
  /** The removed rows are counted by this expression (DeleteOptions.count, src/layouts/warden/delete.ts). */
  count?: Sql;
  /** Time each transaction may hold the write lock. */
  ms: number;
  /** Ids whose vectors are already gone (shared with the caller's own batch). */
  vectorsGone: Set<string>;
  beforeCommit?: (deleted: DeletedRow[]) => void;
  afterCommit?: () => void;
  /** Awaited before each transaction (the agent's writes get in); false stops the delete, the chain stays valid. */
  pause: () => Promise<boolean>;
}

class Stale extends Error {}

/** How many times in a row a plan may be overtaken by another writer before it is made inside the write lock. */
const STALE_LIMIT = 3;

/**
 * Delete `root` with its whole chain, deepest version first, over as many short transactions as it takes. Each
 * transaction re-checks the root, and starts only if no other connection has committed since the plan was made
 * (an agent that moves a version elsewhere takes it out of the chain: the plan is made again). Vectors go first,
 * a window of versions ahead of each transaction.
 */
export async function deleteChain(
  db: Db, root: string | number, opts: ChainOptions,
): Promise<{ deleted: DeletedRow[]; rowids: number[]; counts: Map<string, number> }> {
  const out = { deleted: [] as DeletedRow[], rowids: [] as number[], counts: new Map<string, number>() };
  const remove = statement(db, `DELETE FROM memory WHERE rowid = ? AND id = ?`);
  const qualifies = db.prepare(`SELECT 1 FROM memory WHERE ${opts.key} = @root${opts.recheck ? ` AND (${opts.recheck.sql})` : ''}`);
  const breakRing = db.prepare(`UPDATE memory SET superseded_by = id WHERE ${opts.key} = @root`);
  const captured = db.prepare(`SELECT id, rowid_ AS rowid, ${opts.classify?.sql ?? 'NULL'} AS reason FROM temp.warden_deleted`);
  const clear = statement(db, `DELETE FROM temp.warden_deleted`);
  // The data version is read before the plan is made: a commit in between makes the plan stale, never unnoticed.
  const replan = () => ({ version: dataVersion(db), plan: planChain(db, root, opts.key), done: 0 });
  let { plan, version } = replan();
  let stale = 0;
  let window = 256;
  for (let done = 0; done < plan.versions.length; ) {
    // A window for the agent before each transaction: the caller's own transaction has just committed.
    if (!(await opts.pause())) break;
    const ahead = plan.versions.slice(done, done + window);
    if (opts.vectors) {
      const gone = ahead.map((v) => v.id).filter((id) => !opts.vectorsGone.has(id));
      if (gone.length > 0) await opts.vectors.deleteForRows(gone);
      gone.forEach((id) => opts.vectorsGone.add(id));
    }
    try {
      const step = db.transaction(() => {
        const started = performance.now();
        if (stale >= STALE_LIMIT) ({ plan, version, done } = replan());
        else if (dataVersion(db) !== version) throw new Stale();
        if (!qualifies.get({ ...opts.params, root })) return null;
        if (plan.ring) breakRing.run({ root }); // a ring has no oldest version: make the root the end of the chain
        clear.run();
        let n = 0;
        const upTo = Math.min(ahead.length, plan.versions.length - done);
        while (n < upTo && (n % 64 !== 0 || n === 0 || performance.now() - started < opts.ms)) {
          const v = plan.versions[done + n]!;
          if (opts.vectors && !opts.vectorsGone.has(v.id)) break; // a plan made in the lock: its vectors first
          remove.run(v.rowid, v.id);
          n += 1;
        }
        const rows = captured.all({ ...opts.params }) as DeletedRow[];
        const counts = countCaptured(db, opts.count, opts.params);
        clear.run();
        // A row the cascade took that was not planned (the agent attached it meanwhile) may still have vectors.
        if (opts.vectors && rows.some((r) => !opts.vectorsGone.has(r.id))) throw new Stale();
        opts.beforeCommit?.(rows);
        return { rows, n, counts };
      }).immediate();
      if (step === null) break;
      opts.afterCommit?.();
      for (const row of step.rows) {
        out.deleted.push(row);
        out.rowids.push(row.rowid);
      }
      addCounts(out.counts, step.counts);
      done += step.n;
      window = Math.max(256, 2 * step.n);
      stale = 0;
      plan.ring = false;
    } catch (err) {
      if (!(err instanceof Stale) && !isTriggerDepth(err)) throw err;
      if (++stale > STALE_LIMIT + 2) throw transientError(`delete: the supersede chain of ${String(root)} kept changing; try again`);
      ({ plan, version, done } = replan());
    }
  }
  return out;
}

/** SQLite's error for a cascade deeper than SQLITE_MAX_TRIGGER_DEPTH. */
export function isTriggerDepth(err: unknown): boolean {
  return err instanceof Error && /too many levels of trigger recursion/.test(err.message);
}

/** Changes when another connection commits (PRAGMA data_version), whichever process it is in. */
function dataVersion(db: Db): number {
  return db.pragma('data_version', { simple: true }) as number;
}
