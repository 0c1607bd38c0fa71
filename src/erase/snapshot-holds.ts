/**
 * Owns one question of erase's snapshot search: does a local snapshot's SQLite copy hold an erased id or user, as
 * the holds its upload carries would say (src/snapshot/targets/holds.ts)? Local and remote copies answer alike.
 */
import { readSnapshotCopy } from '../snapshot/read-copy.js';
import { join } from 'node:path';
import type { Logger } from '../log/logger.js';
import { readManifest, type Manifest } from '../snapshot/manifest.js';
import { copyNamesIn, holdsContain, idMac, snapshotHolds, userMac } from '../snapshot/targets/holds.js';
import { chunksOf, type Strings } from '../text/string-list.js';

/** Erased ids per query of a snapshot's copy. */
const ID_CHUNK = 4096;

/** The erased ids and user in plain (this run's, held in memory only) and the id hashes earlier erases kept. */
export interface HoldsSearch {
  key: Buffer;
  store: string;
  ids: Strings;
  user?: string | undefined;
  /** Keyed hashes (holds.ts's form) of ids earlier erases of this selector erased (erase-needles.ts). */
  earlier: readonly string[];
}

export const searchesHolds = (h: HoldsSearch) => h.ids.length > 0 || h.user !== undefined || h.earlier.length > 0;

/** 'holds', 'unsure' (it cannot be ruled out), or null. */
export type HoldsAnswer = 'holds' | 'unsure' | null;

/**
 * Whether the folder's SQLite copy holds one of them, so a row pruned before the erase (whose text erase never saw)
 * is found here as it is on a target. Only a folder whose manifest says it is a snapshot of this store is judged
 * (the byte search is all that applies to another); one whose copy cannot be read cannot be ruled out.
 *
 * The plain ids and user are looked up directly, through the indexes; only ids known by their hash alone (from
 * earlier runs, and not erased again now) are searched in its holds: the file made with the snapshot, or for an
 * older snapshot every id of the copy hashed now, as making its holds does (seconds per million rows).
 */
export async function sqliteHolds(dir: string, h: HoldsSearch, log: Logger): Promise<HoldsAnswer> {
  if (!searchesHolds(h)) return null;
  let m: Manifest;
  try {
    m = readManifest(dir);
  } catch {
    return null;
  }
  if (m.store !== h.store) return null;
  try {
    const mine = () => {
      const out = new Set<string>();
      for (const id of h.ids) out.add(idMac(h.key, id));
      return out;
    };
    if (!m.sqlite) {
      // A store's tables (a database's snapshot): its holds answer for the plain ids and user too, by their hashes.
      const all = mine();
      for (const mac of h.earlier) all.add(mac);
      return (await holdsContain(snapshotHolds(dir, m, h.key), { ids: all, user: h.user === undefined ? undefined : userMac(h.key, h.user) }, dir)) ? 'holds' : null;
    }
    if (!Object.hasOwn(m.files, m.sqlite.file)) throw new Error(`its SQLite copy ${JSON.stringify(m.sqlite.file)} is not among its files`);
    const file = join(dir, m.sqlite.file);
    if (plainHolds(file, h.ids, h.user)) return 'holds';
    // Hashed only when earlier runs left hashes to look for.
    const these = h.earlier.length > 0 ? mine() : new Set<string>();
    const extra = new Set(h.earlier.filter((mac) => !these.has(mac)));
    return extra.size > 0 && (await holdsContain(snapshotHolds(dir, m, h.key), { ids: extra }, dir)) ? 'holds' : null;
  } catch (err) {
    log.warn({ store: h.store, snapshot: dir, why: (err as Error).message }, 'cannot rule out that a snapshot holds the erased data');
    return 'unsure';
  }
}

/**
 * What the holds of this copy would say of these plain ids and this user, asked of SQLite directly: wherever a layout
 * says a copy names an id or a person (Layout.copyNames, as holdsStream reads them: copyNamesIn), the ids looked up
 * among its ids, the user as its person or as a `user_id=` part of a scoped column (mem0's session_scope).
 */
function plainHolds(file: string, ids: Strings, user: string | undefined): boolean {
  const copy = readSnapshotCopy(file);
  const db = copy.db;
  try {
    const any = (sql: string, ...args: unknown[]) => db.prepare(sql).get(...args) !== undefined;
    const table = (t: string) => `"${t.replace(/"/g, '""')}"`;
    for (const n of copyNamesIn(db)) {
      // The ids ID_CHUNK at a time: no JSON list of every erased id.
      for (const chunk of chunksOf(ids, ID_CHUNK)) {
        const list = JSON.stringify(chunk);
        if (n.ids.some((id) => any(`SELECT 1 FROM ${table(n.table)} WHERE ${id} IN (SELECT value FROM json_each(?)) LIMIT 1`, list))) return true;
      }
      if (user === undefined) continue;
      if (n.user && any(`SELECT 1 FROM ${table(n.table)} WHERE ${n.user} = ? LIMIT 1`, user)) return true;
      // holdsStream splits the scoped column at '&': a user with '&' in it is never among its users.
      if (n.scoped && !user.includes('&') && any(`SELECT 1 FROM ${table(n.table)} WHERE instr('&' || ${n.scoped} || '&', ?) > 0 LIMIT 1`, `&user_id=${user}&`)) return true;
    }
    return false;
  } finally {
    copy.close();
  }
}
