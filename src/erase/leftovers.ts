import { lstatSync, readdirSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileHolds } from './snapshots.js';
import { PARTIAL_PREFIX, lockSnapshots, removePartials } from '../snapshot/layout.js';
import type { CollectionSnapshots } from '../vectors/contract.js';
import type { Logger } from '../log/logger.js';

/**
 * Copies of the store that memory-warden's own jobs leave when they are killed: a restore's staged copy beside the
 * store (`.<file>.restore-<pid>`, with its -wal/-journal) and a snapshot's `.partial-…` folder. Erase runs under
 * the maintenance lock that restore and snapshot hold, so any it finds is a leftover, never work in progress;
 * those holding an erased text are removed. Symlinks are not followed.
 */
export interface Leftovers {
  staged: string[];
  partials: string[];
}

export async function leftoverCopies(storePath: string, snapshotRoot: string, texts: string[], subject?: string): Promise<Leftovers> {
  const prefix = `.${basename(storePath)}.restore-`;
  const staged: string[] = [];
  for (const name of list(dirname(storePath)).filter((n) => n.startsWith(prefix))) {
    const p = join(dirname(storePath), name);
    if (lstatSync(p).isFile() && (await fileHolds(p, texts, subject))) staged.push(p);
  }
  const partials: string[] = [];
  for (const name of list(snapshotRoot).filter((n) => n.startsWith(PARTIAL_PREFIX))) {
    const dir = join(snapshotRoot, name);
    if (!lstatSync(dir).isDirectory()) continue;
    for (const f of filesUnder(dir)) {
      if (await fileHolds(f, texts, subject)) {
        partials.push(dir);
        break;
      }
    }
  }
  return { staged, partials };
}

/** Staged copies go; partial folders go as the next snapshot would remove them, server-side snapshots included. */
export async function removeLeftovers(l: Leftovers, snapshotRoot: string, q: CollectionSnapshots | undefined, log: Logger): Promise<void> {
  for (const p of l.staged) rmSync(p, { force: true });
  if (l.partials.length === 0) return;
  const lock = lockSnapshots(snapshotRoot, 'erase');
  try {
    await removePartials(snapshotRoot, q, log);
  } finally {
    lock.release();
  }
}

function list(dir: string): string[] {
  try {
    return readdirSync(dir).sort();
  } catch {
    return [];
  }
}

function* filesUnder(dir: string): Generator<string> {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) yield* filesUnder(p);
    else if (e.isFile()) yield p;
  }
}
