/**
 * Prune's walk of the memory table as a procedure of the prune's own session (in pg_temp: created for the run, gone
 * with the connection; nothing is added to the store's schema). One CALL runs batch after batch on the server, each
 * its own transaction (`lock_timeout`, `synchronous_commit = off`, committed before the next begins), until its time
 * budget is spent, the table's end is reached, a batch's rows have older versions (the caller then locks their chains),
 * or a batch meets an agent's lock past lock_timeout (rolled back; the caller waits a moment and calls again with half
 * the size). No round trip between batches: under load each one waited for both processes to be scheduled again.
 *
 * Each batch takes the next `size` prunable rows by position (ctid) after `from_tid`, within `pages` pages, in position
 * order (whatever plan the server picks, every prunable row of the range before the last one taken is in the batch:
 * only their positions are sorted), and deletes the prunable rows between the walk's position and the last of them (the
 * same rows, read at the same instant), the rule re-read on each row as it is (an agent's renewal committed meanwhile
 * keeps it; an updated row is followed to its new version). A batch whose delete the foreign key's cascade took further
 * (a row outside it pointed at one of them: an older version) is told by the transaction's own count of the table's
 * deleted rows, rolled back, and returned as ids: the caller locks the chains and deletes them, counting each older
 * version. The common batch thus costs what a plain DELETE of its rows costs, with no lookup of each row's versions
 * before it. After a full batch, the next one's size follows its time as `nextSize` (prune.ts) does, and its range of
 * pages is as many as it needed for its rows, scaled to the next size, with room to spare; after a range that held
 * fewer rows than asked for, the size stays and the range is twice as long, or half as long if it took over `batchMs`.
 * The INOUT arguments carry the walk's position, sizes and totals from one CALL to the next. The prune's connection has the server check
 * that its client is still there while a CALL runs: after kill -9 the open batch rolls back.
 */
/** A string as an SQL literal (the schema's quoted name may hold any character). */
const literal = (v: string) => `'${v.replace(/'/g, "''")}'`;

