/**
 * That this installation put work through the queue (BullMQ on Redis, src/queue/): a worker started here, or a
 * command here sent a job to a worker (enqueue, erase or restore of a store on another host). Such jobs keep memory
 * text in Redis (a task's payload, a job's result or error, the queue's event stream), so an erase that cannot reach
 * Redis knows from this whether Redis may hold copies (src/erase/redis.ts). One row per Redis key prefix, no text.
 * A worker run before this step is known by its scheduled runs (job_runs.scheduled_run, step 008).
 */
export default `
CREATE TABLE queue_use (
  prefix   TEXT PRIMARY KEY,
  first_at TEXT NOT NULL,
  last_at  TEXT NOT NULL,
  what     TEXT NOT NULL
);
`;
