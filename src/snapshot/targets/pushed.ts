// What this machine last pushed to each target (the newest snapshot name), kept beside the store's snapshots, so
// `restore --target latest` notices a target whose newest snapshot is older: newer ones deleted or withheld.
import { randomBytes } from 'node:crypto';
import { renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { readRegularFile } from '../../core/read-file.js';
import { fsyncPath, writePrivateFile } from '../layout.js';
import { TARGET_SNAPSHOT_NAME } from './types.js';

const recordOf = (root: string, target: string) => join(root, `.pushed-${target}.json`);

/** The newest snapshot this machine pushed to the target, or null when it has no record (another machine, say). */
export function lastPushed(root: string, target: string): string | null {
  try {
    const newest = (JSON.parse(readRegularFile(recordOf(root, target), 4096)) as { newest?: unknown }).newest;
    return typeof newest === 'string' && TARGET_SNAPSHOT_NAME.test(newest) ? newest : null;
  } catch {
    return null;
  }
}

/** After a push: remember `name` if it is newer than what is recorded (temp file, fsync, rename). */
export function notePushed(root: string, target: string, name: string): void {
  const before = lastPushed(root, target);
  if (before !== null && before >= name) return;
  const tmp = `${recordOf(root, target)}.tmp-${randomBytes(4).toString('hex')}`;
  try {
    writePrivateFile(tmp, JSON.stringify({ newest: name }) + '\n');
    renameSync(tmp, recordOf(root, target));
    fsyncPath(root);
  } finally {
    rmSync(tmp, { force: true });
  }
}
