import type pg from 'pg';
import type { PostgresStoreHandle, PruneOptions, PruneResult } from '../../contract.js';
import { DAY_MS, toCanonical, type Instant } from '../../../time/instants.js';
import { sqlState } from '../../../engines/postgres/session.js';
import { transientError } from '../../../core/errors.js';
import { engineFor } from '../../../engines/registry.js';
import type { VectorSink } from '../../../vectors/sink.js';
import { lockedClosure, vectorsInTransaction } from './vectors.js';
import { walkProcedure } from './prune-walk.js';

const ID_CAP = 1000;
/** A batch that met an agent's lock past lock_timeout is tried again this many times, then the prune fails (transient). */
const LOCK_RETRIES = 50;
/** The batch size's bounds as it follows `batchMs` (the upper one: the config's own bound on `batchSize`). */
const MIN_BATCH = 10;
const MAX_BATCH = 100_000;

/**
 * The brief's two rules over timestamptz, as one condition with $1 = now, $2 = the superseded cutoff, $3 = whether
 * expired rows go (`prune.expired`). Used for the candidates and again on each root inside its batch's transaction,
 * so a row an agent renewed or un-superseded since is kept.
 */
const prunable = (now: string, cut: string, expired: string) =>
  `((${expired} AND expires_at <= ${now}) OR (superseded_by IS NOT NULL AND created_at < ${cut}))`;

/** Every row whose supersede chain leads to one of $1: what ON DELETE CASCADE takes with them (rings counted once). */
const CLOSURE = (s: string) => `WITH RECURSIVE c(id) AS (
  SELECT id FROM ${s}.memory WHERE superseded_by = ANY($1::text[])
  UNION SELECT m.id FROM ${s}.memory m JOIN c ON m.superseded_by = c.id)
SELECT id FROM c WHERE NOT (id = ANY($1::text[]))`;

interface Rules {
  now: Date;
  cut: Date;
  expired: boolean;
}

/**
 * Prune beside live agents: short transactions under `SET LOCAL lock_timeout`, so prune never waits on an agent longer
 * than that, each sized to last about `batchMs` (an agent touching a row prune deletes waits at most that): the first
 * of `batchSize` roots, each next one grown or shrunk by the last one's time, at most doubled; a batch that meets an
 * agent's lock is rolled back and tried again, and the next one is half its size. Each batch
 * re-checks its roots (FOR UPDATE: an agent's renewal commits before or after, never between), locks their older
 * versions, and deletes roots and versions in one statement: the cascade's triggers then find nothing left, so a
 * chain of any depth goes without recursion. kill -9 at any point rolls the open batch back; the next run finishes.
 * One prune per schema across the fleet: the engine's advisory lock. A store without vectors, with no hook to tell
 * before each commit, is pruned without a list of candidates: the table walked by position on the server (walkPrune);
 * vectors (Qdrant, deleted before each batch; pgvector, in it), a hook and a dry run take the list.
 */
