import type { Config } from '../config/config.js';
import type { Logger } from '../log/logger.js';
import type { CollectionSnapshots } from '../vectors/contract.js';
import { lockSnapshots, storeSnapshotDir } from '../snapshot/layout.js';
import { localLeftovers, removeLocalCopy, removePartials, type LocalCopy } from '../snapshot/copies.js';

/**
 * Copies of the store that memory-warden's own runs leave when they are killed, on this machine (the registry's
 * local `leftover` kinds, src/snapshot/copies.ts): a restore's staging copies beside every store file, and the
 * partial, retired and download (`.fetch-`, decrypted) folders under the store's snapshot folder. Every erase finds
 * them, whoever it erases (a leftover is worth nothing, so erase does not try to rule out what one holds), lists each
 * (`snapshots.found`), and unless a dry run removes it: erase holds the store's maintenance lock, which restore and
 * snapshot hold too, and takes the snapshot lock for the snapshot folder's (a download in progress holds it). A
 * download folder still in use (its restore runs, or an interrupted restore resumes from it) is listed, cannot be
 * ruled out, and is left: erase exits 1 until it is gone. Links are not followed.
 */
export interface Leftovers {
  found: string[];
  deleted: string[];
  unverified: string[];
  /** Removed (a dry run: that would be removed), by kind. */
  counts: Record<LocalCopy['kind'], number>;
}

export async function eraseLeftovers(config: Config, store: string, opts: { remove: boolean; log: Logger; q: CollectionSnapshots | undefined }): Promise<Leftovers> {
  const counts: Leftovers['counts'] = { staging: 0, partial: 0, retired: 0, fetch: 0 };
  let copies = localLeftovers(config, store);
  const out: Leftovers = { found: [], deleted: [], unverified: [], counts };
  const judge = (c: LocalCopy) => {
    out.found.push(c.path);
    if (!opts.remove && !c.inUse) counts[c.kind]++;
    if (!c.inUse) return;
    out.unverified.push(c.path);
    opts.log.warn({ store, copy: c.path, why: c.inUse }, 'a copy of the store is in use: not removed now; erase again once its restore has ended');
  };
  if (!opts.remove || copies.length === 0) {
    copies.forEach(judge);
    return out;
  }
  const root = storeSnapshotDir(config, store);
  const lock = copies.some((c) => c.kind !== 'staging') ? lockSnapshots(root, 'erase') : undefined;
  try {
    if (lock) copies = localLeftovers(config, store); // as they are now that no download can be under way
    copies.forEach(judge);
    const removable = copies.filter((c) => !c.inUse);
    if (removable.some((c) => c.kind === 'partial' || c.kind === 'retired')) await removePartials(root, opts.q, opts.log);
    for (const c of removable) {
      removeLocalCopy(c);
      counts[c.kind]++;
      out.deleted.push(c.path);
    }
  } finally {
    lock?.release();
  }
  return out;
}
