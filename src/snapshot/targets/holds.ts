import { createHmac } from 'node:crypto';
import { closeSync, createReadStream, mkdtempSync, openSync, readSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable, pipeline } from 'node:stream';
import { streamToNewFile } from '../../core/write-file.js';
import { createGunzip, createGzip } from 'node:zlib';
import type Database from 'better-sqlite3';
import { readSnapshotCopy } from '../read-copy.js';
import { storeError } from '../../core/errors.js';
import { UnverifiedSnapshotError, type ObjectDigest } from './types.js';
import { openRegularFile } from '../../core/read-file.js';
import { eraseKeyId } from '../../erase/key.js';
import { engineFor } from '../../engines/registry.js';
import type { TableRowsWatch } from '../../engines/contract.js';
import { FILE_MODE, fsyncPath } from '../layout.js';
import { HOLDS_FILE, HOLDS_FORMAT, type HoldsEntry, type Manifest } from '../manifest.js';
import { checkedObject, hashing } from './digest.js';
import { hmac64, hmac64Into, hmacWords, type HmacWords } from './hmac64.js';
import { endianness } from 'node:os';
import { LAYOUTS } from '../../layouts/registry.js';
import type { CopyNames, CopyValue } from '../../layouts/contract.js';

/**
 * What a snapshot holds, as keyed hashes: the memory ids and the users in its SQLite copy, each as the first 64
 * bits of HMAC-SHA256(erase key, "id:…" / "user:…"). Uploaded beside the snapshot as `holds.json.gz` so erase can
 * find the remote snapshots that hold a person's data without reading (or being able to read) their content. The
 * key stays on the machine (erase.key beside the state db): the hashes cannot be checked against guessed ids
 * without it.
 */
export const HOLDS_KEY = HOLDS_FILE;

/** The JSON inside `holds.json.gz` (erase reads it streamed: holdsContain). */
export interface Holds {
  ids: string[];
  users: string[];
}

const mac = (key: Buffer, kind: 'id' | 'user', v: string) => createHmac('sha256', key).update(`${kind}:${v}`, 'utf8').digest().toString('hex', 0, 8);
/** Each key's id hash (src/snapshot/targets/hmac64.ts): its midstates made once, not a hash object per id. */
const idMacs = new WeakMap<Buffer, (id: string) => bigint>();
export const idMac = (key: Buffer, id: string) => {
  let f = idMacs.get(key);
  if (!f) idMacs.set(key, (f = hmac64(key, 'id:')));
  return hex64(f(id));
};
/**
 * `(id, out, at)`: idMac's eight bytes (its 16 hex digits are those bytes) written into `out` at `at`, for many ids
 * under one key with no object made per id.
 */
export const idMacInto = (key: Buffer) => hmac64Into(key, 'id:');
export const userMac = (key: Buffer, user: string) => mac(key, 'user', user);

/** A keyed hash as holds.ts writes it (16 hex digits) from its 64 bits. */
const hex64 = (v: bigint) => v.toString(16).padStart(16, '0');

/**
 * Hashes are sorted in memory in runs of this many (8 bytes each: 16 MB); a copy holding more ids spills each
 * sorted run to a temp file and merges them, so memory stays flat whatever the store's size.
 */
const RUN = 1 << 21;
const LITTLE_ENDIAN = endianness() === 'LE';
/** How many hashes holds.json is written out a piece at a time. */
const BLOCK_OUT = 1 << 16;
const HEX = Buffer.from('0123456789abcdef', 'latin1');

