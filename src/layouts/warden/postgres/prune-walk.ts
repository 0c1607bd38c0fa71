/**
 * Prune's walk of the memory table as a procedure of the prune's own session (in pg_temp: created for the run, gone
 * with the connection; nothing is added to the store's schema). One CALL runs batch after batch on the server, each
 * its own transaction (`lock_timeout`, `synchronous_commit = off`, committed before the next begins), until its time
 * budget is spent, the table's end is reached, a batch's rows have older versions (the caller then locks their chains),
 * or a batch meets an agent's lock past lock_timeout (rolled back; the caller waits a moment and calls again with half
 * the size). No round trip between batches: under load each one waited for both processes to be scheduled again.
 *
 * Each batch takes the next `size` prunable rows by position (ctid) after `from_tid`, within `pages` pages, in position
 * order (whatever plan the server picks, every prunable row of the range before the last one taken is in the batch),
 * asks whether any row outside them points at one of them, and only if none does deletes the prunable rows between
 * the walk's position and the last of them (the same rows, read at the same instant), the rule re-read on each row as
 * it is (an agent's renewal committed meanwhile keeps it; an updated row is followed to its new version). After a
 * full batch, the next one's size follows its time as `nextSize` (prune.ts) does, and its range of pages is as many as
 * it needed for its rows, scaled to the next size, with room to spare; after a range that held fewer rows than asked
 * for, the size stays and the range is twice as long, or half as long if it took over `batchMs`. The INOUT arguments
 * carry the walk's position, sizes and totals from one CALL to the next. The prune's connection has the server check
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
  r record;
  w_full bool;
  w_nxt int;
BEGIN
  w_roots := NULL;
  w_state := 'running';
  LOOP
    w_first := ((w_from_tid::text)::point)[0]::int;
    w_to_tid := format('(%s,0)', w_first + w_pages)::tid;
    w_t0 := clock_timestamp();
    BEGIN
      PERFORM set_config('lock_timeout', w_lock_ms || 'ms', true), set_config('synchronous_commit', 'off', true);
      WITH c AS (
          SELECT ctid AS t, id FROM ${s}.memory WHERE ctid > w_from_tid AND ctid < w_to_tid
            AND ((w_expired AND expires_at <= w_now_at) OR (superseded_by IS NOT NULL AND created_at < w_cut))
          ORDER BY ctid LIMIT w_size),
        i AS (SELECT coalesce(array_agg(id), '{}') AS ids, count(*)::int AS seen, max(t) AS last FROM c),
        gate AS (SELECT NOT EXISTS (SELECT 1 FROM ${s}.memory m, i WHERE m.superseded_by = ANY(i.ids) AND NOT (m.id = ANY(i.ids))) AS alone),
        gone AS (DELETE FROM ${s}.memory WHERE ctid > w_from_tid AND ctid <= (SELECT last FROM i)
            AND ((w_expired AND expires_at <= w_now_at) OR (superseded_by IS NOT NULL AND created_at < w_cut)) AND (SELECT alone FROM gate)
          RETURNING id, (w_expired AND expires_at <= w_now_at) AS was_expired),
        n AS (SELECT count(*)::int AS n, (count(*) FILTER (WHERE was_expired))::int AS n_expired FROM gone)
      SELECT gate.alone, i.seen, i.last, i.ids AS batch, n.n, n.n_expired,
        ARRAY(SELECT id FROM gone LIMIT greatest(w_cap - coalesce(cardinality(w_ids), 0), 0)) AS first_ids,
        (pg_relation_size(${literal(`${s}.memory`)}::regclass) / current_setting('block_size')::int)::int AS end_page
      INTO r FROM gate, i, n;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
      w_state := 'locked';
      RETURN;
    END;
    COMMIT;
    w_ms := extract(epoch FROM clock_timestamp() - w_t0) * 1000;
    IF r.seen > 0 THEN
      w_batches := w_batches + 1;
      w_deleted := w_deleted + r.n;
      w_expired_n := w_expired_n + r.n_expired;
      w_ids := coalesce(w_ids, '{}') || r.first_ids;
    END IF;
    w_full := r.seen = w_size;
    w_nxt := w_size;
    IF w_full THEN
      w_nxt := greatest(${limits.minBatch}, least(${limits.maxBatch}, floor(least(2 * w_size, w_size * w_batch_ms / greatest(w_ms, 0.1)))::int));
    END IF;
    IF w_full THEN
      w_pages := least(${limits.maxPages}, ceil(((((r.last::text)::point)[0]::int - w_first + 1) * w_nxt)::float8 / w_size)::int + 1);
      w_from_tid := r.last;
    ELSE
      w_state := CASE WHEN w_first + w_pages >= r.end_page THEN 'end' ELSE w_state END;
      w_from_tid := w_to_tid;
      w_pages := CASE WHEN w_ms > w_batch_ms THEN greatest(1, w_pages / 2) ELSE least(${limits.maxPages}, w_pages * 2) END;
    END IF;
    w_size := w_nxt;
    IF NOT r.alone THEN
      w_roots := r.batch;
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
