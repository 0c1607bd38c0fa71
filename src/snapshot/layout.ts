import { createHash } from 'node:crypto';
import { closeSync, createReadStream, fsyncSync, openSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { storeError } from '../core/errors.js';
import { openRegularFile } from '../core/read-file.js';
import type { Config } from '../config/config.js';
import { expandHome } from '../config/read.js';
import { acquireMaintenanceLock, type MaintenanceLock } from '../store/lock.js';
import { ensurePrivateDir } from '../store/private-file.js';
import { MANIFEST } from './manifest.js';

/**
 * Where snapshots live: `<root>/<store>/<2026-11-29T060000Z>/`, one folder per snapshot, built as
 * `.partial-…` beside it and renamed into place only once complete (every kind of copy, and its name: copies.ts).
 * Folders and files are the owner's only.
 */
export const SNAPSHOT_NAME = /^\d{4}-\d{2}-\d{2}T\d{6}Z(-pre-restore)?$/;
export const PARTIAL_PREFIX = '.partial-';
/** `pending-N.json` in a partial folder: a server-side snapshot created and not yet deleted. */
export const PENDING_PREFIX = 'pending-';
export const DIR_MODE = 0o700;
export const FILE_MODE = 0o600;

export function storeSnapshotDir(config: Config, store: string): string {
  return join(expandHome(config.snapshot.root), store);
}

/** mkdir -p, and 0700 on the last folder even if it existed, never through a link (src/store/private-file.ts). */
export { ensurePrivateDir } from '../store/private-file.js';

/** One snapshotter per store at a time: a lock file beside the snapshots, dropped by the OS if we die. */
export function lockSnapshots(dir: string, holder: string): MaintenanceLock {
  ensurePrivateDir(dir);
  return acquireMaintenanceLock(join(dir, '.snapshots'), { holder });
}

/**
 * Size and sha256 of a regular file, streamed. Anything else is refused before a byte is read: a FIFO in a
 * snapshot folder would hold a verify or restore until someone wrote to it, a link to /dev/zero would never end.
 */
export async function sha256File(path: string): Promise<{ bytes: number; sha256: string }> {
  const hash = createHash('sha256');
  let bytes = 0;
  let fd: number;
  try {
    fd = openRegularFile(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EISDIR' || code === 'not a regular file') throw storeError(`${path}: not a regular file`, err);
    throw err;
  }
  await pipeline(createReadStream('', { fd }), async function* (source: AsyncIterable<Buffer>) {
    for await (const chunk of source) {
      hash.update(chunk);
      bytes += chunk.length;
    }
  });
  return { bytes, sha256: hash.digest('hex') };
}

export function fsyncPath(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Write a small file durably: 0600, fsynced. */
export function writePrivateFile(path: string, text: string): void {
  writeFileSync(path, text, { mode: FILE_MODE, flag: 'wx' });
  fsyncPath(path);
}

export { MANIFEST };
