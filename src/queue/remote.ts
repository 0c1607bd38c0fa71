import { QueueEvents } from 'bullmq';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { coerceError, transientError } from '../errors.js';
import { connectRedis } from './connection.js';
import { jobOptions } from './options.js';
import { openQueueFor } from './queues.js';

export interface RemoteRun {
  config: Config;
  log: Logger;
  /** The job's name, and its payload (`store` routes it to the store's host; none: where globalHost says). */
  job: string;
  data: Record<string, unknown> & { store?: string };
  timeoutSeconds: number;
  /**
   * The payload names a person or their text (erase): the job leaves Redis as soon as its result is read, and a
   * failed one at once; it is never retried by BullMQ (the command says what happened and the person reruns it).
   */
  sensitive?: boolean;
}

/**
 * Run one job on the worker of the store's host (its queue, src/queue/hosts.ts) and wait for the result there:
 * what `enqueue` does, and what `erase` and `restore` do for a store on another machine.
 */
export async function runOnHost(run: RemoteRun): Promise<unknown> {
  const { config, log } = run;
  const store = run.data.store ?? null;
  const redis = await connectRedis(config.redis.url, log);
  const queue = openQueueFor(config, redis, store);
  const events = new QueueEvents(queue.name, { connection: redis.duplicate(), prefix: config.redis.prefix });
  events.on('error', () => {});
  const what = store === null ? run.job : `${run.job} ${store}`;
  try {
    await events.waitUntilReady();
    const opts = run.sensitive ? { ...jobOptions(config), attempts: 1, removeOnComplete: true, removeOnFail: true } : jobOptions(config);
    const job = await queue.add(run.job, run.data, opts);
    log.info({ job: run.job, store, jobId: job.id, queue: queue.name }, 'enqueued; waiting for a worker to run it');
    try {
      return await job.waitUntilFinished(events, run.timeoutSeconds * 1000);
    } catch (err) {
      if (/timed out/i.test((err as Error).message)) {
        if (run.sensitive) await job.remove().catch(() => {});
        throw transientError(
          `${what}: no result within ${run.timeoutSeconds} s; is a worker running on host ${queue.name.slice(config.worker.queue.length + 1) || '(any)'} (memory-warden worker)? ` +
            (run.sensitive ? 'The job was withdrawn if no worker had taken it' : `The job stays queued as ${job.id} on ${queue.name}`),
        );
      }
      throw coerceError(err, `${what} (job ${job.id}, queue ${queue.name})`);
    }
  } finally {
    await events.close().catch(() => {});
    await queue.close().catch(() => {});
    await redis.quit().catch(() => redis.disconnect());
  }
}
