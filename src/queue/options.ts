import type { JobsOptions } from 'bullmq';
import type { Config } from '../config/config.js';

/** The BullMQ options every job gets, scheduled or enqueued by hand: retries, backoff, bounded history. */
export function jobOptions(config: Config): Pick<JobsOptions, 'attempts' | 'backoff' | 'removeOnComplete' | 'removeOnFail'> {
  const w = config.worker;
  const keep = (k: { count: number; ageSeconds?: number }) => (k.ageSeconds !== undefined ? { count: k.count, age: k.ageSeconds } : { count: k.count });
  return {
    attempts: w.attempts,
    backoff: { type: w.backoff.type, delay: w.backoff.delayMs },
    removeOnComplete: keep(w.removeOnComplete),
    removeOnFail: keep(w.removeOnFail),
  };
}
