import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Config } from '../config/config.js';
import { hostQueueName, queueHostOf } from './hosts.js';

/** The shared queue on the configured prefix (jobs for every store at once), sharing one connection. */
export function openQueue(config: Config, redis: Redis): Queue {
  return openNamedQueue(config, redis, config.worker.queue);
}

/** The queue of one host's store jobs (src/queue/hosts.ts). */
export function openHostQueue(config: Config, redis: Redis, host: string): Queue {
  return openNamedQueue(config, redis, hostQueueName(config, host));
}

/** The queue a job for `store` goes to: its host's, or the shared one (src/queue/hosts.ts queueHostOf). */
export function openQueueFor(config: Config, redis: Redis, store: string | null): Queue {
  const host = queueHostOf(config, store);
  return host === null ? openQueue(config, redis) : openHostQueue(config, redis, host);
}

/**
 * A queue to read from only (fleet, schedule): BullMQ writes a queue's `meta` key when it opens one, which would
 * leave a key behind for every name looked at; this one writes nothing.
 */
export function openQueueToRead(config: Config, redis: Redis, host: string | null): Queue {
  return openNamedQueue(config, redis, host === null ? config.worker.queue : hostQueueName(config, host), true);
}

function openNamedQueue(config: Config, redis: Redis, name: string, readOnly = false): Queue {
  const queue = new Queue(name, { connection: redis, prefix: config.redis.prefix, ...(readOnly ? { skipMetasUpdate: true } : {}) });
  queue.on('error', () => {}); // connection trouble is logged once by the connection itself
  return queue;
}
