/**
 * Erase's byte guarantee on PostgreSQL: after the person's rows are deleted, vacuum what was touched, then read the
 * relation files of the touched tables (heap, TOAST, TOAST index, every index) and look for the person's texts.
 *
 * - `DELETE` leaves the row in its page as a dead tuple. Plain VACUUM prunes it, but compaction moves the live
 *   tuples and does not zero the space freed: the newest deleted tuple's bytes stay in the page's free space (both
 *   servers, test/engines/postgres-bytes.test.ts). VACUUM FULL writes new files and is what erase needs.
 * - Files are read through the server, never from a path the client guesses: `get_raw_page` (pageinspect, through
 *   shared buffers) where the extension is installed, else `pg_read_binary_file` after a CHECKPOINT (superuser or
 *   pg_read_server_files + pg_checkpoint). Both work on Debian's PostgreSQL 15; PGlite 0.5 has no pageinspect and
 *   serves `pg_read_binary_file`.
 * - A compressed value never matches: the columns erase scrubs are stored uncompressed (`SET STORAGE EXTERNAL`,
 *   `uncompressedStorageSql`, called when the schema is created); a column that still allows compression is
 *   reported as unseen, not passed over.
 * - Long needles are looked for as 128-byte pieces at a 128-byte stride (TOAST cuts a value into ~2 kB chunks), so
 *   any surviving run of 255 bytes of one is found; shorter remnants of a long text are found only when given as
 *   needles of their own (the person's name, an email).
 * What no relation file shows (WAL, archives, replicas, dumps, logs, freed disk blocks) is returned as `unseen`,
 * each with how an operator reaches it. Needles are never returned, logged or put in SQL: findings name the index.
 */
import type pg from 'pg';
import { quoteIdent as q } from './copy-describe.js';
import { Writable } from 'node:stream';
import { bytesHits } from '../../text/needles.js';
import { copyOut } from './copy-stream.js';

export type RelationKind = 'heap' | 'toast' | 'toast-index' | 'index';
export type ReadVia = 'pageinspect' | 'server-file';

export interface RelationRead {
  table: string;
  relation: string;
  kind: RelationKind;
  via: ReadVia;
  bytes: number;
}

export interface ByteFinding {
  table: string;
  relation: string;
  kind: RelationKind;
  /** Index into the needles given. */
  needle: number;
  /** Byte offset in the relation's main fork. */
  offset: number;
}

export interface Unseen {
  what: 'wal' | 'wal-archive' | 'replication' | 'dumps-and-backups' | 'server-log' | 'freed-disk-blocks'
    | 'compressed-column' | 'unreadable-relation' | 'short-remnants' | 'unvacuumed-table' | 'earlier-erases';
  /** How an operator reaches it. */
  reach: string;
  facts?: Record<string, string | number | boolean | null>;
}

export interface ByteVerdict {
  /** clean: read every relation, found nothing; found: some needle remains; unverified: something went unread. */
  verdict: 'clean' | 'found' | 'unverified';
  found: ByteFinding[];
  read: RelationRead[];
  unseen: Unseen[];
}

/** SQL that stores `columns` of `schema.table` uncompressed (out of line when long): for the schema's creation. */
export function uncompressedStorageSql(schema: string, table: string, columns: readonly string[]): string[] {
  return columns.map((c) => `ALTER TABLE ${q(schema)}.${q(table)} ALTER COLUMN ${q(c)} SET STORAGE EXTERNAL`);
}

/** Columns (of the tables and of their indexes) whose values the server may compress: a grep cannot see into them. */
export async function compressibleColumns(client: pg.ClientBase, schema: string, tables: readonly string[]):
Promise<{ table: string; relation: string; column: string; storage: string }[]> {
  const res = await client.query<{ table: string; relation: string; column: string; storage: string }>(
    `SELECT t.relname AS table, r.relname AS relation, a.attname AS column, a.attstorage AS storage
       FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace
       JOIN pg_class r ON r.oid = t.oid OR r.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = t.oid)
       JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
      WHERE n.nspname = $1 AND t.relname = ANY($2) AND a.attstorage IN ('x', 'm')
      ORDER BY t.relname, r.relname, a.attnum`, [schema, tables]);
  return res.rows;
}

