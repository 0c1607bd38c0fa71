import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { line, loadForCommand, onAnyEngine, print, printJson, routedToStoreHost, show } from './common.js';
import { usageError } from '../core/errors.js';
import { JOB_SCOPES, OWN_COMMAND_JOBS } from './job-names.js';
import { interruptSignal, timeoutSeconds } from './waiting.js';
import type { SchedulerListing } from '../queue/schedules.js';
import type { FleetJob, FleetStatus } from '../queue/fleet-status.js';
import type { Config } from '../config/config.js';

/** `--host NAME` is worker.host: which host this process is (src/queue/hosts.ts). */
async function withHost(config: Config, host: string | undefined): Promise<Config> {
  if (host === undefined) return config;
  const { HOST_NAME } = await import('../queue/hosts.js');
  if (!HOST_NAME.test(host)) throw usageError(`--host: "${host}" is not a host name (letters, digits, _ . -, at most 63)`);
  return { ...config, worker: { ...config.worker, host } };
}

/** worker, schedule, enqueue: everything that goes through Redis. */
export function registerWorkerCommands(program: Command): void {
  program
    .command('worker')
    .description('run the scheduled worker: job schedulers from config, jobs from Redis, /metrics and /healthz')
    .option('--config <file>', 'config file (YAML)')
    .option('--host <name>', "which host this worker is: it runs only the jobs of this host's stores (default: worker.host, MEMORY_WARDEN_HOST, the machine's name)")
    .action(async (opts: { config?: string; host?: string }, cmd: Command) => {
      const loaded = await loadForCommand(opts, cmd);
      const config = await withHost(loaded.config, opts.host);
      const log = loaded.log;
      const [{ startWorker }, { JOBS }, { SRC_ROOT }] = await Promise.all([import('../queue/worker.js'), import('../../jobs/index.js'), import('../core/places.js')]);
      // Built, the worker runs a libsql store's jobs in processes of their own (src/queue/isolate.ts).
      const jobProcess = join(SRC_ROOT, 'commands', 'job-process.js');
      const running = await startWorker({ jobs: JOBS, config, log, ...(existsSync(jobProcess) ? { jobProcess } : {}) });
      // pm2's wait_ready: the worker counts as started once it is connected and its schedulers are in place.
      process.send?.('ready');
      const stopped = await new Promise<{ drained: boolean }>((resolve) => {
        let signalled = false;
        const onSignal = (signal: NodeJS.Signals) => {
          if (signalled) {
            log.warn({ signal }, 'second signal: exiting now; a running job is picked up again by another worker');
            process.exit(2);
          }
          signalled = true;
          running.shutdown(signal).then(resolve, () => resolve({ drained: false }));
        };
        process.on('SIGTERM', onSignal);
        process.on('SIGINT', onSignal);
      });
      process.exitCode = 0;
      // Everything is closed; if a stray handle still holds the loop open, do not hang the service manager.
      setTimeout(() => process.exit(process.exitCode ?? 0), 2000).unref();
      void stopped;
    });

  program
    .command('schedule')
    .description('list every job scheduler with its next run time (from config and Redis)')
    .option('--config <file>', 'config file (YAML)')
    .option('--json', 'print one JSON object')
    .action(async (opts: { config?: string; json?: boolean }, cmd: Command) => {
      const { config, log } = await loadForCommand(opts, cmd);
      const [{ connectRedis }, { openQueueToRead }, { configuredHosts }, { listSchedulers, planSchedulers }, { JOBS }] = await Promise.all([
        import('../queue/connection.js'), import('../queue/queues.js'), import('../queue/hosts.js'), import('../queue/schedules.js'), import('../../jobs/index.js'),
      ]);
      const redis = await connectRedis(config.redis, log);
      // Opened to read: listing writes no key (BullMQ would write each queue's meta key).
      const queues = [null, ...configuredHosts(config)].map((host) => ({ host, queue: openQueueToRead(config, redis, host) }));
      try {
        const rows = await listSchedulers(queues, planSchedulers(config, JOBS, log));
        if (opts.json) return printJson({ prefix: config.redis.prefix, queue: config.worker.queue, schedulers: rows });
        if (rows.length === 0) print`no job schedulers: no stores configured, or every schedule disabled`;
        for (const r of rows) print`${formatScheduler(r)}`;
      } finally {
        for (const q of queues) await q.queue.close();
        await redis.quit();
      }
    });

  // Any engine: the job goes where the store's engine says (its host's queue, or the shared one for a store every host
  // reaches), and the job itself refuses an engine it does not run on (src/job/runner.ts), on the worker that takes it.
  // erase and restore take a person or a folder: their own commands send them (src/commands/erase.ts, snapshot.ts).
  const queued = Object.keys(JOB_SCOPES).filter((n) => !OWN_COMMAND_JOBS.has(n));
  const own = [...OWN_COMMAND_JOBS].join(' and ');
  onAnyEngine(routedToStoreHost(program.command('enqueue')))
    .argument('<job>', `the job: ${queued.join(', ')} (${own}: their own commands, with --store)`)
    .description("run one job now through the queue (on the store's host, a worker must be running there; a store every host reaches, such as a PostgreSQL store: on any worker) and wait for its result")
    .option('--config <file>', 'config file (YAML)')
    .option('--store <name>', 'which configured store (store jobs)')
    .option('--timeout <seconds>', 'how long to wait for the result', '600')
    .option('--json', 'print the result as JSON')
    .action(async (name: string, opts: { config?: string; store?: string; timeout: string; json?: boolean }, cmd: Command) => {
      const scope = JOB_SCOPES[name];
      if (!scope) throw usageError(`unknown job "${name}" (enqueue takes: ${queued.join(', ')}; ${own}: their own commands, with --store)`);
      // Their commands build what they take (a person, a folder) and run them on the store's host the same way.
      if (OWN_COMMAND_JOBS.has(name)) throw usageError(`enqueue ${name}: use memory-warden ${name} --store NAME …, which takes what it needs and runs it on the store's host`);
      const timeoutSec = timeoutSeconds(opts.timeout);
      const { config, log } = await loadForCommand({ config: opts.config }, cmd);
      const global = scope === 'global';
      if (global && opts.store) throw usageError(`${name} covers every store at once; --store does not apply`);
      const { selectStore } = await import('../config/config.js');
      const store = global ? null : selectStore(config, opts.store).name;
      const data = store === null ? {} : { store };
      const what = store === null ? name : `${name} ${store}`;

      // On the store's host's queue: only a worker on the machine that holds the file takes it.
      const { runOnHost } = await import('../queue/remote.js');
      // Ctrl-C: a job no worker has taken yet is withdrawn; one already running finishes there, and it says so.
      const result = await runOnHost({ config, log, job: name, data, timeoutSeconds: timeoutSec, signal: interruptSignal() });
      if (opts.json) printJson(result);
      else {
        print`${what}: done`;
        await (await import('./run-output.js')).printJobResult(name, result);
      }
      // A check that ran and found problems is exit 1, as for `memory-warden check`.
      if ((result as { ok?: unknown } | null)?.ok === false) process.exitCode = 1;
    });
}