/** `"…"` of each hash (its 16 hex digits, as hex64 writes them) joined by commas, after one when `comma`. */
function hexList(hashes: BigUint64Array, comma: boolean): Buffer {
  const out = Buffer.allocUnsafe(hashes.length * 19 - (comma ? 0 : 1));
  let o = 0;
  const write = (hi: number, lo: number): void => {
    out[o++] = 0x22;
    for (let s = 28; s >= 0; s -= 4) out[o++] = HEX[(hi >>> s) & 15]!;
    for (let s = 28; s >= 0; s -= 4) out[o++] = HEX[(lo >>> s) & 15]!;
    out[o++] = 0x22;
  };
  const words = LITTLE_ENDIAN ? new Uint32Array(hashes.buffer, hashes.byteOffset, hashes.length * 2) : undefined;
  for (let i = 0; i < hashes.length; i++) {
    if (comma || i > 0) out[o++] = 0x2c;
    if (words) write(words[i * 2 + 1]!, words[i * 2]!);
    else write(Number(hashes[i]! >> 32n), Number(hashes[i]! & 0xffffffffn));
  }
  return out;
}

/**
 * The keyed hashes of ids handed over one by one (as a snapshot's rows stream by), kept as sortedMacs keeps them:
 * sorted runs of up to `runSize` in memory, spilled beyond; read once, sorted and deduplicated, by `sorted()`.
 */
export class IdMacs {
  private run: BigUint64Array;
  /** The run's words: each hash written as two 32-bit halves, no bigint made per id (little-endian order). */
  private words: Uint32Array | undefined;
  private n = 0;
  private readonly mac: HmacWords;
  private spill: { fd: number; runs: number[] } | undefined;
  constructor(key: Buffer, private readonly runSize = RUN) {
    this.run = new BigUint64Array(runSize);
    this.words = LITTLE_ENDIAN ? new Uint32Array(this.run.buffer) : undefined;
    this.mac = hmacWords(key, 'id:'); // idMac's 64 bits
  }
  add(id: string): void {
    this.keep(this.mac.text(id));
  }
  /** The id whose UTF-8 is `buf[from..to)`. */
  addBytes(buf: Uint8Array, from: number, to: number): void {
    this.keep(this.mac.bytes(buf, from, to));
  }
  private keep(s: Int32Array): void {
    if (this.words) {
      this.words[this.n * 2] = s[1]!;
      this.words[this.n * 2 + 1] = s[0]!;
      this.n++;
    } else this.run[this.n++] = (BigInt(s[0]! >>> 0) << 32n) | BigInt(s[1]! >>> 0);
    if (this.n === this.runSize) this.flush();
  }
  private flush(): void {
    const sorted = this.run.subarray(0, this.n).sort();
    if (!this.spill) {
      const dir = mkdtempSync(join(tmpdir(), 'mw-holds-'));
      const path = join(dir, 'runs');
      const fd = openSync(path, 'wx+', 0o600);
      rmSync(dir, { recursive: true, force: true });
      this.spill = { fd, runs: [] };
    }
    const bytes = new Uint8Array(sorted.buffer, sorted.byteOffset, sorted.byteLength);
    for (let off = 0; off < bytes.length; ) off += writeSync(this.spill.fd, bytes, off);
    this.spill.runs.push(this.n);
    this.n = 0;
  }
  /**
   * The hashes sorted and deduplicated, as runs of them in order (each valid until the next is asked for): the run in
   * memory sorted in place, or the spilled runs merged a block at a time.
   */
  *sortedBlocks(): Generator<BigUint64Array> {
    if (!this.spill) {
      const sorted = this.run.subarray(0, this.n).sort();
      let kept = 0;
      for (let i = 0; i < this.n; i++) if (i === 0 || sorted[i] !== sorted[kept - 1]) sorted[kept++] = sorted[i]!;
      for (let at = 0; at < kept; at += BLOCK_OUT) yield sorted.subarray(at, Math.min(kept, at + BLOCK_OUT));
      return;
    }
    if (this.n > 0) this.flush();
    this.run = new BigUint64Array(0);
    this.words = undefined;
    const block = new BigUint64Array(BLOCK_OUT);
    let used = 0;
    for (const v of mergeRuns(this.spill.fd, this.spill.runs)) {
      block[used++] = v;
      if (used === BLOCK_OUT) {
        yield block;
        used = 0;
      }
    }
    if (used > 0) yield block.subarray(0, used);
  }
  /** The spill file closed (the kernel frees it); idempotent. */
  close(): void {
    if (this.spill) closeSync(this.spill.fd);
    this.spill = undefined;
  }
}

