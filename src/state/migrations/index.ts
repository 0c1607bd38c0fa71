import jobRuns from './001-job-runs.js';
import driftVerdicts from './002-drift-verdicts.js';
import digestDeliveries from './003-digest-deliveries.js';
import eraseReceipts from './004-erase-receipts.js';
import wardenDeletions from './005-warden-deletions.js';
import eraseNeedles from './006-erase-needles.js';
import digestTexts from './007-digest-texts.js';
import scheduledRuns from './008-scheduled-runs.js';
import keyedEraseRecords from './009-keyed-erase-records.js';
import queueUse from './010-queue-use.js';

export interface StateMigration {
  /** What `PRAGMA user_version` says once it is applied: its place in this list, from 1. */
  version: number;
  /** Its file in this folder, without the extension. */
  file: string;
  sql: string;
}

/**
 * The state db's schema, in order: one file per step, `NNN-what.ts`, exporting its SQL. A step is never edited
 * once released (a state db that has it would not see the change): add the next number instead.
 *
 * 001–005 are the tables as they were before numbering, when each module created its own on import. A state
 * db from then has version 0 and any subset of them, so they say `IF NOT EXISTS` and upgrade it in place;
 * later steps run exactly once and need not.
 */
const FILES: ReadonlyArray<[file: string, sql: string]> = [
  ['001-job-runs', jobRuns],
  ['002-drift-verdicts', driftVerdicts],
  ['003-digest-deliveries', digestDeliveries],
  ['004-erase-receipts', eraseReceipts],
  ['005-warden-deletions', wardenDeletions],
  ['006-erase-needles', eraseNeedles],
  ['007-digest-texts', digestTexts],
  ['008-scheduled-runs', scheduledRuns],
  ['009-keyed-erase-records', keyedEraseRecords],
  ['010-queue-use', queueUse],
];

export const STATE_MIGRATIONS: readonly StateMigration[] = FILES.map(([file, sql], i) => ({ version: i + 1, file, sql }));

/** The version of a state db this build makes; a newer one is refused. */
export const STATE_VERSION = STATE_MIGRATIONS.length;