/** VACUUM FULL (the default: new files, nothing of a deleted row left in them) or plain VACUUM of each table. */
export async function vacuumTouched(client: pg.ClientBase, schema: string, tables: readonly string[], mode: 'full' | 'plain' = 'full'): Promise<void> {
  const opts = mode === 'full' ? '(FULL)' : '(INDEX_CLEANUP ON, DISABLE_PAGE_SKIPPING)';
  for (const t of new Set(tables)) await client.query(`VACUUM ${opts} ${q(schema)}.${q(t)}`);
}

interface Relation {
  table: string;
  relation: string;
  kind: RelationKind;
  oid: number;
  path: string;
  blocks: number;
}

async function relationsOf(client: pg.ClientBase, schema: string, tables: readonly string[]): Promise<Relation[]> {
  const res = await client.query<Relation>(
    `WITH t AS (SELECT c.oid, c.relname, c.reltoastrelid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = $1 AND c.relname = ANY($2) AND c.relkind = 'r'),
          r AS (SELECT relname AS table, oid AS roid, 'heap' AS kind, 0 AS ord FROM t
                UNION ALL SELECT relname, reltoastrelid, 'toast', 1 FROM t WHERE reltoastrelid <> 0
                UNION ALL SELECT t.relname, i.indexrelid, 'toast-index', 2 FROM t JOIN pg_index i ON i.indrelid = t.reltoastrelid
                UNION ALL SELECT t.relname, i.indexrelid, 'index', 3 FROM t JOIN pg_index i ON i.indrelid = t.oid)
     SELECT r.table, c.relname AS relation, r.kind, r.roid::int AS oid, pg_relation_filepath(r.roid) AS path,
            (pg_relation_size(r.roid) / current_setting('block_size')::int)::int AS blocks
       FROM r JOIN pg_class c ON c.oid = r.roid ORDER BY r.table, r.ord, c.relname`, [schema, tables]);
  return res.rows;
}

/** The byte patterns to look for, each with the needle it came from (long needles as overlapping pieces). */
export function needlePatterns(needles: readonly string[]): { needle: number; bytes: Buffer }[] {
  const out: { needle: number; bytes: Buffer }[] = [];
  needles.forEach((text, needle) => {
    const b = Buffer.from(text, 'utf8');
    if (b.length === 0) return;
    if (b.length <= 256) {
      out.push({ needle, bytes: b });
      return;
    }
    for (let i = 0; i < b.length; i += 128) out.push({ needle, bytes: b.subarray(Math.min(i, b.length - 128), Math.min(i, b.length - 128) + 128) });
  });
  return out;
}

