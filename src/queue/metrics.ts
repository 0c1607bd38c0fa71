import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { parseInstant } from '../time/instants.js';

/** The store label of a global job (the digest): `*` cannot be a store name, so it never collides with one. */
export const ALL_STORES = '*';

export type RunOutcome = 'ok' | 'failed';

/** A digest delivery as the job reports it (src/digest/digest.ts), read defensively: results are data. */
type DeliveryFigures = { scope?: unknown; status?: unknown; newRows?: unknown; flagged?: unknown };
/** The statuses that settle a day's digest: the email went (here or elsewhere), or there was nothing to send. */
const SETTLED = new Set(['sent', 'quiet', 'already-sent']);

/**
 * The worker's Prometheus figures, in a registry of its own (never prom-client's global one, so two workers in
 * one process, as in tests, do not share counters). Figures about a store come from the jobs' results: prune's
 * `deleted`, integrity's `rows`, `live` and `problems`, whichever job reports them.
 */
export class WorkerMetrics {
  readonly registry = new Registry();
  private readonly runs = new Counter({ name: 'memory_warden_job_runs_total', help: 'Job runs that ended, by outcome', labelNames: ['job', 'store', 'outcome'], registers: [this.registry] });
  private readonly failures = new Counter({ name: 'memory_warden_job_failures_total', help: 'Failed job runs, by whether the failure is retried', labelNames: ['job', 'store', 'retry'], registers: [this.registry] });
  private readonly duration = new Histogram({
    name: 'memory_warden_job_duration_seconds',
    help: 'Job run time',
    labelNames: ['job', 'store'],
    buckets: [0.05, 0.25, 1, 5, 15, 60, 300, 900, 3600],
    registers: [this.registry],
  });
  private readonly lastSuccess = new Gauge({ name: 'memory_warden_last_success_timestamp_seconds', help: 'When the job last succeeded (Unix time)', labelNames: ['job', 'store'], registers: [this.registry] });
  private readonly deleted = new Counter({ name: 'memory_warden_rows_deleted_total', help: 'Rows deleted by prune', labelNames: ['store'], registers: [this.registry] });
  private readonly rows = new Gauge({ name: 'memory_warden_rows', help: 'Rows in the memory table at the last integrity check', labelNames: ['store'], registers: [this.registry] });
  private readonly liveRows = new Gauge({ name: 'memory_warden_live_rows', help: 'Live rows (not superseded, not expired) at the last integrity check', labelNames: ['store'], registers: [this.registry] });
  private readonly problems = new Gauge({ name: 'memory_warden_integrity_problems', help: 'Problems found by the last integrity check', labelNames: ['store'], registers: [this.registry] });
  private readonly hostSeen = new Gauge({ name: 'memory_warden_fleet_host_last_seen_timestamp_seconds', help: "A fleet host's last heartbeat (Unix time), as this worker reads it from Redis", labelNames: ['fleet_host'], registers: [this.registry] });
  private readonly hostSilent = new Gauge({ name: 'memory_warden_fleet_host_silent', help: '1 when a fleet host sent no heartbeat for worker.silentAfterMs (and did not stop on purpose)', labelNames: ['fleet_host'], registers: [this.registry] });
  private readonly targetReplicated = new Gauge({ name: 'memory_warden_target_replicated_timestamp_seconds', help: 'When a snapshot target last held every snapshot it should: the end of the last snapshot job that pushed to it without error (Unix time)', labelNames: ['store', 'target'], registers: [this.registry] });
  private readonly digestSettled = new Gauge({ name: 'memory_warden_digest_timestamp_seconds', help: "When a day's digest was last settled, by status: sent by this worker, quiet (nothing new, allQuiet off) or already sent by another (Unix time)", labelNames: ['scope', 'status'], registers: [this.registry] });
  private readonly digestNew = new Counter({ name: 'memory_warden_digest_new_rows_total', help: 'New rows listed in the digests this worker sent', labelNames: ['scope'], registers: [this.registry] });
  private readonly digestFlagged = new Counter({ name: 'memory_warden_digest_flagged_rows_total', help: 'New rows flagged for a second look (tool-output sources) in the digests this worker sent', labelNames: ['scope'], registers: [this.registry] });
  readonly redisUp = new Gauge({ name: 'memory_warden_redis_up', help: '1 when the worker reaches Redis', registers: [this.registry] });