export const walkProcedure = (s: string, limits: { minBatch: number; maxBatch: number; maxPages: number }) => `
CREATE OR REPLACE PROCEDURE pg_temp.mw_prune_walk(
  INOUT w_from_tid tid, INOUT w_size int, INOUT w_pages int, INOUT w_batches int, INOUT w_deleted bigint, INOUT w_expired_n bigint,
  INOUT w_ids text[], INOUT w_roots text[], INOUT w_state text,
  w_now_at timestamptz, w_cut timestamptz, w_expired bool, w_budget_ms float8, w_batch_ms float8, w_lock_ms int, w_cap int)
LANGUAGE plpgsql AS $walk$
DECLARE
  w_started timestamptz := clock_timestamp();
  w_t0 timestamptz;
  w_ms float8;
  w_first int;
  w_to_tid tid;
  w_full bool;
  w_nxt int;
  w_rel regclass := ${literal(`${s}.memory`)}::regclass;
  w_gone0 bigint;
  w_seen int;
  w_last tid;
  w_n int;
  w_n_expired int;
  w_first_ids text[];
  w_chained bool;
BEGIN
  w_roots := NULL;
  w_state := 'running';
  LOOP
    w_first := ((w_from_tid::text)::point)[0]::int;
    w_to_tid := format('(%s,0)', w_first + w_pages)::tid;
    w_t0 := clock_timestamp();
    w_chained := false;
    BEGIN
      PERFORM set_config('lock_timeout', w_lock_ms || 'ms', true), set_config('synchronous_commit', 'off', true);
      w_gone0 := pg_stat_get_xact_tuples_deleted(w_rel);
      WITH c AS (
          SELECT count(*)::int AS seen, max(t) AS last FROM (
            SELECT ctid AS t FROM ${s}.memory WHERE ctid > w_from_tid AND ctid < w_to_tid
              AND ((w_expired AND expires_at <= w_now_at) OR (superseded_by IS NOT NULL AND created_at < w_cut))
            ORDER BY ctid LIMIT w_size) p),
        gone AS (DELETE FROM ${s}.memory WHERE ctid > w_from_tid AND ctid <= (SELECT last FROM c)
            AND ((w_expired AND expires_at <= w_now_at) OR (superseded_by IS NOT NULL AND created_at < w_cut))
          RETURNING id, (w_expired AND expires_at <= w_now_at) AS was_expired),
        n AS (SELECT count(*)::int AS n, (count(*) FILTER (WHERE was_expired))::int AS n_expired FROM gone)
      SELECT c.seen, c.last, n.n, n.n_expired, ARRAY(SELECT id FROM gone LIMIT greatest(w_cap - coalesce(cardinality(w_ids), 0), 0))
      INTO w_seen, w_last, w_n, w_n_expired, w_first_ids FROM c, n;
      -- The transaction's own count of the table's deleted rows: more than the statement's own when the foreign key's
      -- cascade took rows that point at one of them (older versions), which the caller locks and deletes instead.
      IF pg_stat_get_xact_tuples_deleted(w_rel) - w_gone0 <> w_n THEN
        RAISE EXCEPTION USING ERRCODE = 'MWCHN';
      END IF;
    EXCEPTION
      WHEN lock_not_available OR deadlock_detected THEN
        w_state := 'locked';
        RETURN;
      WHEN SQLSTATE 'MWCHN' THEN
        -- Rolled back: the same rows as their ids.
        w_chained := true;
    END;
    IF w_chained THEN
      SELECT coalesce(array_agg(t.id), '{}'), count(*)::int, max(t.t) INTO w_roots, w_seen, w_last FROM (
        SELECT ctid AS t, id FROM ${s}.memory WHERE ctid > w_from_tid AND ctid < w_to_tid
          AND ((w_expired AND expires_at <= w_now_at) OR (superseded_by IS NOT NULL AND created_at < w_cut))
        ORDER BY ctid LIMIT w_size) t;
      w_n := 0;
      w_n_expired := 0;
      w_first_ids := '{}';
    END IF;
    COMMIT;
    w_ms := extract(epoch FROM clock_timestamp() - w_t0) * 1000;
    IF w_seen > 0 THEN
      w_batches := w_batches + 1;
      w_deleted := w_deleted + w_n;
      w_expired_n := w_expired_n + w_n_expired;
      w_ids := coalesce(w_ids, '{}') || w_first_ids;
    END IF;
    w_full := w_seen = w_size;
    w_nxt := w_size;
    IF w_full THEN
      w_nxt := greatest(${limits.minBatch}, least(${limits.maxBatch}, floor(least(2 * w_size, w_size * w_batch_ms / greatest(w_ms, 0.1)))::int));
    END IF;
    IF w_full THEN
      w_pages := least(${limits.maxPages}, ceil(((((w_last::text)::point)[0]::int - w_first + 1) * w_nxt)::float8 / w_size)::int + 1);
      w_from_tid := w_last;
    ELSE
      w_state := CASE WHEN w_first + w_pages >= (pg_relation_size(w_rel) / current_setting('block_size')::int) THEN 'end' ELSE w_state END;
      w_from_tid := w_to_tid;
      w_pages := CASE WHEN w_ms > w_batch_ms THEN greatest(1, w_pages / 2) ELSE least(${limits.maxPages}, w_pages * 2) END;
    END IF;
    w_size := w_nxt;
    IF w_chained THEN
      w_state := CASE WHEN w_state = 'end' THEN 'chained-end' ELSE 'chained' END;
      RETURN;
    END IF;
    IF w_state = 'end' THEN
      RETURN;
    END IF;
    IF extract(epoch FROM clock_timestamp() - w_started) * 1000 >= w_budget_ms THEN
      w_state := 'budget';
      RETURN;
    END IF;
  END LOOP;
END
$walk$`;
