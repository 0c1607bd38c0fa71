/**
 * Every job's name and scope, for listing `run NAME` in `--help` without loading the jobs (they bring zod, the
 * stores, the digest mailer). test/cli-startup.test.ts fails when this list and jobs/index.ts disagree.
 */
export const JOB_SCOPES: Record<string, 'store' | 'global'> = {
  digest: 'global',
  drift: 'store',
  erase: 'store',
  integrity: 'store',
  prune: 'store',
  restore: 'store',
  snapshot: 'store',
};
