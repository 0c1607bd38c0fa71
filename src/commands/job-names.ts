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

/**
 * Jobs whose payload a command of their own builds (erase: a person or ids; restore: a snapshot folder): `run erase`
 * and `run restore` are those commands (src/commands/erase.ts, snapshot.ts), not the plain `run NAME` of the others.
 */
export const OWN_COMMAND_JOBS: ReadonlySet<string> = new Set(['erase', 'restore']);