export async function prunePg(store: PostgresStoreHandle, opts: PruneOptions): Promise<PruneResult> {
  const { ctx, dryRun } = opts;
  const started = Date.now();
  const nowMs: Instant = ctx.now();
  const rules: Rules = { now: new Date(nowMs), cut: new Date(nowMs - ctx.config.prune.supersededAfterDays * DAY_MS), expired: ctx.config.prune.expired };
  const result: PruneResult = {
    store: store.name, now: toCanonical(nowMs), dryRun,
    deleted: 0, expired: 0, superseded: 0, cascaded: 0, batches: 0, ids: [], idsTruncated: false, durationMs: 0,
  };
  const s = store.schema;
  if (!dryRun && !store.vectors && !opts.beforeDelete && await countsDeletes(store)) {
    await walkPrune(store, opts, rules, result);
    result.durationMs = Date.now() - started;
    return result;
  }
  const params = [rules.now, rules.cut, rules.expired];
  const candidates = (await store.pg.query<{ id: string; expired: boolean }>(
    `SELECT id, ($3 AND expires_at <= $1) AS expired FROM ${s}.memory WHERE ${prunable('$1', '$2', '$3')} ORDER BY id`, params)).rows;
  if (dryRun) {
    const roots = candidates.map((c) => c.id);
    const versions = roots.length === 0 ? [] : (await store.pg.query<{ id: string }>(CLOSURE(s), [roots])).rows.map((r) => r.id);
    for (const c of candidates) result[c.expired ? 'expired' : 'superseded'] += 1;
    result.cascaded = versions.length;
    result.deleted = roots.length + versions.length;
    result.ids = [...roots, ...versions].slice(0, ID_CAP);
    result.idsTruncated = result.deleted > result.ids.length;
    result.durationMs = Date.now() - started;
    return result;
  }
  if (candidates.length === 0) {
    result.durationMs = Date.now() - started;
    return result;
  }
  const engine = await engineFor(store.config);
  const lock = await engine.lock(store, 'prune');
  await statisticsFirst(store, ctx.log);
  const client = await store.pg.connect();
  const cfg = store.config.postgres!;
  try {
    ctx.progress?.start('prune', candidates.length, 'rows');
    let size = Math.min(cfg.batchSize, MAX_BATCH);
    for (let i = 0; i < candidates.length; ) {
      if (ctx.signal.aborted) {
        ctx.log.warn({ store: store.name, done: result.deleted }, 'prune interrupted; the next run finishes it');
        break;
      }
      const batch = candidates.slice(i, i + size);
      const inTx = vectorsInTransaction(store, client);
      // Vectors elsewhere (Qdrant) go first, before the transaction: the batch's roots and their older versions.
      if (store.vectors && !inTx) await store.vectors.deleteForRows([...new Set([...batch.map((c) => c.id), ...await closure(store, batch.map((c) => c.id))])]);
      const t0 = performance.now();
      // No hook to tell before the commit and no vectors in the transaction: the common batch in one round trip.
      const quick = !inTx && !opts.beforeDelete ? await retrying(client, store, () => oneTripBatch(client, s, batch, rules, cfg.lockTimeoutMs)) : undefined;
      const { out: done, retried } = quick?.out
        ? { out: quick.out, retried: quick.retried }
        : await batchWithRetries(client, store, cfg.lockTimeoutMs, () => deleteBatch(client, s, batch, rules, opts, inTx, quick !== undefined));
      size = nextSize(batch.length, performance.now() - t0, cfg.batchMs, retried || quick?.retried === true);
      // Counted once committed: a batch rolled back and tried again is counted by the try that committed.
      result.expired += done.expired;
      result.superseded += done.superseded;
      result.cascaded += done.cascaded;
      result.deleted += done.ids.length;
      for (const id of done.ids.slice(0, ID_CAP - result.ids.length)) result.ids.push(id);
      result.idsTruncated = result.deleted > result.ids.length;
      result.batches += 1;
      i += batch.length;
      ctx.progress?.tick(batch.length);
    }
  } finally {
    client.release();
    await lock.release();
    ctx.progress?.done();
  }
  result.durationMs = Date.now() - started;
  return result;
}

/**
 * The next batch's size: what would have taken `batchMs` at the last batch's pace, at most twice the last (a slow
 * moment of the server, not a slow table, then costs one batch), at least MIN_BATCH; halved after a batch that met an
 * agent's lock.
 */
export function nextSize(last: number, ms: number, batchMs: number, retried: boolean): number {
  const paced = retried ? last / 2 : Math.min(2 * last, (last * batchMs) / Math.max(ms, 0.1));
  return Math.max(MIN_BATCH, Math.min(MAX_BATCH, Math.floor(paced)));
}

/**
 * Each batch's transaction opens with these. Its commit does not wait for its WAL flush (measured: the flush was most
 * of a 500-row batch's time on a VM disk). A server crash can lose the last batches' deletes, never make the store
 * inconsistent: the rows come back as they were, and the next prune deletes them again (prune is idempotent; erase
 * never does this).
 */
