/**
 * Which scheduled run a job run was (its scheduler and due time, src/queue/schedules.ts scheduledRunOf) and the
 * process that ran it: a run this host already finished 'ok' is not run again when Redis hands it out a second
 * time (a failover that lost its completion), and one still running in a live process is not run beside it.
 */
export default `
ALTER TABLE job_runs ADD COLUMN scheduled_run TEXT;
ALTER TABLE job_runs ADD COLUMN pid INTEGER;
CREATE INDEX job_runs_by_scheduled_run ON job_runs(scheduled_run);
`;
