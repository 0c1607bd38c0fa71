/**
 * Local retention: which of a store's snapshots go once a new one is published, in the order they were taken
 * (a sequence number, never names or times), and how one goes so that kill -9 at any point leaves no half snapshot.
 */
import { renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/config.js';
import type { Logger } from '../log/logger.js';
import { fsyncPath, storeSnapshotDir } from './layout.js';
import { retiredFolder } from './copies.js';
import { proveSnapshot, snapshotFolders } from './folders.js';

/** The sequence number of the store's next snapshot: above every manifest of this store there, verified or not. */
export function nextSeq(config: Config, store: string): number {
  const seqs = snapshotFolders(config, store).map((f) => f.manifest?.seq ?? -1);
  return Math.max(-1, ...seqs) + 1;
}

/**
 * Keep the `keep` newest verified scheduled snapshots, `justTaken` always among them; delete older ones, each
 * proven by its checksums first. Pre-restore snapshots and folders that are not verified snapshots of this store
 * are never deleted here: a person decides about those. Only called while holding the snapshot lock.
 */
export async function applyRetention(config: Config, store: string, keep: number, justTaken: string, log: Logger): Promise<string[]> {
  const others = snapshotFolders(config, store).filter((s) => !s.problem && s.manifest!.reason === 'scheduled' && s.name !== justTaken);
  const doomed = others.slice(0, Math.max(0, others.length - (keep - 1)));
  const pruned: string[] = [];
  for (const s of doomed) {
    const problem = await proveSnapshot(s, store);
    if (problem) {
      log.warn({ store, dir: s.dir, problem }, 'retention left a snapshot folder that no longer verifies: a person decides about it');
      continue;
    }
    retire(storeSnapshotDir(config, store), s.name);
    pruned.push(s.name);
  }
  return pruned;
}

/**
 * Delete a snapshot folder in two steps: renamed (atomically) to its retired name (copies.ts), which no reader takes
 * for a snapshot and the next snapshot run (or erase) removes (removePartials), then removed. Killed between or
 * during, what is left is a leftover, never a snapshot with some of its files.
 */
export function retire(root: string, name: string): void {
  const gone = retiredFolder(root, name);
  rmSync(gone, { recursive: true, force: true }); // a retirement killed earlier, of a folder of the same name
  renameSync(join(root, name), gone);
  fsyncPath(root);
  rmSync(gone, { recursive: true, force: true });
}