const OPEN = (lockTimeoutMs: number) => `BEGIN; SET LOCAL lock_timeout = ${Math.floor(lockTimeoutMs)}; SET LOCAL synchronous_commit = off`;

async function batchWithRetries<T>(client: pg.PoolClient, store: PostgresStoreHandle, lockTimeoutMs: number, run: () => Promise<T>): Promise<{ out: T; retried: boolean }> {
  return retrying(client, store, async () => {
    await client.query(OPEN(lockTimeoutMs)); // one round trip opens the transaction and sets both
    const out = await run();
    await client.query('COMMIT');
    return out;
  });
}

/** `run` (a whole transaction) tried again while it meets an agent's lock past lock_timeout; rolled back on any error. */
async function retrying<T>(client: pg.PoolClient, store: PostgresStoreHandle, run: () => Promise<T>): Promise<{ out: T; retried: boolean }> {
  for (let attempt = 0; ; attempt++) {
    try {
      return { out: await run(), retried: attempt > 0 };
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      // An agent held a row's lock past lock_timeout (55P03), or a deadlock was broken (40P01): let it finish.
      const again = (sqlState(err) === '55P03' || sqlState(err) === '40P01') && attempt < LOCK_RETRIES;
      if (!again) throw store.pg.explain(err, 'prune');
      await new Promise((r) => setTimeout(r, 5 + Math.random() * 20));
    }
  }
}

const closure = async (store: PostgresStoreHandle, ids: string[]) => (await store.pg.query<{ id: string }>(CLOSURE(store.schema), [ids])).rows.map((r) => r.id);

/**
 * The statement that asks whether any row outside the batch `ids` points at one of it (the same as the batch's
 * closure being empty: then no root has an older version to lock) and only if none does, deletes the roots still
 * prunable, the rule re-read on each row as it is. Its one row has `alone` and nothing else when it deleted nothing.
 */
const GATED_DELETE = (s: string, ids: string, now: string, cut: string, expired: string) => `WITH gate AS (
    SELECT NOT EXISTS (SELECT 1 FROM ${s}.memory WHERE superseded_by = ANY(${ids}) AND NOT (id = ANY(${ids}))) AS alone),
  gone AS (DELETE FROM ${s}.memory WHERE id = ANY(${ids}) AND ${prunable(now, cut, expired)} AND (SELECT alone FROM gate)
    RETURNING id, (${expired} AND expires_at <= ${now}) AS expired)
  SELECT gate.alone, gone.id, gone.expired FROM gate LEFT JOIN gone ON true`;

type GateRow = { alone: boolean; id: string | null; expired: boolean | null };

/** The gated delete's rows as a batch's result (nothing told: that is the callers'). */
function gated(rows: readonly GateRow[]): { id: string; expired: boolean }[] | null {
  if (!rows[0]!.alone) return null;
  return rows.filter((r): r is { alone: boolean; id: string; expired: boolean } => r.id !== null);
}

/**
 * The common batch in one round trip: the transaction opened, the gated delete, the commit, as one simple query with
 * the ids and instants as escaped literals (the server parses them; nothing of them is ever executed). Under load, each
 * round trip waits for both processes to be scheduled again, and the locks are held across it: one instead of three
 * makes the batch shorter for the agents too. Null when a root has older versions: nothing was deleted, and the
 * batch goes the way that locks its chains.
 */
async function oneTripBatch(client: pg.PoolClient, s: string, batch: readonly { id: string; expired: boolean }[], rules: Rules, lockTimeoutMs: number): Promise<BatchDone | null> {
  const lit = (v: string) => client.escapeLiteral(v);
  const ids = `ARRAY[${batch.map((c) => lit(c.id)).join(',')}]::text[]`;
  const at = (d: Date) => `${lit(d.toISOString())}::timestamptz`;
  const results = await client.query(`${OPEN(lockTimeoutMs)}; ${GATED_DELETE(s, ids, at(rules.now), at(rules.cut), rules.expired ? 'true' : 'false')}; COMMIT`) as unknown as pg.QueryResult<GateRow>[];
  const gone = gated(results[3]!.rows);
  if (!gone) return null;
  const expired = gone.filter((r) => r.expired).length;
  return { expired, superseded: gone.length - expired, cascaded: 0, ids: gone.map((r) => r.id) };
}