function formatScheduler(r: SchedulerListing): string {
  const when = r.every !== null ? `every ${r.every} ms` : `${r.pattern} (${r.tz ?? 'UTC'})`;
  const status =
    r.inConfig && r.inRedis ? `next ${r.next ?? '?'}`
    : r.inConfig ? `next ${r.next ?? '(its first worker starts it)'} (from the config: no worker has put it in Redis yet)`
    : 'not in config: removed at the next worker start';
  return `${show(r.id).padEnd(28)} ${show(r.host ?? '(any host)').padEnd(16)} ${show(when).padEnd(28)} ${show(status)}`;
}

/** `memory-warden fleet`: every host, its stores, each job's last success and next run, what is overdue. */
export function registerFleetCommand(program: Command): void {
  program
    .command('fleet')
    .description("every host of the fleet (heartbeat, version, last seen), its stores, each job's last success and next run, and what is overdue: exit 1 when a host is silent (no heartbeat lately, one whose time does not parse, or a configured host never seen) or a job overdue; reads only")
    .option('--config <file>', 'config file (YAML)')
    .option('--json', 'print one JSON object')
    .action(async (opts: { config?: string; json?: boolean }, cmd: Command) => {
      const { config, log } = await loadForCommand(opts, cmd);
      const [{ connectRedis }, { fleetStatus }, { JOBS }] = await Promise.all([
        import('../queue/connection.js'), import('../queue/fleet-status.js'), import('../../jobs/index.js'),
      ]);
      const redis = await connectRedis(config.redis, log);
      try {
        const status = await fleetStatus(config, redis, JOBS, Date.now());
        if (opts.json) printJson(status);
        else printFleet(status);
        if (status.silent.length > 0 || status.overdue.length > 0) process.exitCode = 1;
      } finally {
        await redis.quit().catch(() => redis.disconnect());
      }
    });
}

function printFleet(s: FleetStatus): void {
  const job = (j: FleetJob) => line`    ${show(j.job).padEnd(10)} last success ${j.lastSuccess ?? 'never'}, next ${j.next ?? '?'}${j.overdue ? '  OVERDUE' : ''}`;
  for (const h of s.hosts) {
    const state = h.neverSeen ? (h.silent ? 'SILENT: never seen (no worker has run as this host)' : 'never seen') : h.stopped ? `stopped, last seen ${h.lastSeen}` : h.silent ? `SILENT since ${h.lastSeen}` : `up, last seen ${h.lastSeen}`;
    print`${h.host}  ${state}${h.version ? `  v${h.version} pid ${h.pid}` : ''}`;
    for (const st of h.stores) {
      print`  ${st.store}`;
      for (const j of st.jobs) print`${job(j)}`;
    }
  }
  if (s.anyHost.length > 0) print`(any host: stores every host reaches, each run by one worker)`;
  for (const st of s.anyHost) {
    print`  ${st.store}`;
    for (const j of st.jobs) print`${job(j)}`;
  }
  if (s.global.length > 0) print`(every store)`;
  for (const j of s.global) print`${job(j)}`;
  print`${s.silent.length} silent host(s), ${s.overdue.length} overdue job(s)`;
}