/** The sorted runs of a spill file merged, duplicates dropped; each run read a block at a time. */
function* mergeRuns(fd: number, lengths: readonly number[]): Generator<bigint> {
  const BLOCK = 8192;
  const heads = lengths.map((len, i) => {
    const start = lengths.slice(0, i).reduce((a, b) => a + b, 0);
    return { pos: start, end: start + len, buf: new BigUint64Array(BLOCK), at: 0, have: 0 };
  });
  type Head = (typeof heads)[number];
  const fill = (h: Head): boolean => {
    if (h.at < h.have) return true;
    const count = Math.min(BLOCK, h.end - h.pos);
    if (count <= 0) return false;
    const bytes = new Uint8Array(h.buf.buffer, 0, count * 8);
    for (let off = 0; off < bytes.length; ) {
      const got = readSync(fd, bytes, off, bytes.length - off, (h.pos * 8) + off);
      if (got === 0) throw new Error('holds: a sorted run ended early');
      off += got;
    }
    h.pos += count;
    h.at = 0;
    h.have = count;
    return true;
  };
  const live = heads.filter(fill);
  let last: bigint | undefined;
  while (live.length > 0) {
    let min = 0;
    for (let i = 1; i < live.length; i++) if (live[i]!.buf[live[i]!.at]! < live[min]!.buf[live[min]!.at]!) min = i;
    const h = live[min]!;
    const v = h.buf[h.at++]!;
    if (v !== last) yield v;
    last = v;
    if (!fill(h)) live.splice(min, 1);
  }
}

/** How many ids idsInPages reads at a time. */
const ID_PAGE = 16384;

/**
 * The memory table's ids a page at a time off an index that holds them in binary order (the warden layout's primary
 * key), each page one call: a third of the CPU of a step per row. Null when no such index serves the query (a
 * case-blind one would skip ids that differ only in case): the caller reads them row by row. Each page starts after
 * the last id of the one before, so an id repeated is read once (the holds drop repeats anyway), and nulls not at all.
 */
function idsInPages(db: Database.Database): (() => Iterable<unknown>) | null {
  const NEXT = `SELECT id FROM memory WHERE id > ? COLLATE BINARY ORDER BY id COLLATE BINARY LIMIT ${ID_PAGE}`;
  const plan = (db.prepare(`EXPLAIN QUERY PLAN ${NEXT}`).all('') as { detail: string }[]).map((r) => r.detail).join('; ');
  if (!/USING COVERING INDEX/.test(plan) || /TEMP B-TREE/.test(plan)) return null;
  return function* () {
    const first = db.prepare(`SELECT id FROM memory WHERE id IS NOT NULL ORDER BY id COLLATE BINARY LIMIT ${ID_PAGE}`).pluck().safeIntegers(true);
    const next = db.prepare(NEXT).pluck().safeIntegers(true);
    for (let page = first.all() as unknown[]; ; page = next.all(page.at(-1)) as unknown[]) {
      yield* page;
      if (page.length < ID_PAGE) return;
    }
  };
}

/**
 * What a snapshot's holds are made of, read from its copy: every id (hashed as it is read, never held), the people
 * (one per person, far fewer: held as text), and what to close once read.
 */
export interface HoldsValues {
  /** The ids, or their hashes already gathered. */
  ids: Iterable<unknown> | IdMacs;
  users: Iterable<string>;
  close(): void;
}

/** A copy's own names (Layout.copyNames) as SQL: the table and the expressions giving its ids, its person. */
export interface CopyNamesIn {
  table: string;
  ids: string[];
  user?: string;
  /** A column whose `&`-joined parts name the person as `user_id=<user>`. */
  scoped?: string;
}

const quote = (name: string) => `"${name.replace(/"/g, '""')}"`;

/**
 * What every layout says names a memory or a person in a copy (Layout.copyNames), resolved against this copy's
 * tables and columns: whatever layout wrote the file, what it names is read, and what it lacks is passed over.
 */
