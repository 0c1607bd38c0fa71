import type pg from 'pg';
import type { ByteCheck, EngineScrub, PostgresStoreHandle, ScrubOptions } from '../contract.js';
import type { PostgresConfig } from './config.js';
import { sqlState } from './session.js';
import { quoteIdent as q } from './copy-describe.js';
import { compressibleColumns, uncompressedStorageSql, vacuumTouched, verifyBytesGone } from './bytes.js';
import { bytesHits } from '../../text/needles.js';

/** VACUUM FULL waits for its lock at most lockTimeoutMs each time (agents queue behind a waiting VACUUM FULL), this often. */
const VACUUM_ATTEMPTS = 100;
/**
 * VACUUM FULL copies a deleted row that a snapshot older than its delete may still see (RECENTLY_DEAD), wherever in
 * the database that snapshot is (a transaction of another client, autovacuum's ANALYZE): while the read-back finds an
 * erased text, the tables are rewritten again, this many times at most, a growing while apart (about 20 s in all).
 */
const REWRITE_ROUNDS = 20;

/**
 * Erase's last step on a PostgreSQL store (the engine contract's `scrubErased`): VACUUM FULL of the tables the erase
 * deleted from, then their relation files read back through the server for the needles (bytes.ts).
 *
 * VACUUM FULL takes an ACCESS EXCLUSIVE lock: while it waits for it, every agent's statement on the table queues
 * behind it, so it waits at most `lockTimeoutMs` and tries again (an agent's long transaction delays the erase, never
 * the agents for longer than that); once it has the lock, agents wait for the rewrite to end (their writes are kept,
 * not refused). A table it never got is reported unvacuumed: its bytes may remain, and erase exits 1.
 *
 * A needle found where a row still in the store holds the same text (another memory with the same words) is not a
 * finding: it is counted as `shared`. What no relation file shows is in `unseen`.
 */
export async function scrubErasedPg(handle: PostgresStoreHandle, cfg: PostgresConfig, opts: ScrubOptions): Promise<EngineScrub> {
  const client = await handle.pg.connect();
  try {
    const { vacuumed, bytes } = await scrubTables(client, { schema: cfg.schema, tables: opts.tables, needles: opts.needles, lockTimeoutMs: cfg.lockTimeoutMs, explain: handle.pg.explain, rewriting: opts.rewriting });
    return { vacuumed, walTruncated: false, bytes };
  } finally {
    client.release();
  }
}

/**
 * VACUUM FULL of `tables` of `schema` (each lock waited for at most `lockTimeoutMs` a time), then their relation files
 * read back for the needles: the PostgreSQL store's erase and any other tables an erase deleted from (mem0's pgvector
 * tables). `client` must not be in a transaction.
 */
