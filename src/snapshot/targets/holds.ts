import { createHmac } from 'node:crypto';
import { gunzipSync, gzipSync } from 'node:zlib';
import Database from 'better-sqlite3';
import { storeError } from '../../errors.js';

/**
 * What a snapshot holds, as keyed hashes: the memory ids and the users in its SQLite copy, each as the first 64
 * bits of HMAC-SHA256(erase key, "id:…" / "user:…"). Uploaded beside the snapshot as `holds.json.gz` so erase can
 * find the remote snapshots that hold a person's data without reading (or being able to read) their content. The
 * key stays on the machine (erase.key beside the state db): the hashes cannot be checked against guessed ids
 * without it.
 */
export const HOLDS_KEY = 'holds.json.gz';

export interface Holds {
  ids: string[];
  users: string[];
}

const mac = (key: Buffer, kind: 'id' | 'user', v: string) => createHmac('sha256', key).update(`${kind}:${v}`, 'utf8').digest('hex').slice(0, 16);
export const idMac = (key: Buffer, id: string) => mac(key, 'id', id);
export const userMac = (key: Buffer, user: string) => mac(key, 'user', user);

/** Ids and users of a snapshot's SQLite copy: the warden memory table, mem0's history and messages. */
export function holdsOf(dbFile: string, key: Buffer): Holds {
  const db = new Database(dbFile, { readonly: true, fileMustExist: true });
  try {
    const tables = new Set((db.prepare(`SELECT name FROM sqlite_master WHERE type = 'table'`).all() as { name: string }[]).map((r) => r.name));
    const cols = (t: string) => new Set((db.prepare(`SELECT name FROM pragma_table_info(?)`).all(t) as { name: string }[]).map((r) => r.name));
    const ids = new Set<string>();
    const users = new Set<string>();
    const each = (sql: string, f: (v: string) => void) => {
      for (const v of db.prepare(sql).pluck().iterate() as Iterable<unknown>) if (v !== null && v !== undefined) f(String(v));
    };
    if (tables.has('memory')) {
      each(`SELECT id FROM memory`, (v) => ids.add(idMac(key, v)));
      const c = cols('memory');
      if (c.has('user_id')) each(`SELECT DISTINCT user_id FROM memory`, (v) => users.add(userMac(key, v)));
      else if (c.has('subject')) each(`SELECT DISTINCT subject FROM memory`, (v) => users.add(userMac(key, v)));
    }
    if (tables.has('history') && cols('history').has('memory_id')) each(`SELECT DISTINCT memory_id FROM history`, (v) => ids.add(idMac(key, v)));
    if (tables.has('messages') && cols('messages').has('session_scope')) {
      each(`SELECT DISTINCT session_scope FROM messages`, (scope) => {
        for (const part of scope.split('&')) if (part.startsWith('user_id=')) users.add(userMac(key, part.slice(8)));
      });
    }
    return { ids: [...ids].sort(), users: [...users].sort() };
  } finally {
    db.close();
  }
}

export function encodeHolds(h: Holds): Buffer {
  return gzipSync(JSON.stringify(h));
}

export function decodeHolds(b: Buffer, what: string): Holds {
  try {
    const h = JSON.parse(gunzipSync(b).toString('utf8')) as Holds;
    if (!Array.isArray(h.ids) || !Array.isArray(h.users)) throw new Error('no ids/users');
    return h;
  } catch (err) {
    throw storeError(`${what}: unreadable ${HOLDS_KEY} (${(err as Error).message})`, err);
  }
}