async function deleteBatch(
  client: pg.PoolClient, s: string, batch: readonly { id: string; expired: boolean }[], rules: Rules,
  opts: PruneOptions, vectors: VectorSink | undefined, chained: boolean,
): Promise<BatchDone> {
  const ids = batch.map((c) => c.id);
  // The common batch: no candidate has an older version outside the batch (no row outside it points at one of it,
  // which is the same as the closure being empty). One statement asks that and, only if so, deletes, re-reading the
  // rule on each row as it is (an agent's renewal committed meanwhile keeps it); a version an agent points at one of
  // them now goes with the foreign key's cascade, as it would on SQLite. Else nothing is deleted, and the batch locks
  // its chains below.
  if (!vectors && !chained) {
    const gone = gated((await client.query<GateRow>(GATED_DELETE(s, '$1::text[]', '$2', '$3', '$4'), [ids, rules.now, rules.cut, rules.expired])).rows);
    if (gone) return simpleDone(gone, opts);
  }
  return chainedBatch(client, s, ids, rules, opts, vectors);
}

function simpleDone(gone: readonly { id: string; expired: boolean }[], opts: PruneOptions): BatchDone {
  // Told before the commit makes the delete last: a crash before it rolls the delete back, never the record.
  opts.beforeDelete?.(gone.map((r) => ({ id: r.id, user: null })), opts.ctx.now());
  const expired = gone.filter((r) => r.expired).length;
  return { expired, superseded: gone.length - expired, cascaded: 0, ids: gone.map((r) => r.id) };
}

/** A batch whose roots have older versions (or whose vectors are in pgvector): roots and versions locked, then deleted. */
async function chainedBatch(client: pg.PoolClient, s: string, ids: string[], rules: Rules, opts: PruneOptions, vectors?: VectorSink): Promise<BatchDone> {
  // The roots still prunable now, locked until the commit: the rule re-read on the row as it is.
  const roots = (await client.query<{ id: string; expired: boolean }>(
    `SELECT id, ($4 AND expires_at <= $2) AS expired FROM ${s}.memory WHERE id = ANY($1::text[]) AND ${prunable('$2', '$3', '$4')} ORDER BY id FOR UPDATE`,
    [ids, rules.now, rules.cut, rules.expired])).rows;
  if (roots.length === 0) return { expired: 0, superseded: 0, cascaded: 0, ids: [] };
  const rootIds = roots.map((r) => r.id);
  let versions: string[];
  if (vectors) {
    // Vectors in the same transaction: every version locked, so the cascade takes exactly the rows whose vectors go.
    const rootSet = new Set(rootIds);
    versions = (await lockedClosure(client, s, rootIds)).filter((id) => !rootSet.has(id));
  } else {
    // Their older versions, locked, then read again: a version re-pointed before the lock is not taken; one an agent
    // points at a doomed row after it goes with the cascade, as ON DELETE CASCADE says.
    const first = (await client.query<{ id: string }>(CLOSURE(s), [rootIds])).rows.map((r) => r.id);
    const locked = first.length === 0 ? new Set<string>() : new Set((await client.query<{ id: string }>(
      `SELECT id FROM ${s}.memory WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`, [first])).rows.map((r) => r.id));
    versions = locked.size === 0 ? [] : (await client.query<{ id: string }>(CLOSURE(s), [rootIds])).rows.map((r) => r.id).filter((id) => locked.has(id));
  }
  const doomed = [...rootIds, ...versions];
  opts.beforeDelete?.(doomed.map((id) => ({ id, user: null })), opts.ctx.now());
  // The vectors first, in this transaction (pgvector): one commit takes them with their rows.
  await vectors?.deleteForRows(doomed);
  const deleted = await client.query<{ id: string }>(`DELETE FROM ${s}.memory WHERE id = ANY($1::text[]) RETURNING id`, [doomed]);
  const gone = new Set(deleted.rows.map((r) => r.id));
  const taken = roots.filter((r) => gone.has(r.id));
  return {
    expired: taken.filter((r) => r.expired).length,
    superseded: taken.filter((r) => !r.expired).length,
    cascaded: versions.filter((id) => gone.has(id)).length,
    ids: doomed.filter((id) => gone.has(id)),
  };
}

