import type { JobDefinition } from '../src/job/job.js';
import digest from './digest.js';
import drift from './drift.js';
import erase from './erase.js';
import integrity from './integrity.js';
import prune from './prune.js';
import restore from './restore.js';
import snapshot from './snapshot.js';

/**
 * Every job, by name. The name is the file name; a test fails when a file in jobs/ is missing here.
 * The worker schedules from this map and `memory-warden run NAME` looks jobs up in it.
 */
export const JOBS: Record<string, JobDefinition<any, any>> = {
  digest,
  drift,
  erase,
  integrity,
  prune,
  restore,
  snapshot,
};

export function jobNames(): string[] {
  return Object.keys(JOBS);
}