  constructor(opts: { defaultMetrics?: boolean } = {}) {
    if (opts.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry, prefix: 'memory_warden_' });
  }

  /**
   * Every per-job series this worker will use, at zero from its start (the Prometheus convention): a series that
   * first appears with its first run's value already in it is a step rate() and increase() never see, so a
   * dashboard read NaN for the job's duration and 0 rows pruned after a prune that deleted rows. `runs`: the jobs
   * it may run and their stores (null: a job for every store at once); `stores`: the stores it prunes; `digestScopes`:
   * what the digests it may send are labelled by.
   */
  zeroSeries(plan: { runs: { job: string; store: string | null }[]; stores: string[]; digestScopes: string[] }): void {
    for (const { job, store } of plan.runs) {
      const s = store ?? ALL_STORES;
      for (const outcome of ['ok', 'failed'] satisfies RunOutcome[]) this.runs.inc({ job, store: s, outcome }, 0);
      for (const retry of ['yes', 'no']) this.failures.inc({ job, store: s, retry }, 0);
      this.duration.zero({ job, store: s });
    }
    for (const store of plan.stores) this.deleted.inc({ store }, 0);
    for (const scope of plan.digestScopes) {
      this.digestNew.inc({ scope }, 0);
      this.digestFlagged.inc({ scope }, 0);
    }
  }

  recordRun(job: string, store: string | null, outcome: RunOutcome, seconds: number, detail: { result?: unknown; retried?: boolean; at?: number } = {}): void {
    const s = store ?? ALL_STORES;
    this.runs.inc({ job, store: s, outcome });
    this.duration.observe({ job, store: s }, seconds);
    if (outcome === 'failed') {
      this.failures.inc({ job, store: s, retry: detail.retried ? 'yes' : 'no' });
      return;
    }
    const at = Math.floor((detail.at ?? Date.now()) / 1000);
    this.lastSuccess.set({ job, store: s }, at);
    this.recordResult(s, detail.result, at);
  }

  /**
   * Last successes a worker finds in its state db at start: without them a restart would empty the gauge, and a
   * job overdue since before the restart would stop alerting until it ran again.
   */
  seedLastSuccess(byStore: Record<string, Record<string, string>>): void {
    for (const [store, jobs] of Object.entries(byStore)) {
      for (const [job, iso] of Object.entries(jobs)) {
        const t = parseInstant(iso);
        if (t !== null) this.lastSuccess.set({ job, store }, Math.floor(t / 1000));
      }
    }
  }

  private recordResult(store: string, result: unknown, at: number): void {
    if (!result || typeof result !== 'object') return;
    const r = result as { deleted?: unknown; dryRun?: unknown; rows?: unknown; live?: unknown; problems?: unknown; targets?: unknown; deliveries?: unknown };
    if (typeof r.deleted === 'number' && r.dryRun !== true) this.deleted.inc({ store }, r.deleted);
    if (typeof r.rows === 'number') this.rows.set({ store }, r.rows);
    if (typeof r.live === 'number') this.liveRows.set({ store }, r.live);
    if (Array.isArray(r.problems)) this.problems.set({ store }, r.problems.length);
    // snapshot: every target in the result was brought up to date by this run (a failing target fails the job).
    if (Array.isArray(r.targets)) {
      for (const t of r.targets as { target?: unknown }[]) if (typeof t?.target === 'string') this.targetReplicated.set({ store, target: t.target }, at);
    }
    if (Array.isArray(r.deliveries)) for (const d of r.deliveries as DeliveryFigures[]) this.recordDelivery(d, at);
  }

  private recordDelivery(d: DeliveryFigures, at: number): void {
    if (typeof d?.scope !== 'string' || !SETTLED.has(d.status as string)) return;
    this.digestSettled.set({ scope: d.scope, status: d.status as string }, at);
    if (d.status !== 'sent') return;
    if (typeof d.newRows === 'number') this.digestNew.inc({ scope: d.scope }, d.newRows);
    if (typeof d.flagged === 'number') this.digestFlagged.inc({ scope: d.scope }, d.flagged);
  }

  /** Every host's heartbeat as Redis holds it: when it was last seen, and whether it is silent. */
  recordFleet(hosts: { host: string; lastSeen: string; silent: boolean }[]): void {
    this.hostSeen.reset();
    this.hostSilent.reset();
    for (const h of hosts) {
      this.hostSeen.set({ fleet_host: h.host }, Math.floor(Date.parse(h.lastSeen) / 1000));
      this.hostSilent.set({ fleet_host: h.host }, h.silent ? 1 : 0);
    }
  }

  /** Prometheus text exposition. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
