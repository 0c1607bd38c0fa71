import { createHmac } from 'node:crypto';
import { Readable, pipeline } from 'node:stream';
import { createGunzip, createGzip } from 'node:zlib';
import { readSnapshotCopy } from '../read-copy.js';
import { storeError } from '../../core/errors.js';
import { UnverifiedSnapshotError } from './types.js';

/**
 * What a snapshot holds, as keyed hashes: the memory ids and the users in its SQLite copy, each as the first 64
 * bits of HMAC-SHA256(erase key, "id:…" / "user:…"). Uploaded beside the snapshot as `holds.json.gz` so erase can
 * find the remote snapshots that hold a person's data without reading (or being able to read) their content. The
 * key stays on the machine (erase.key beside the state db): the hashes cannot be checked against guessed ids
 * without it.
 */
export const HOLDS_KEY = 'holds.json.gz';

/** The JSON inside `holds.json.gz` (erase reads it streamed: holdsContain). */
export interface Holds {
  ids: string[];
  users: string[];
}

const mac = (key: Buffer, kind: 'id' | 'user', v: string) => createHmac('sha256', key).update(`${kind}:${v}`, 'utf8').digest('hex').slice(0, 16);
export const idMac = (key: Buffer, id: string) => mac(key, 'id', id);
export const userMac = (key: Buffer, user: string) => mac(key, 'user', user);

/**
 * `holds.json.gz` of a snapshot's SQLite copy, streamed: `{"ids":[…],"users":[…]}`, the hashes of the ids in the
 * warden memory table and mem0's history, and of the users (memory table, mem0's messages), each list deduplicated
 * and sorted. Memory stays flat whatever the store's size: the ids' hashes are deduplicated and sorted by SQLite
 * (its sorter spills to temp files) and streamed into gzip; only the users (one per person, far fewer) are held.
 * The snapshot file is opened read-only and never written.
 */
export async function* holdsStream(dbFile: string, key: Buffer): AsyncIterable<Buffer> {
  async function* json(): AsyncIterable<string> {
    const copy = readSnapshotCopy(dbFile);
    const db = copy.db;
    try {
      db.pragma('temp_store = FILE');
      db.function('mw_id_mac', { deterministic: true }, (v: unknown) => idMac(key, String(v)));
      const tables = new Set((db.prepare(`SELECT name FROM sqlite_master WHERE type = 'table'`).all() as { name: string }[]).map((r) => r.name));
      const cols = (t: string) => new Set((db.prepare(`SELECT name FROM pragma_table_info(?)`).all(t) as { name: string }[]).map((r) => r.name));
      const users = new Set<string>();
      const each = (sql: string, f: (v: string) => void) => {
        for (const v of db.prepare(sql).pluck().iterate() as Iterable<unknown>) if (v !== null && v !== undefined) f(String(v));
      };
      const idSources: string[] = [];
      if (tables.has('memory')) {
        idSources.push(`SELECT id AS v FROM memory`);
        const c = cols('memory');
        if (c.has('user_id')) each(`SELECT DISTINCT user_id FROM memory`, (v) => users.add(userMac(key, v)));
        else if (c.has('subject')) each(`SELECT DISTINCT subject FROM memory`, (v) => users.add(userMac(key, v)));
      }
      if (tables.has('history') && cols('history').has('memory_id')) idSources.push(`SELECT memory_id AS v FROM history`);
      if (tables.has('messages') && cols('messages').has('session_scope')) {
        each(`SELECT DISTINCT session_scope FROM messages`, (scope) => {
          for (const part of scope.split('&')) if (part.startsWith('user_id=')) users.add(userMac(key, part.slice(8)));
        });
      }
      yield '{"ids":[';
      if (idSources.length > 0) {
        const sql = `SELECT DISTINCT mw_id_mac(v) AS h FROM (${idSources.join(' UNION ALL ')}) WHERE v IS NOT NULL ORDER BY h`;
        let batch: string[] = [];
        let first = true;
        for (const h of db.prepare(sql).pluck().iterate() as Iterable<string>) {
          batch.push(JSON.stringify(h));
          if (batch.length === 4096) {
            yield (first ? '' : ',') + batch.join(',');
            first = false;
            batch = [];
          }
        }
        if (batch.length > 0) yield (first ? '' : ',') + batch.join(',');
      }
      yield `],"users":${JSON.stringify([...users].sort())}}`;
    } finally {
      copy.close();
    }
  }
  // Started on the first read, torn down (the database closed) when the reader stops, whether or not at the end.
  const source = Readable.from(json());
  const gzip = createGzip();
  pipeline(source, gzip, () => undefined); // an error reaches the reader through gzip
  try {
    for await (const chunk of gzip) yield chunk as Buffer;
  } finally {
    gzip.destroy();
    source.destroy();
  }
}

/**
 * Whether a `holds.json.gz`, streamed, names any of these id hashes or this user hash: read once, in constant
 * memory whatever the snapshot's size (a store of tens of millions of ids makes a holds file of hundreds of MB
 * once unzipped), and always read to its end. Throws a store error naming `what` when the stream is not a holds
 * file, or ends early; an UnverifiedSnapshotError from the source (CheckedTarget.get) is passed on as it is.
 */
export async function holdsContain(source: AsyncIterable<Uint8Array>, want: { ids: ReadonlySet<string>; user?: string | undefined }, what: string): Promise<boolean> {
  const gunzip = createGunzip();
  const input = Readable.from(source);
  pipeline(input, gunzip, () => undefined); // an error reaches the loop below through gunzip
  // Every string in the file is a key ("ids", "users") or a 16-hex-digit hash: a token never spans more than 18
  // characters, so a carry of the unmatched tail joins chunks.
  const token = /"([0-9a-f]{16})"|"(users)"/g;
  let carry = '';
  let head = true;
  let section: 'ids' | 'users' = 'ids';
  let found = false;
  let ended = false;
  try {
    for await (const chunk of gunzip) {
      // Found: read on to the end all the same, so a reader that checks the file (CheckedTarget) checks all of it.
      if (found) continue;
      let text = carry + (chunk as Buffer).toString('latin1');
      if (head) {
        if (text.length < 8) {
          carry = text;
          continue;
        }
        if (!text.startsWith('{"ids":[')) throw new Error('not a holds file');
        head = false;
        text = text.slice(8);
      }
      token.lastIndex = 0;
      let last = 0;
      for (let m = token.exec(text); m !== null; m = token.exec(text)) {
        last = token.lastIndex;
        if (m[2]) section = 'users';
        else if (section === 'ids' ? want.ids.has(m[1]!) : m[1] === want.user) found = true;
      }
      const rest = text.slice(last);
      // What follows the last token is punctuation and at most the start of the next one.
      carry = rest.length > 18 ? rest.slice(-18) : rest;
    }
    ended = !found && carry.endsWith(']}') && section === 'users';
    if (!found && (head || !ended)) throw new Error(head ? 'empty' : 'ends early');
    return found;
  } catch (err) {
    if (err instanceof UnverifiedSnapshotError) throw err; // not the holds memory-warden wrote: erase tests for it
    throw storeError(`${what}: unreadable ${HOLDS_KEY} (${(err as Error).message})`, err);
  } finally {
    gunzip.destroy();
    input.destroy();
  }
}
