import type { Command } from 'commander';
import { QueueEvents } from 'bullmq';
import { loadForCommand, print, printJson } from './common.js';
import { selectStore } from '../config.js';
import { coerceError, transientError, usageError } from '../errors.js';
import { JOBS } from '../../jobs/index.js';
import { connectRedis } from '../queue/connection.js';
import { jobOptions } from '../queue/options.js';
import { listSchedulers, planSchedulers, type SchedulerListing } from '../queue/schedules.js';
import { openQueue, startWorker } from '../queue/worker.js';

/** worker, schedule, enqueue: everything that goes through Redis. */
export function registerWorkerCommands(program: Command): void {
  program
    .command('worker')
    .description('run the scheduled worker: job schedulers from config, jobs from Redis, /metrics and /healthz')
    .option('--config <file>', 'config file (YAML)')
    .action(async (opts: { config?: string }, cmd: Command) => {
      const { config, log } = loadForCommand(opts, cmd);
      const running = await startWorker({ config, log });
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
      const { config, log } = loadForCommand(opts, cmd);
      const redis = await connectRedis(config.redis.url, log);
      const queue = openQueue(config, redis);
      try {
        const rows = await listSchedulers(queue, planSchedulers(config, JOBS, log));
        if (opts.json) return printJson({ prefix: config.redis.prefix, queue: config.worker.queue, schedulers: rows });
        if (rows.length === 0) print('no job schedulers: no stores configured, or every schedule disabled');
        for (const r of rows) print(formatScheduler(r));
      } finally {
        await queue.close();
        await redis.quit();
      }
    });

  program
    .command('enqueue <job>')
    .description('run one job now through the queue (a worker must be running) and wait for its result')
    .option('--config <file>', 'config file (YAML)')
    .option('--store <name>', 'which configured store (store jobs)')
    .option('--timeout <seconds>', 'how long to wait for the result', '600')
    .option('--json', 'print the result as JSON')
    .action(async (name: string, opts: { config?: string; store?: string; timeout: string; json?: boolean }, cmd: Command) => {
      const def = JOBS[name];
      if (!def) throw usageError(`unknown job "${name}" (jobs: ${Object.keys(JOBS).join(', ')})`);
      const timeoutSec = Number(opts.timeout);
      if (!Number.isFinite(timeoutSec) || timeoutSec <= 0) throw usageError(`--timeout: "${opts.timeout}" is not a positive number of seconds`);
      const { config, log } = loadForCommand({ config: opts.config }, cmd);
      const global = (def.scope ?? 'store') === 'global';
      if (global && opts.store) throw usageError(`${name} covers every store at once; --store does not apply`);
      const store = global ? null : selectStore(config, opts.store).name;
      const data = store === null ? {} : { store };
      const what = store === null ? name : `${name} ${store}`;

      const redis = await connectRedis(config.redis.url, log);
      const queue = openQueue(config, redis);
      const events = new QueueEvents(config.worker.queue, { connection: redis.duplicate(), prefix: config.redis.prefix });
      events.on('error', () => {});
      try {
        await events.waitUntilReady();
        const job = await queue.add(name, data, jobOptions(config));
        log.info({ job: name, store, jobId: job.id }, 'enqueued; waiting for a worker to run it');
        let result: unknown;
        try {
          result = await job.waitUntilFinished(events, timeoutSec * 1000);
        } catch (err) {
          if (/timed out/i.test((err as Error).message)) {
            throw transientError(`${name}: no result within ${timeoutSec} s; is a worker running (memory-warden worker)? The job stays queued as ${job.id}`);
          }
          throw coerceError(err, `${what} (job ${job.id})`);
        }
        if (opts.json) printJson(result);
        else print(`${what}: done (job ${job.id})\n${JSON.stringify(result, null, 2)}`);
        // A check that ran and found problems is exit 1, as for `memory-warden check`.
        if ((result as { ok?: unknown } | null)?.ok === false) process.exitCode = 1;
      } finally {
        await events.close().catch(() => {});
        await queue.close().catch(() => {});
        await redis.quit().catch(() => redis.disconnect());
      }
    });
}

function formatScheduler(r: SchedulerListing): string {
  const when = r.every !== null ? `every ${r.every} ms` : `${r.pattern} (${r.tz ?? 'UTC'})`;
  const status = r.inConfig && r.inRedis ? `next ${r.next ?? '?'}` : r.inConfig ? 'not in Redis yet: starts with the next worker' : 'not in config: removed at the next worker start';
  return `${r.id.padEnd(28)} ${when.padEnd(28)} ${status}`;
}