/** Walks of the table per prune: the first deletes, the second finds what an agent's update moved behind the first. */
const WALKS = 2;
/** The pages one batch of a walk looks at, at most: the rows it sorts by position when it enters a full region. */
const MAX_PAGES = 1024;
/** How long one CALL of the walk runs its batches before it returns (the process then sees an abort or the next step). */
const CALL_BUDGET_MS = 250;
/** How soon the server notices the prune's process gone (kill -9) while a CALL runs: the open batch then rolls back. */
const CLIENT_CHECK_MS = 50;

/**
 * The common prune (no vectors outside the database, none in it, no hook told before each commit), without a list
 * of candidates: the table walked in the order of its pages by a procedure of the prune's session (prune-walk.ts),
 * batch after batch on the server, each a short transaction of its own; the process only calls it again, with the
 * position, sizes and totals it returned, and locks the chains of a batch whose rows have older versions. No id
 * travels to the process and back (the first ID_CAP come for the report). A row an agent updated while it was prunable
 * may move to a page the walk has passed; a second walk from the start deletes it if it still is. kill -9 rolls back
 * the open batch (the server notices the closed connection within CLIENT_CHECK_MS); the next run finishes.
 */
async function walkPrune(store: PostgresStoreHandle, opts: PruneOptions, rules: Rules, result: PruneResult): Promise<void> {
  const { ctx } = opts;
  const cfg = store.config.postgres!;
  const engine = await engineFor(store.config);
  const lock = await engine.lock(store, 'prune');
  await statisticsFirst(store, ctx.log);
  const client = await store.pg.connect();
  try {
    await client.query(`SET client_connection_check_interval = ${CLIENT_CHECK_MS}`);
    await client.query(walkProcedure(store.schema, { minBatch: MIN_BATCH, maxBatch: MAX_BATCH, maxPages: MAX_PAGES }))
      .catch((err: unknown) => { throw store.pg.explain(err, 'prune: create its walk in pg_temp (the TEMP privilege on the database)'); });
    ctx.progress?.start('prune', undefined, 'rows');
    const lit = (v: string) => client.escapeLiteral(v);
    const w = { tid: '(0,0)', size: Math.min(cfg.batchSize, MAX_BATCH), pages: 8 };
    let locked = 0;
    for (let walk = 0; walk < WALKS && !ctx.signal.aborted; walk++) {
      w.tid = '(0,0)';
      w.pages = 8;
      for (;;) {
        if (ctx.signal.aborted) {
          ctx.log.warn({ store: store.name, done: result.deleted }, 'prune interrupted; the next run finishes it');
          break;
        }
        const left = ID_CAP - result.ids.length;
        const { rows: [r] } = await client.query<WalkState>(`CALL pg_temp.mw_prune_walk(${lit(w.tid)}, ${w.size}, ${w.pages}, 0, 0, 0, NULL, NULL, NULL,
          ${lit(rules.now.toISOString())}, ${lit(rules.cut.toISOString())}, ${rules.expired}, ${CALL_BUDGET_MS}, ${cfg.batchMs}, ${Math.floor(cfg.lockTimeoutMs)}, ${left})`);
        const { w_from_tid: tid, w_size: size, w_pages: pages, w_state: state } = r!;
        ctx.log.debug({ walk, tid, size, pages, state, batches: r!.w_batches, deleted: r!.w_deleted }, 'prune walk');
        const deleted = Number(r!.w_deleted);
        const expired = Number(r!.w_expired_n);
        result.expired += expired;
        result.superseded += deleted - expired;
        result.deleted += deleted;
        result.batches += r!.w_batches;
        result.ids.push(...(r!.w_ids ?? []).slice(0, left));
        ctx.progress?.tick(deleted);
        Object.assign(w, { tid, size, pages });
        if (state === 'locked') {
          // An agent held a row past lock_timeout: the batch rolled back; a moment for the agent, then half the size.
          if (++locked > LOCK_RETRIES) throw transientError(`${store.name} (${store.path}): prune met agents' locks ${LOCK_RETRIES} times in a row; try again later`);
          w.size = nextSize(w.size, 0, cfg.batchMs, true);
          await new Promise((res) => setTimeout(res, 5 + Math.random() * 20));
          continue;
        }
        locked = 0;
        if (state === 'chained' || state === 'chained-end') {
          const { out: done } = await batchWithRetries(client, store, cfg.lockTimeoutMs, () => chainedBatch(client, store.schema, r!.w_roots!, rules, opts));
          result.expired += done.expired;
          result.superseded += done.superseded;
          result.cascaded += done.cascaded;
          result.deleted += done.ids.length;
          result.batches += 1;
          for (const id of done.ids.slice(0, ID_CAP - result.ids.length)) result.ids.push(id);
          ctx.progress?.tick(done.ids.length);
        }
        result.idsTruncated = result.deleted > result.ids.length;
        if (state === 'end' || state === 'chained-end') break;
      }
    }
  } finally {
    await client.query('RESET client_connection_check_interval').catch(() => {});
    client.release();
    await lock.release();
    ctx.progress?.done();
  }
}

