import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, renameSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Logger } from '../log/logger.js';
import type { CollectionSnapshots } from '../vectors/contract.js';
import { ensurePrivateDir, FILE_MODE, fsyncPath } from './layout.js';

/**
 * Server-side Qdrant snapshots memory-warden made (`created` for a download, `uploaded` for a restore), noted in
 * `<snapshot root>/<store>/.server-snapshots/` before they exist and forgotten once deleted from the server. A
 * delete that fails (503) or a run killed in between leaves the note, and the next snapshot, restore or
 * `erase --snapshots` deletes the snapshot. Everything that writes a note holds the store's maintenance lock, and
 * so does everything that sweeps them: a note seen by a sweeper is a leftover.
 */
export const NOTES_DIR = '.server-snapshots';
/** Uploads are named by memory-warden, so they are found in a collection's list even without a note. */
export const UPLOAD_PREFIX = 'memory-warden-upload-';

export interface ServerSnapshotNote {
  collection: string;
  /** Null between asking Qdrant to create it and hearing its name. */
  snapshot: string | null;
  kind: 'created' | 'uploaded';
  at: string;
  pid: number;
}

export interface ServerSnapshot {
  collection: string;
  name: string;
  /** Made by memory-warden (noted, or named as its uploads are). */
  ours: boolean;
}

export function uploadName(now: number): string {
  return `${UPLOAD_PREFIX}${new Date(now).toISOString().replace(/[:.]/g, '-')}-${randomBytes(4).toString('hex')}.snapshot`;
}

function writeNote(path: string, note: ServerSnapshotNote): void {
  const tmp = `${path}.tmp`;
  rmSync(tmp, { force: true });
  writeFileSync(tmp, JSON.stringify(note) + '\n', { mode: FILE_MODE, flag: 'wx' }); // a new file, never written through a link
  fsyncPath(tmp);
  renameSync(tmp, path);
}

/** Note a server-side snapshot before it is made; returns the note, to update with its name and to forget. */
export function noteServerSnapshot(storeRoot: string, note: Omit<ServerSnapshotNote, 'pid' | 'at'>): { path: string; name(snapshot: string): void; forget(): void } {
  const dir = join(storeRoot, NOTES_DIR);
  ensurePrivateDir(dir);
  const path = join(dir, `${Date.now()}-${process.pid}-${randomBytes(4).toString('hex')}.json`);
  const full: ServerSnapshotNote = { ...note, pid: process.pid, at: new Date().toISOString() };
  writeNote(path, full);
  fsyncPath(dir);
  return {
    path,
    name: (snapshot) => writeNote(path, { ...full, snapshot }),
    forget: () => forget(path),
  };
}

/** Remove a note, and the notes folder with its last note (so a store with no leftovers has no such folder). */
function forget(path: string): void {
  rmSync(path, { force: true });
  try {
    rmdirSync(dirname(path));
  } catch {
    // other notes remain
  }
}

function readNotes(storeRoot: string): { path: string; note: ServerSnapshotNote | null }[] {
  const dir = join(storeRoot, NOTES_DIR);
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  // A note rewrite cut short: complete it when it is whole (it may hold the name), else drop it.
  for (const n of names.filter((x) => x.endsWith('.json.tmp'))) {
    const tmp = join(dir, n);
    try {
      JSON.parse(readFileSync(tmp, 'utf8'));
      renameSync(tmp, tmp.slice(0, -'.tmp'.length));
    } catch {
      rmSync(tmp, { force: true });
    }
  }
  names = readdirSync(dir).filter((n) => n.endsWith('.json'));
  return names.map((n) => {
    const path = join(dir, n);
    try {
      return { path, note: JSON.parse(readFileSync(path, 'utf8')) as ServerSnapshotNote };
    } catch {
      return { path, note: null };
    }
  });
}

/** Gone already (deleted by an earlier try, or its collection deleted) counts as deleted: sweeps are retried. */
export async function deleteIfThere(q: CollectionSnapshots, collection: string, name: string): Promise<void> {
  try {
    await q.deleteSnapshot(collection, name);
  } catch (err) {
    if (!/\(HTTP 404\)/.test((err as Error).message)) throw err;
  }
}

/**
 * Every server-side snapshot of these collections, marked when memory-warden made it. A collection that is
 * missing has none.
 */
export async function serverSnapshots(storeRoot: string, q: CollectionSnapshots, collections: readonly string[]): Promise<ServerSnapshot[]> {
  const noted = new Set(readNotes(storeRoot).flatMap(({ note }) => (note?.snapshot ? [`${note.collection}\0${note.snapshot}`] : [])));
  const out: ServerSnapshot[] = [];
  for (const collection of collections) {
    if (!(await q.collectionExists(collection))) continue;
    for (const s of await q.listSnapshots(collection)) {
      out.push({ collection, name: s.name, ours: s.name.startsWith(UPLOAD_PREFIX) || noted.has(`${collection}\0${s.name}`) });
    }
  }
  return out;
}

/**
 * Delete the server-side snapshots left by earlier runs: every noted one, and every upload named as memory-warden
 * names them. A delete that fails keeps its note for the next run. Only called under the store's maintenance lock.
 * Returns `collection/name` of each one deleted.
 */
export async function removeServerLeftovers(storeRoot: string, q: CollectionSnapshots | undefined, collections: readonly string[], log: Logger): Promise<string[]> {
  if (!q) return [];
  const removed: string[] = [];
  for (const { path, note } of readNotes(storeRoot)) {
    if (!note || !note.snapshot) {
      // Killed before Qdrant said the name: it cannot be told from other snapshots, so it is left, and said so.
      log.warn({ note: path }, 'a server-side snapshot was being created when a run was interrupted; its name is unknown: look at the collection\'s snapshot list');
      forget(path);
      continue;
    }
    try {
      await deleteIfThere(q, note.collection, note.snapshot);
      forget(path);
      removed.push(`${note.collection}/${note.snapshot}`);
    } catch (err) {
      log.warn({ collection: note.collection, snapshot: note.snapshot, err: (err as Error).message }, 'could not delete a server-side snapshot left by an earlier run; the next run tries again');
    }
  }
  for (const s of await serverSnapshots(storeRoot, q, collections).catch(() => [])) {
    if (!s.name.startsWith(UPLOAD_PREFIX)) continue;
    try {
      await deleteIfThere(q, s.collection, s.name);
      removed.push(`${s.collection}/${s.name}`);
    } catch (err) {
      log.warn({ collection: s.collection, snapshot: s.name, err: (err as Error).message }, 'could not delete an uploaded snapshot left by an earlier restore');
    }
  }
  return removed;
}

/** Delete one server-side snapshot now (erase --snapshots), forgetting its note. */
export async function deleteServerSnapshot(storeRoot: string, q: CollectionSnapshots, s: ServerSnapshot): Promise<void> {
  await deleteIfThere(q, s.collection, s.name);
  for (const { path, note } of readNotes(storeRoot)) if (note?.collection === s.collection && note.snapshot === s.name) forget(path);
}
