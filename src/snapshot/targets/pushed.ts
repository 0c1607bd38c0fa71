// What this machine pushed to each target, kept beside the store's snapshots, so `restore --target latest` notices a
// target whose newest snapshot is older than what was pushed there: newer ones deleted or withheld. Ordered by the
// per-store sequence number of each snapshot's manifest (the order retention trusts), never by names, which a clock
// stepped back reorders.
import { randomBytes } from 'node:crypto';
import { renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { readRegularFile } from '../../core/read-file.js';
import { fsyncPath, writePrivateFile } from '../layout.js';
import { TARGET_SNAPSHOT_NAME } from './types.js';

const recordOf = (root: string, target: string) => join(root, `.pushed-${target}.json`);

/** One snapshot pushed: its name and its manifest's sequence number (null: an older snapshot without one). */
export interface Pushed {
  name: string;
  seq: number | null;
}

/** How many of the latest pushes the record keeps: enough that an erase removing the newest leaves the one before. */
const KEEP = 64;

/** Newest first: by sequence number (none: before all that have one), then by name. */
const newerFirst = (a: Pushed, b: Pushed) => ((b.seq ?? -1) - (a.seq ?? -1)) || (a.name < b.name ? 1 : a.name > b.name ? -1 : 0);

const isSeq = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** Every push recorded, newest first; a record from before sequence numbers gives its one name with seq null. */
function readPushed(root: string, target: string): Pushed[] {
  let raw: { newest?: unknown; seq?: unknown; recent?: unknown };
  try {
    raw = JSON.parse(readRegularFile(recordOf(root, target), 64 * 1024)) as typeof raw;
  } catch {
    return [];
  }
  const out: Pushed[] = [];
  if (Array.isArray(raw.recent)) {
    for (const p of raw.recent as { name?: unknown; seq?: unknown }[]) {
      if (p && typeof p.name === 'string' && TARGET_SNAPSHOT_NAME.test(p.name)) out.push({ name: p.name, seq: isSeq(p.seq) ? p.seq : null });
    }
  }
  if (typeof raw.newest === 'string' && TARGET_SNAPSHOT_NAME.test(raw.newest) && !out.some((p) => p.name === raw.newest)) {
    out.push({ name: raw.newest, seq: isSeq(raw.seq) ? raw.seq : null });
  }
  return out.sort(newerFirst);
}

/**
 * The newest snapshot this machine pushed to the target that no erase removed since (`erased`: erased_snapshots),
 * or null when it has no record (another machine, say).
 */
export function lastPushed(root: string, target: string, erased: ReadonlySet<string> = new Set()): Pushed | null {
  return readPushed(root, target).find((p) => !erased.has(p.name)) ?? null;
}

/** After a push: remember these snapshots with the rest (temp file, fsync, rename). */
export function notePushed(root: string, target: string, pushed: readonly Pushed[]): void {
  if (pushed.length === 0) return;
  const all = readPushed(root, target).filter((p) => !pushed.some((q) => q.name === p.name));
  const recent = [...all, ...pushed].sort(newerFirst).slice(0, KEEP);
  const newest = recent[0]!;
  const tmp = `${recordOf(root, target)}.tmp-${randomBytes(4).toString('hex')}`;
  try {
    writePrivateFile(tmp, JSON.stringify({ newest: newest.name, seq: newest.seq, recent }) + '\n');
    renameSync(tmp, recordOf(root, target));
    fsyncPath(root);
  } finally {
    rmSync(tmp, { force: true });
  }
}