export async function scrubTables(
  client: pg.ClientBase,
  opts: {
    schema: string; tables: readonly string[]; needles: readonly string[]; lockTimeoutMs: number; explain: (err: unknown, doing: string) => Error;
    /** Tables memory-warden did not create (mem0's): their compressible columns stored uncompressed first, so that the rewrite can be read. */
    uncompress?: boolean;
    /** Called once, when the first VACUUM FULL has been sent. */
    rewriting?: () => void;
  },
): Promise<{ vacuumed: boolean; bytes: ByteCheck }> {
  let unvacuumed: string[] = [];
  let rewriting = opts.rewriting;
  const tables = [...new Set(opts.tables)];
  const own = opts.uncompress ? (await compressibleColumns(client, opts.schema, tables)).filter((c) => c.relation === c.table) : [];
  let v: Awaited<ReturnType<typeof verifyBytesGone>>;
  for (let round = 1; ; round++) {
    unvacuumed = [];
    for (const table of tables) {
      const alter = round === 1 ? uncompressedStorageSql(opts.schema, table, own.filter((c) => c.table === table).map((c) => c.column)) : [];
      const done = await withLockRetries(client, opts.lockTimeoutMs, opts.explain, `erase: VACUUM FULL ${table}`, async () => {
        for (const sql of alter) await client.query(sql);
        const vacuum = vacuumTouched(client, opts.schema, [table], 'full');
        rewriting?.();
        rewriting = undefined;
        await vacuum;
      });
      if (!done) unvacuumed.push(table);
    }
    v = await verifyBytesGone(client, { schema: opts.schema, tables: opts.tables, needles: opts.needles });
    if (v.found.length === 0 || unvacuumed.length > 0 || round >= REWRITE_ROUNDS) break;
    const still = await heldByRemainingRows(client, opts.schema, opts.tables, [...new Set(v.found.map((f) => f.needle))].map((i) => opts.needles[i]!));
    if (v.found.every((f) => still.has(opts.needles[f.needle]!))) break; // only texts rows still in the store hold
    await new Promise((r) => setTimeout(r, Math.min(2000, 100 * round)));
  }
  for (const table of unvacuumed) {
    v.unseen.push({ what: 'unvacuumed-table', facts: { table },
      reach: 'an agent\'s transaction held the table through every attempt of VACUUM FULL: the deleted rows may still be in its pages (texts not given as needles among them); erase again when the agents are idle' });
  }
  const held = await heldByRemainingRows(client, opts.schema, opts.tables, [...new Set(v.found.map((f) => f.needle))].map((i) => opts.needles[i]!));
  const found = v.found.filter((f) => !held.has(opts.needles[f.needle]!));
  const shared = v.found.length - found.length;
  const unreadable = v.unseen.some((u) => u.what === 'unreadable-relation' || u.what === 'compressed-column' || u.what === 'unvacuumed-table');
  const bytes: ByteCheck = {
    verdict: found.length > 0 ? 'found' : unreadable ? 'unverified' : 'clean',
    needles: opts.needles.length,
    relations: v.read.length,
    bytes: v.read.reduce((n, r) => n + r.bytes, 0),
    found,
    shared,
    unseen: v.unseen,
  };
  return { vacuumed: unvacuumed.length === 0, bytes };
}

/** `fn` with each lock waited for at most lockTimeoutMs, tried again until it gets them; false when it never did. */
async function withLockRetries(client: pg.ClientBase, lockTimeoutMs: number, explain: (err: unknown, doing: string) => Error, doing: string, fn: () => Promise<void>): Promise<boolean> {
  await client.query(`SET lock_timeout = ${Math.floor(lockTimeoutMs)}`);
  try {
    for (let attempt = 1; attempt <= VACUUM_ATTEMPTS; attempt++) {
      try {
        await fn();
        return true;
      } catch (err) {
        if (sqlState(err) !== '55P03' && sqlState(err) !== '40P01') throw explain(err, doing);
        await new Promise((r) => setTimeout(r, Math.min(1000, 10 * attempt) + Math.random() * 20));
      }
    }
    return false;
  } finally {
    await client.query('RESET lock_timeout').catch(() => {});
  }
}

/**
 * Of these texts, those a row of the tables holds (in any column, as the row reads as text): one pass over the rows,
 * a page at a time through a cursor, every text looked for at once.
 */
async function heldByRemainingRows(client: pg.ClientBase, schema: string, tables: readonly string[], texts: readonly string[]): Promise<Set<string>> {
  const held = new Set<string>();
  if (texts.length === 0) return held;
  const find = bytesHits(texts.map((t) => Buffer.from(t, 'utf8')));
  const heldIdx = new Set<number>();
  await client.query('BEGIN READ ONLY');
  try {
    for (const t of new Set(tables)) {
      await client.query(`DECLARE mw_rows NO SCROLL CURSOR FOR SELECT x::text AS t FROM ${q(schema)}.${q(t)} x`);
      for (;;) {
        const page = (await client.query<{ t: string }>('FETCH 5000 FROM mw_rows')).rows;
        // The page's rows joined by NUL, which no text value holds: no match spans two rows.
        const hay = Buffer.from(page.map((r) => r.t).join('\0'), 'utf8');
        for (const h of find(hay, heldIdx)) {
          heldIdx.add(h.needle);
          held.add(texts[h.needle]!);
        }
        if (page.length < 5000 || held.size === texts.length) break;
      }
      await client.query('CLOSE mw_rows');
    }
  } finally {
    await client.query('COMMIT').catch(() => {});
  }
  return held;
}
