import type { Config } from '../config/config.js';
import type { Logger } from '../log/logger.js';
import type { Clock } from '../time/instants.js';
import type { Progress } from '../progress/progress.js';
import type { StoreNaming } from '../digest/untrusted.js';
import { WardenError } from '../core/errors.js';
import { takeSnapshot } from './create.js';

/** What a restore is told and tells, whichever part the snapshot holds (restore.ts, restore-tables.ts). */
export interface RestoreOptions {
  now: Clock;
  log: Logger;
  /** Restore even while another process has the store open, or without a pre-restore snapshot. */
  force?: boolean;
  dryRun?: boolean;
  /** Bytes verified, then bytes recovered into Qdrant, on a terminal (src/progress/progress.ts). */
  progress?: Progress;
  /**
   * Restore although the erase ledger cannot be re-applied (no state db, its erase key missing or not the
   * snapshot's): memories erased since the snapshot was taken may come back. Without it such a restore is refused.
   */
  withoutEraseLedger?: boolean;
  /** The erase key id the snapshot's source names besides its manifest (a target's holds: `keyId`). */
  madeUnderKey?: string;
  /**
   * How the command that started this restore was told the store (its --config, its --db): kept in the journal, so
   * the command that finishes an interrupted restore, printed later by check, the worker or another command, names
   * the same store the same way. Absent: `--store NAME`.
   */
  storeNaming?: StoreNaming;
}

export interface RestoreResult {
  store: string;
  from: string;
  dryRun: boolean;
  /** What was (or, dry run, would be) done, in order. */
  steps: string[];
  /** The snapshot of the state before the restore: restore it to undo this one. */
  undo: string | null;
  rows: number | null;
  points: Record<string, number>;
  /**
   * Erased memories (and what the layout's erase takes with them by id) the erase ledger kept out of the restored
   * store (src/erase/restore-ledger.ts); null for a dry run.
   */
  erasedKeptOut: number | null;
  /** The erase ledger re-applied: its size, or why it was not (--without-erase-ledger). */
  eraseLedger: string;
  /**
   * Set when bytes of a memory the ledger kept out could still be in the restored store (a database engine's rewrite
   * not done, or its read-back found them): what to do. The restore command exits 1 then, as erase does.
   */
  erasedLeft?: string;
}

/**
 * The pre-restore snapshot: what to restore to undo this restore, and what Qdrant is rolled back from if a
 * collection fails half-way. Without it (store file or a collection missing, say on a new machine) only --force
 * goes on.
 */
export async function undoSnapshot(config: Config, storeName: string, opts: RestoreOptions, result: RestoreResult): Promise<string | null> {
  try {
    const snap = await takeSnapshot(config, storeName, { now: opts.now, log: opts.log, reason: 'pre-restore', storeLock: false });
    result.steps.push(`took the pre-restore snapshot ${snap.dir}`);
    return snap.dir;
  } catch (err) {
    if (!opts.force) {
      throw new WardenError((err as WardenError).kind ?? 'store', `could not take the pre-restore snapshot (${(err as Error).message}); nothing was changed; --force restores without one`, { cause: err });
    }
    opts.log.warn({ store: storeName, err: (err as Error).message }, 'restoring without a pre-restore snapshot (--force)');
    result.steps.push('no pre-restore snapshot (--force)');
    return null;
  }
}
