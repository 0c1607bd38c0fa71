import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/config.js';
import { usageError } from '../core/errors.js';
import { erasedSnapshotRecords } from '../erase/restore-ledger.js';
import { snapshotFolders } from './folders.js';
import { SNAPSHOT_NAME, storeSnapshotDir } from './layout.js';

/**
 * The folder `restore ARG` restores locally: `latest` is the store's newest usable scheduled snapshot by the sequence
 * number in its manifest (the order retention trusts: a clock stepped back gives the newest the oldest name), never one
 * an erase removed (erased_snapshots) that came back; a snapshot's name that is no path here is that snapshot of the
 * store; anything else is the folder given.
 */
export function localSnapshotDir(config: Config, store: string, arg: string): string {
  if (arg === 'latest') {
    const erased = erasedSnapshotRecords(config, store);
    const pick = snapshotFolders(config, store).filter((s) => !s.problem && s.manifest!.reason === 'scheduled' && !erased.has(s.name)).at(-1);
    if (!pick) throw usageError(`restore latest: store ${store} has no usable scheduled snapshot in ${storeSnapshotDir(config, store)}${erased.size > 0 ? ' (none an erase removed)' : ''}`);
    return pick.dir;
  }
  if (SNAPSHOT_NAME.test(arg) && !existsSync(arg)) {
    const dir = join(storeSnapshotDir(config, store), arg);
    if (existsSync(dir)) return dir;
  }
  return arg;
}