async function chooseVia(client: pg.ClientBase, wanted: ReadVia | 'auto'): Promise<ReadVia | undefined> {
  const can = await client.query<{ pageinspect: boolean; files: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pageinspect')
              AND has_function_privilege('get_raw_page(text, text, bigint)', 'EXECUTE') AS pageinspect,
            has_function_privilege('pg_read_binary_file(text, bigint, bigint, boolean)', 'EXECUTE') AS files`);
  const { pageinspect, files } = can.rows[0]!;
  if (wanted === 'pageinspect') return pageinspect ? 'pageinspect' : undefined;
  if (wanted === 'server-file') return files ? 'server-file' : undefined;
  return pageinspect ? 'pageinspect' : files ? 'server-file' : undefined;
}

/**
 * Reads the relation's main fork in pieces of up to 128 blocks, in order; the next piece is asked for before this one
 * is handed over, so the server reads it while the caller searches this one.
 */
async function* readRelation(client: pg.ClientBase, rel: Relation, via: ReadVia): AsyncGenerator<Buffer> {
  const step = 128;
  const { segBlocks, blockSize } = via === 'server-file' ? await segmentBlocks(client) : { segBlocks: 0, blockSize: 0 };
  const ask = (b: number): { n: number; piece: Promise<Buffer | null> } => {
    let n = Math.min(step, rel.blocks - b);
    if (via === 'pageinspect') {
      const piece = client.query<{ p: Buffer }>(
        `SELECT get_raw_page($1::regclass::text, 'main', g) AS p FROM generate_series($2::bigint, $3::bigint) g ORDER BY g`,
        [rel.oid, b, b + n - 1]).then((res) => Buffer.concat(res.rows.map((r) => r.p)));
      return { n, piece };
    }
    // A relation's file is cut into segments (path, path.1, ...) of segment_size blocks; a read stays in one.
    const seg = Math.floor(b / segBlocks);
    n = Math.min(n, (seg + 1) * segBlocks - b);
    const file = seg === 0 ? rel.path : `${rel.path}.${seg}`;
    const piece = readFileBinary(client, file, (b - seg * segBlocks) * blockSize, n * blockSize);
    return { n, piece };
  };
  let next = rel.blocks > 0 ? ask(0) : undefined;
  let b = 0;
  try {
    while (next) {
      const { n, piece } = next;
      const got = await piece;
      b += n;
      next = b < rel.blocks ? ask(b) : undefined;
      if (got) yield got;
    }
  } finally {
    await next?.piece.catch(() => undefined); // the connection is left with no answer pending
  }
}

/** A relation file's segment (segment_size, in blocks) and block size, as this server has them. */
async function segmentBlocks(client: pg.ClientBase): Promise<{ segBlocks: number; blockSize: number }> {
  const r = await client.query<{ s: string; b: string }>(
    `SELECT (SELECT setting FROM pg_settings WHERE name = 'segment_size') AS s, current_setting('block_size') AS b`);
  return { segBlocks: Number(r.rows[0]!.s), blockSize: Number(r.rows[0]!.b) };
}

/** One COPY's bytes gathered (the sink of copyOut). */
class Gather extends Writable {
  readonly parts: Buffer[] = [];
  override _write(chunk: Buffer, _enc: BufferEncoding, cb: () => void): void {
    this.parts.push(chunk);
    cb();
  }
}

/**
 * `length` bytes of a server file from `offset` (fewer at its end; null when it is gone), as COPY's binary format
 * carries them: the bytes themselves. A query's result would carry them hex-encoded, which the server encodes and
 * the client decodes (twice the bytes, and a string of them) and which `pg` cannot take in binary format unchanged.
 */
async function readFileBinary(client: pg.ClientBase, file: string, offset: number, length: number): Promise<Buffer | null> {
  const sink = new Gather();
  await copyOut(client, `COPY (SELECT pg_read_binary_file(${literal(file)}, ${Math.floor(offset)}, ${Math.floor(length)}, true)) TO STDOUT (FORMAT binary)`, sink);
  return copyBinaryField(Buffer.concat(sink.parts));
}

/** A file path as a SQL literal (standard_conforming_strings: a quote doubled; E'' for a backslash). */
function literal(s: string): string {
  if (s.includes('\\')) return `E'${s.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;
  return `'${s.replace(/'/g, "''")}'`;
}

const COPY_SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');

/** The one field of the one row of a binary COPY (header, field count 1, length, bytes, trailer), or null. */
export function copyBinaryField(buf: Buffer): Buffer | null {
  if (buf.length < 19 || !buf.subarray(0, 11).equals(COPY_SIGNATURE)) throw new Error('COPY binary: no header');
  let at = 19 + buf.readUInt32BE(15);
  const fields = buf.readInt16BE(at);
  if (fields !== 1) throw new Error(`COPY binary: ${fields} fields where one was asked for`);
  const len = buf.readInt32BE(at + 2);
  at += 6;
  if (len < 0) return null;
  if (at + len + 2 > buf.length || buf.readInt16BE(at + len) !== -1) throw new Error('COPY binary: truncated');
  return buf.subarray(at, at + len);
}

/**
 * Looks for every needle in the touched tables' relation files. `client` must not be in a transaction (CHECKPOINT).
 * Run after `vacuumTouched`: before it, a deleted row is still in its page and is found.
 */
export async function verifyBytesGone(
  client: pg.ClientBase,
  opts: { schema: string; tables: readonly string[]; needles: readonly string[]; via?: ReadVia | 'auto' },
): Promise<ByteVerdict> {
  const { schema, tables } = opts;
  const patterns = needlePatterns(opts.needles);
  const overlap = patterns.reduce((m, p) => Math.max(m, p.bytes.length), 0) - 1; // not Math.max(...): 300,000 arguments overflow the stack
  const rels = await relationsOf(client, schema, tables);
  const via = await chooseVia(client, opts.via ?? 'auto');
  // The files must hold what the buffers hold: the server checkpoints while the needles are indexed here.
  const checkpoint = via === 'server-file' ? client.query('CHECKPOINT') : undefined;
  checkpoint?.catch(() => undefined); // awaited below
  const find = bytesHits(patterns.map((p) => p.bytes));
  await checkpoint;
  // Each needle's patterns, so that a needle found in a relation is not looked for again in it (the set of its
  // patterns grows as needles are found: made anew from every pattern at every piece, it cost patterns x pieces).
  const patternsOf = new Map<number, number[]>();
  patterns.forEach((p, i) => {
    const list = patternsOf.get(p.needle);
    if (list) list.push(i);
    else patternsOf.set(p.needle, [i]);
  });
  const found: ByteFinding[] = [];
  const read: RelationRead[] = [];
  const unseen: Unseen[] = [];
  for (const rel of rels) {
    if (!via) {
      unseen.push({ what: 'unreadable-relation', facts: { table: rel.table, relation: rel.relation, kind: rel.kind },
        reach: 'grant the role pg_read_server_files and pg_checkpoint, or install pageinspect (superuser), and verify again' });
      continue;
    }
    let offset = 0;
    let tail: Buffer = Buffer.alloc(0);
    const hit = new Set<number>();
    const skip = new Set<number>();
    for await (const piece of readRelation(client, rel, via)) {
      const window = tail.length ? Buffer.concat([tail, piece]) : piece;
      const base = offset - tail.length;
      // One pass over the window for every pattern (an erase of thousands of rows looks for thousands of texts).
      for (const h of find(window, skip)) {
        const p = patterns[h.needle]!;
        if (hit.has(p.needle)) continue;
        hit.add(p.needle);
        for (const i of patternsOf.get(p.needle)!) skip.add(i);
        found.push({ table: rel.table, relation: rel.relation, kind: rel.kind, needle: p.needle, offset: base + h.at });
      }
      offset += piece.length;
      tail = window.subarray(Math.max(0, window.length - overlap));
    }
    read.push({ table: rel.table, relation: rel.relation, kind: rel.kind, via, bytes: offset });
  }
  for (const c of await compressibleColumns(client, schema, tables)) {
    if (await indexKeysUncompressed(client, schema, c)) continue;
    unseen.push({ what: 'compressed-column', facts: { ...c },
      reach: `store it uncompressed (ALTER TABLE ... ALTER COLUMN ${c.column} SET STORAGE EXTERNAL, then VACUUM FULL) so that a remnant can be seen` });
  }
  if (opts.needles.some((n) => Buffer.byteLength(n) > 256)) {
    unseen.push({ what: 'short-remnants', reach: 'a run shorter than 255 bytes of a long text is found only when given as a needle of its own (a name, an email)' });
  }
  unseen.push(...await beyondTheFiles(client));
  const verdict = found.length ? 'found' : unseen.some((u) => u.what === 'unreadable-relation' || u.what === 'compressed-column') ? 'unverified' : 'clean';
  return { verdict, found, read, unseen };
}

/**
 * An index expression column (`expr`: PgVector's btree indexes on `metadata->>'thread_id'`) has the storage of its
 * type, which ALTER cannot change; but the server compresses an index key only when it is longer than
 * TOAST_INDEX_TARGET (block_size / 16 bytes). When no row's key is that long, nothing in the index is compressed and
 * the grep sees every key: not unseen.
 */
async function indexKeysUncompressed(client: pg.ClientBase, schema: string, c: { table: string; relation: string; column: string }): Promise<boolean> {
  if (c.relation === c.table) return false;
  const def = await client.query<{ expr: string | null; target: number }>(
    `SELECT pg_get_indexdef(i.indexrelid, a.attnum, true) AS expr, current_setting('block_size')::int / 16 AS target
       FROM pg_index i JOIN pg_class r ON r.oid = i.indexrelid JOIN pg_namespace n ON n.oid = r.relnamespace
       JOIN pg_attribute a ON a.attrelid = r.oid AND a.attname = $3
      WHERE n.nspname = $1 AND r.relname = $2 AND i.indexprs IS NOT NULL AND i.indkey[a.attnum - 1] = 0`, [schema, c.relation, c.column]);
  const d = def.rows[0];
  if (!d?.expr) return false;
  // The server's own text of the expression, evaluated over the table's rows as the index was built from them.
  const longest = await client.query<{ n: number | null }>(`SELECT max(pg_column_size((${d.expr}))) AS n FROM ${q(schema)}.${q(c.table)}`);
  return (longest.rows[0]?.n ?? 0) < d.target - 8;
}

/** What holds the texts outside the relation files, with the server's own facts about each. */
async function beyondTheFiles(client: pg.ClientBase): Promise<Unseen[]> {
  const s = await client.query<Record<string, string | null>>(
    `SELECT pg_is_in_recovery()::text AS standby,
            CASE WHEN NOT pg_is_in_recovery() THEN pg_current_wal_lsn()::text END AS lsn,
            CASE WHEN NOT pg_is_in_recovery() THEN pg_walfile_name(pg_current_wal_lsn()) END AS segment,
            current_setting('wal_level') AS wal_level, current_setting('wal_keep_size') AS wal_keep_size,
            current_setting('max_wal_size') AS max_wal_size, current_setting('archive_mode') AS archive_mode,
            current_setting('log_statement') AS log_statement,
            (SELECT count(*) FROM pg_stat_replication)::text AS replicas,
            (SELECT count(*) FROM pg_replication_slots)::text AS slots`);
  const f = s.rows[0]!;
  const out: Unseen[] = [
    { what: 'wal', facts: { segment: f.segment ?? null, lsn: f.lsn ?? null, wal_keep_size: f.wal_keep_size ?? null, max_wal_size: f.max_wal_size ?? null },
      reach: 'the WAL in pg_wal/ holds the rows as they were written (inserts, full-page images) until checkpoints recycle those segments; pg_waldump reads them; SELECT pg_switch_wal() then CHECKPOINT moves recycling on' },
    { what: 'dumps-and-backups', reach: 'pg_dump files, pg_basebackup copies and disk snapshots made by others before the erase are not visible from the server: the operator\'s backup catalogue' },
    { what: 'freed-disk-blocks', reach: 'the files VACUUM FULL replaced are unlinked, not overwritten: the blocks stay on the disk until reused (encrypted storage, or TRIM on SSDs)' },
  ];
  if (f.archive_mode !== 'off') out.push({ what: 'wal-archive', facts: { archive_mode: f.archive_mode ?? null }, reach: 'archive_command / archive_library copied WAL segments elsewhere: they keep the texts until the archive is pruned' });
  if (Number(f.replicas) > 0 || Number(f.slots) > 0) {
    out.push({ what: 'replication', facts: { replicas: Number(f.replicas), slots: Number(f.slots), lsn: f.lsn ?? null },
      reach: 'a physical replica replays the DELETE and VACUUM: verify on it (pg_read_binary_file works on a hot standby) once pg_last_wal_replay_lsn() passes lsn; a logical subscriber is a database of its own: erase there' });
  } else {
    out.push({ what: 'replication', facts: { replicas: 0, slots: 0 }, reach: 'no replica is connected now; one that was disconnected replays the erase when it reconnects, or keeps the texts if it never does' });
  }
  if (f.log_statement === 'all' || f.log_statement === 'mod') {
    out.push({ what: 'server-log', facts: { log_statement: f.log_statement }, reach: 'the server log recorded the statements that wrote the texts: log_directory on the server' });
  }
  return out;
}