/**
 * Whether the server counts each transaction's deleted rows (`track_counts`, on unless an administrator turned it
 * off): the walk tells a batch whose delete the foreign key's cascade took further by that count. Without it, prune
 * takes the list of candidates instead.
 */
async function countsDeletes(store: PostgresStoreHandle): Promise<boolean> {
  return (await store.pg.query<{ on: boolean }>(`SELECT current_setting('track_counts')::bool AS on`)).rows[0]!.on;
}

/** What one CALL of the walk returns: its INOUT arguments as it left them (prune-walk.ts). */
interface WalkState {
  w_from_tid: string;
  w_size: number;
  w_pages: number;
  w_batches: number;
  w_deleted: string;
  w_expired_n: string;
  w_ids: string[] | null;
  w_roots: string[] | null;
  w_state: 'end' | 'budget' | 'locked' | 'chained' | 'chained-end';
}

interface BatchDone {
  expired: number;
  superseded: number;
  cascaded: number;
  ids: string[];
}

/**
 * A table the server has never analyzed (a store just loaded, before autovacuum came by) has no statistics, and the
 * cascade's own queries (the foreign key's `DELETE … WHERE superseded_by = $1`, one per deleted row) then scan the
 * whole table instead of the superseded_by index: measured 10x slower at 10,000 rows. ANALYZE it first (it takes no
 * lock an agent's insert or update waits on); a role that may not is told why in the log, and the prune goes on.
 */
async function statisticsFirst(store: PostgresStoreHandle, log: PruneOptions['ctx']['log']): Promise<void> {
  const seen = await store.pg.query<{ never: boolean }>(
    `SELECT last_analyze IS NULL AND last_autoanalyze IS NULL AS never FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'memory'`,
    [store.config.postgres!.schema]);
  if (!seen.rows[0]?.never) return;
  try {
    await store.pg.query(`ANALYZE ${store.schema}.memory`);
    log.info('analyzed the memory table first: it had no statistics');
  } catch (err) {
    log.warn({ store: store.name, err: (err as Error).message }, 'the memory table has no statistics and could not be analyzed: prune may be slow');
  }
}