export function copyNamesIn(db: Database.Database): CopyNamesIn[] {
  const tables = db.prepare(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'`).pluck().all() as string[];
  const colsOf = new Map(tables.map((t) => [t, new Set(db.prepare(`SELECT name FROM pragma_table_info(?)`).pluck().all(t) as string[])]));
  const expr = (v: CopyValue) => (v.json === undefined ? quote(v.column)
    : `CASE WHEN json_valid(${quote(v.column)}) THEN json_extract(${quote(v.column)}, '$.${v.json}') END`);
  const out: CopyNamesIn[] = [];
  for (const n of Object.values(LAYOUTS).flatMap((l) => l.copyNames)) {
    const matching = typeof n.table === 'string' ? (colsOf.has(n.table) ? [n.table] : [])
      : tables.filter((t) => (n.table as { columns: readonly string[] }).columns.every((c) => colsOf.get(t)!.has(c)));
    for (const table of matching) {
      const cols = colsOf.get(table)!;
      const user = n.users?.find((v) => cols.has(v.column));
      out.push({
        table, ids: n.ids.filter((v) => cols.has(v.column)).map(expr),
        ...(user ? { user: expr(user) } : {}),
        ...(n.scopedUsers && cols.has(n.scopedUsers) ? { scoped: quote(n.scopedUsers) } : {}),
      });
    }
  }
  return out;
}

/**
 * The ids and users of a snapshot's SQLite copy, as every layout names them (copyNamesIn): the warden memory table's
 * ids and users (user_id, else subject), mem0's history ids and its messages' users, Mastra's threads, messages,
 * resources, observations and embeddings with the resource ids that are its people. The copy is opened read-only
 * and never written.
 */
function sqliteValues(dbFile: string): HoldsValues {
  const copy = readSnapshotCopy(dbFile);
  const db = copy.db;
  try {
    const users = new Set<string>();
    const each = (sql: string, f: (v: string) => void) => {
      for (const v of db.prepare(sql).pluck().iterate() as Iterable<unknown>) if (v !== null && v !== undefined) f(Buffer.isBuffer(v) ? v.toString('utf8') : String(v));
    };
    const idSources: (string | (() => Iterable<unknown>))[] = [];
    for (const n of copyNamesIn(db)) {
      for (const id of n.ids) {
        // The warden table's primary key is read a page at a time off its index (tens of millions of rows).
        const paged = n.table === 'memory' && id === '"id"' ? idsInPages(db) : null;
        idSources.push(paged ?? `SELECT ${id} FROM ${quote(n.table)}`);
      }
      if (n.user) each(`SELECT DISTINCT ${n.user} FROM ${quote(n.table)}`, (v) => users.add(v));
      if (n.scoped) {
        each(`SELECT DISTINCT ${n.scoped} FROM ${quote(n.table)}`, (scope) => {
          for (const part of scope.split('&')) if (part.startsWith('user_id=')) users.add(part.slice(8));
        });
      }
    }
    const ids = (function* () {
      for (const source of idSources) yield* typeof source === 'string' ? db.prepare(source).pluck().iterate() as Iterable<unknown> : source();
    })();
    return { ids, users, close: () => copy.close() };
  } catch (err) {
    copy.close();
    throw err;
  }
}

/**
 * `holds.json.gz` of a snapshot's SQLite copy, streamed: `{"ids":[…],"users":[…]}`, the hashes of the ids in the
 * warden memory table and mem0's history, and of the users (memory table, mem0's messages), each list deduplicated
 * and sorted. The ids are read once, each hashed as it is read, and the hashes sorted as 64-bit numbers (sortedMacs:
 * memory flat whatever the store's size); only the users (one per person, far fewer) are held as text. The
 * snapshot file is opened read-only and never written. `runSize`: how many hashes are sorted in memory (tests).
 */
export function holdsStream(dbFile: string, key: Buffer, runSize = RUN): AsyncIterable<Buffer> {
  return holdsOf(async () => sqliteValues(dbFile), key, runSize);
}

/** `holds.json.gz` of whatever copy `open` reads (holdsStream's, for any kind of copy): opened on the first read. */
export async function* holdsOf(open: () => Promise<HoldsValues>, key: Buffer, runSize = RUN): AsyncIterable<Buffer> {
  async function* json(): AsyncIterable<string | Buffer> {
    const values = await open();
    try {
      const users = new Set<string>();
      for (const u of values.users) users.add(userMac(key, u));
      yield '{"ids":[';
      const macs = values.ids instanceof IdMacs ? values.ids : new IdMacs(key, runSize);
      try {
        if (macs !== values.ids) for (const v of values.ids as Iterable<unknown>) if (v !== null && v !== undefined) macs.add(String(v));
        let first = true;
        for (const block of macs.sortedBlocks()) {
          yield hexList(block, !first);
          first = false;
        }
      } finally {
        if (macs !== values.ids) macs.close();
      }
      yield `],"users":${JSON.stringify([...users].sort())}}`;
    } finally {
      values.close();
    }
  }
  // Started on the first read, torn down (the copy closed) when the reader stops, whether or not at the end.
  const source = Readable.from(json());
  // Level 1: the file is hex hashes, which no level packs much below half (zlib's default level took three times
  // the CPU for 2% less, as long as the keyed hashes themselves).
  const gzip = createGzip({ level: 1 });
  pipeline(source, gzip, () => undefined); // an error reaches the reader through gzip
  try {
    for await (const chunk of gzip) yield chunk as Buffer;
  } finally {
    gzip.destroy();
    source.destroy();
  }
}

/**
 * Make a snapshot's holds once, as it is taken: holdsStream of its SQLite copy written to `dest` (a new file, the
 * owner's only), hashed as it is written and fsynced. What the manifest records of it (`holds`).
 */
export async function writeHolds(holds: AsyncIterable<Buffer>, key: Buffer, dest: string): Promise<HoldsEntry> {
  const h = hashing(holds);
  await streamToNewFile(dest, { mode: FILE_MODE }, h.stream);
  fsyncPath(dest);
  return { file: HOLDS_FILE, keyId: eraseKeyId(key), format: HOLDS_FORMAT, ...h.digest() };
}

/**
 * The holds of a local snapshot folder under this key, streamed: the file made when it was taken, checked against
 * its manifest as it is read (a file that differs fails the reader, nothing is taken for it), or, for a snapshot
 * made before holds were (or under another key), made now from its SQLite copy.
 */
export function snapshotHolds(dir: string, manifest: Manifest, key: Buffer): AsyncIterable<Uint8Array> {
  const made: HoldsEntry | undefined = manifest.holds;
  if (!made || made.keyId !== eraseKeyId(key) || !holdsComplete(made.format, manifest)) return copyHolds(dir, manifest, key);
  const path = join(dir, made.file);
  const want: ObjectDigest = { bytes: made.bytes, sha256: made.sha256 };
  return (async function* () {
    const read = createReadStream('', { fd: openRegularFile(path), highWaterMark: 1024 * 1024 });
    try {
      yield* checkedObject(read, want, path);
    } finally {
      read.destroy();
    }
  })();
}

/** The tables a layout names its ids or people in that holds before HOLDS_FORMAT did not read. */
const UNREAD_BEFORE_FORMAT_2 = (): string[] => Object.values(LAYOUTS).flatMap((l) => l.copyNames)
  .map((n) => n.table).filter((t): t is string => typeof t === 'string' && !['memory', 'history', 'messages'].includes(t));

/**
 * Whether holds of this format name everything the snapshot's copy names: those made before HOLDS_FORMAT do unless
 * the copy has a table they did not read (a Mastra store's: they named nobody of it). A database's tables were
 * always read whole.
 */
export function holdsComplete(format: unknown, manifest: Pick<Manifest, 'sqlite'>): boolean {
  if (format === HOLDS_FORMAT || !manifest.sqlite) return true;
  const unread = new Set(UNREAD_BEFORE_FORMAT_2());
  return !Object.keys(manifest.sqlite.tables ?? {}).some((t) => unread.has(t));
}

/**
 * The holds of a snapshot folder's copy, made now: its SQLite copy's, or its tables' as their engine reads them back
 * (src/engines/contract.ts, EngineTables.values): the memory table's ids, and its users (user_id, else subject).
 */
export function copyHolds(dir: string, manifest: Manifest, key: Buffer): AsyncIterable<Buffer> {
  const side = manifest.vectorTables;
  if (manifest.sqlite && side) {
    // The file's copy names what every layout's copy names; the vector tables beside it, each row's id and the
    // person its payload names (`user_id`).
    const file = join(dir, manifest.sqlite.file);
    return holdsOf(async () => {
      const tables = (await engineFor({ engine: side.engine })).tables;
      if (!tables) throw storeError(`${dir}: its vector tables are of the ${side.engine} engine, which reads no table artifact`);
      const copy = sqliteValues(file);
      const users = new Set(copy.users);
      const extra: string[] = [];
      for (const table of Object.keys(side.tables)) {
        for (const [id, payload] of tables.values(join(dir, side.dir), table, ['id', 'payload'])) {
          if (id) extra.push(id);
          const user = payloadUser(payload ?? null);
          if (user !== undefined) users.add(user);
        }
      }
      return { ids: (function* () { yield* copy.ids as Iterable<unknown>; yield* extra; })(), users, close: () => copy.close() }; // sqliteValues: an iterable
    }, key);
  }
  if (manifest.sqlite) return holdsStream(join(dir, manifest.sqlite.file), key);
  const part = manifest.tables!;
  return holdsOf(async () => {
    const tables = (await engineFor({ engine: part.engine })).tables;
    if (!tables) throw storeError(`${dir}: its tables are of the ${part.engine} engine, which reads no table artifact`);
    const folder = join(dir, part.dir);
    const column = (c: string) => (function* () {
      for (const [v] of tables.values(folder, 'memory', [c])) if (v !== null && v !== undefined) yield v;
    })();
    const byUserId = new Set(column('user_id'));
    const users = byUserId.size > 0 ? byUserId : new Set(column('subject'));
    // Every other layout's names (Layout.copyNames) in the tables the artifact has: a Mastra store's threads,
    // messages, resources and PgVector tables; and in the vector tables taken beside them (PgVector's on another
    // server: the ids their metadata names). A table or column an artifact lacks yields nothing.
    const named = [
      ...namedIn(folder, Object.keys(part.tables ?? {}).filter((t) => t !== 'memory')),
      ...(side ? namedIn(join(dir, side.dir), Object.keys(side.tables)) : []),
    ];
    const valuesOf = function* (folder: string, table: string, v: CopyValue) {
      for (const [x] of tables.values(folder, table, [v.column])) {
        if (x === null || x === undefined) continue;
        if (v.json === undefined) {
          yield x;
          continue;
        }
        try {
          const field = (JSON.parse(x) as Record<string, unknown> | null)?.[v.json];
          if (typeof field === 'string') yield field;
        } catch {
          // not JSON: names no one by this field
        }
      }
    };
    for (const { folder: f, table, n } of named) for (const u of n.users ?? []) for (const x of valuesOf(f, table, u)) users.add(x);
    const ids = (function* () {
      yield* column('id');
      for (const { folder: f, table, n } of named) for (const v of n.ids) yield* valuesOf(f, table, v);
    })();
    return { ids, users, close: () => {} };
  }, key);
}

/** Each layout's names (Layout.copyNames) that may be in these tables of an artifact's folder: by name, else by shape. */
function namedIn(folder: string, present: readonly string[]): { folder: string; table: string; n: CopyNames }[] {
  const all = Object.values(LAYOUTS).flatMap((l) => l.copyNames);
  return all.flatMap((n) => (typeof n.table === 'string'
    ? (present.includes(n.table) ? [{ folder, table: n.table, n }] : [])
    : present.filter((t) => !all.some((c) => c.table === t)).map((t) => ({ folder, table: t, n }))));
}

/** The person a vector's JSON payload names (`user_id`, an older port's `userId`), or undefined. */
function payloadUser(payload: string | null): string | undefined {
  if (payload === null) return undefined;
  try {
    const p = JSON.parse(payload) as Record<string, unknown> | null;
    const user = p?.user_id ?? p?.userId;
    return typeof user === 'string' ? user : undefined;
  } catch {
    return undefined;
  }
}

/** What tablesHoldsWatch reads of the rows: a layout whose copies name ids and people only there can use it. */
const WATCHED: CopyNames = { table: 'memory', ids: [{ column: 'id' }], users: [{ column: 'user_id' }, { column: 'subject' }] };

/**
 * Whether a layout's copies name ids and people only where tablesHoldsWatch reads them (the memory table's id, its
 * user_id, else subject): else the holds are made from the artifact (copyHolds), which reads every layout's names.
 */
export function holdsWatchCovers(names: readonly CopyNames[]): boolean {
  return names.length === 1 && JSON.stringify(names[0]) === JSON.stringify(WATCHED);
}

/**
 * The holds of a database's tables made as a snapshot reads them (EngineTables.take's `rows`): copyHolds's, from the
 * same rows, without reading the artifact back, for a layout holdsWatchCovers. `holds()` once the take is done and
 * verified; `close()` in any case.
 */
export function tablesHoldsWatch(key: Buffer, runSize = RUN): { watch: TableRowsWatch; holds(): AsyncIterable<Buffer>; close(): void } {
  const ids = new IdMacs(key, runSize);
  const byUserId = new Set<string>();
  const bySubject = new Set<string>();
  // The last user and subject seen, as bytes: rows of one person come together, and their value is made once.
  const lastUser = new LastBytes();
  const lastSubject = new LastBytes();
  return {
    watch: {
      table: 'memory',
      columns: ['id', 'user_id', 'subject'],
      row([id, user, subject]) {
        if (id !== null && id !== undefined) ids.add(id);
        if (user !== null && user !== undefined) byUserId.add(user);
        if (subject !== null && subject !== undefined) bySubject.add(subject);
      },
      fields(buf, from, to, text) {
        if (from[0]! >= 0) {
          if (plainText(buf, from[0]!, to[0]!)) ids.addBytes(buf, from[0]!, to[0]!);
          else {
            const id = text(buf, from[0]!, to[0]!);
            if (id !== null) ids.add(id);
          }
        }
        if (from[1]! >= 0 && lastUser.differs(buf, from[1]!, to[1]!)) {
          const user = text(buf, from[1]!, to[1]!);
          if (user !== null) byUserId.add(user);
        }
        if (from[2]! >= 0 && lastSubject.differs(buf, from[2]!, to[2]!)) {
          const subject = text(buf, from[2]!, to[2]!);
          if (subject !== null) bySubject.add(subject);
        }
      },
    },
    holds: () => holdsOf(async () => ({ ids, users: byUserId.size > 0 ? byUserId : bySubject, close: () => ids.close() }), key, runSize),
    close: () => ids.close(),
  };
}

/** Whether `buf[from..to)` is all printable ASCII but the backslash: a table artifact's text that is its value (TableRowsWatch.fields). */
function plainText(buf: Uint8Array, from: number, to: number): boolean {
  for (let i = from; i < to; i++) {
    const c = buf[i]!;
    if (c < 0x20 || c > 0x7e || c === 0x5c) return false;
  }
  return true;
}

/** The bytes of the last value seen of one column, to tell a value seen just before without making it a string. */
class LastBytes {
  private bytes = Buffer.alloc(64);
  private length = -1;
  /** Whether `buf[from..to)` differs from the last bytes given; they become the last. */
  differs(buf: Buffer, from: number, to: number): boolean {
    const n = to - from;
    if (n === this.length) {
      let i = 0;
      while (i < n && buf[from + i] === this.bytes[i]) i++;
      if (i === n) return false;
    }
    if (n > this.bytes.length) this.bytes = Buffer.alloc(n * 2);
    buf.copy(this.bytes, 0, from, to);
    this.length = n;
    return true;
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
