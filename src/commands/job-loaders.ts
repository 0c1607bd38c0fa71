import type { JobDefinition, JobLoader } from '../job/job.js';

/**
 * Each job by name, imported when it is run: `memory-warden check` loads the integrity job, not the digest's
 * mailer or drift's verifiers. The same jobs as jobs/index.ts (test/cli-startup.test.ts compares them). Here, in
 * the composition root, because src/ below it is handed jobs and imports none (.dependency-cruiser.cjs).
 */
export const JOB_LOADERS: Record<string, () => Promise<{ default: JobDefinition<any, any> }>> = {
  digest: () => import('../../jobs/digest.js'),
  drift: () => import('../../jobs/drift.js'),
  erase: () => import('../../jobs/erase.js'),
  integrity: () => import('../../jobs/integrity.js'),
  prune: () => import('../../jobs/prune.js'),
  restore: () => import('../../jobs/restore.js'),
  snapshot: () => import('../../jobs/snapshot.js'),
};

/** What the CLI hands the runner: it imports only the job it is asked to run. */
export const loadJob: JobLoader = Object.assign(
  async (name: string): Promise<JobDefinition<any, any> | undefined> => {
    const load = Object.hasOwn(JOB_LOADERS, name) ? JOB_LOADERS[name] : undefined;
    return load ? (await load()).default : undefined;
  },
  { names: Object.keys(JOB_LOADERS) },
);
