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
import { bytesHits } from '../../text/needles.js';

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

/** Reads the relation's main fork in pieces of up to 128 blocks, in order. */
async function* readRelation(client: pg.ClientBase, rel: Relation, via: ReadVia): AsyncGenerator<Buffer> {
  const step = 128;
  const segBlocks = via === 'server-file' ? await segmentBlocks(client) : 0;
  let b = 0;
  while (b < rel.blocks) {
    let n = Math.min(step, rel.blocks - b);
    if (via === 'pageinspect') {
      const res = await client.query<{ p: Buffer }>(
        `SELECT get_raw_page($1::regclass::text, 'main', g) AS p FROM generate_series($2::bigint, $3::bigint) g ORDER BY g`,
        [rel.oid, b, b + n - 1]);
      yield Buffer.concat(res.rows.map((r) => r.p));
    } else {
      // A relation's file is cut into segments (path, path.1, ...) of segment_size blocks; a read stays in one.
      const seg = Math.floor(b / segBlocks);
      n = Math.min(n, (seg + 1) * segBlocks - b);
      const res = await client.query<{ p: Buffer | null }>(
        `SELECT pg_read_binary_file($1, $2::bigint * current_setting('block_size')::int, $3::bigint * current_setting('block_size')::int, true) AS p`,
        [seg === 0 ? rel.path : `${rel.path}.${seg}`, b - seg * segBlocks, n]);
      if (res.rows[0]!.p) yield res.rows[0]!.p;
    }
    b += n;
  }
}

let segCache: number | undefined;
async function segmentBlocks(client: pg.ClientBase): Promise<number> {
  if (segCache) return segCache;
  const r = await client.query<{ s: string }>(`SELECT setting AS s FROM pg_settings WHERE name = 'segment_size'`);
  segCache = Number(r.rows[0]!.s); // in blocks
  return segCache;
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
  const overlap = Math.max(0, ...patterns.map((p) => p.bytes.length)) - 1;
  const rels = await relationsOf(client, schema, tables);
  const find = bytesHits(patterns.map((p) => p.bytes));
  // The patterns whose needle is found already in this relation: not looked for again in it.
  const hitPatterns = (hit: ReadonlySet<number>) => new Set(patterns.flatMap((p, i) => (hit.has(p.needle) ? [i] : [])));
  const found: ByteFinding[] = [];
  const read: RelationRead[] = [];
  const unseen: Unseen[] = [];
  const via = await chooseVia(client, opts.via ?? 'auto');
  if (via === 'server-file') await client.query('CHECKPOINT'); // the files must hold what the buffers hold
  for (const rel of rels) {
    if (!via) {
      unseen.push({ what: 'unreadable-relation', facts: { table: rel.table, relation: rel.relation, kind: rel.kind },
        reach: 'grant the role pg_read_server_files and pg_checkpoint, or install pageinspect (superuser), and verify again' });
      continue;
    }
    let offset = 0;
    let tail: Buffer = Buffer.alloc(0);
    const hit = new Set<number>();
    for await (const piece of readRelation(client, rel, via)) {
      const window = tail.length ? Buffer.concat([tail, piece]) : piece;
      const base = offset - tail.length;
      // One pass over the window for every pattern (an erase of thousands of rows looks for thousands of texts).
      for (const h of find(window, hitPatterns(hit))) {
        const p = patterns[h.needle]!;
        if (hit.has(p.needle)) continue;
        hit.add(p.needle);
        found.push({ table: rel.table, relation: rel.relation, kind: rel.kind, needle: p.needle, offset: base + h.at });
      }
      offset += piece.length;
      tail = window.subarray(Math.max(0, window.length - overlap));
    }
    read.push({ table: rel.table, relation: rel.relation, kind: rel.kind, via, bytes: offset });
  }
  for (const c of await compressibleColumns(client, schema, tables)) {
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
