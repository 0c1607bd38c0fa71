import type pg from 'pg';
import type { ByteCheck, EngineScrub, PostgresStoreHandle, ScrubOptions } from '../contract.js';
import type { PostgresConfig } from './config.js';
import { sqlState } from './session.js';
import { quoteIdent as q } from './copy-describe.js';
import { vacuumTouched, verifyBytesGone } from './bytes.js';

/** VACUUM FULL waits for its lock at most lockTimeoutMs each time (agents queue behind a waiting VACUUM FULL), this often. */
const VACUUM_ATTEMPTS = 100;

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
    const unvacuumed: string[] = [];
    for (const table of new Set(opts.tables)) if (!(await vacuumFull(client, handle, cfg, table))) unvacuumed.push(table);
    const v = await verifyBytesGone(client, { schema: cfg.schema, tables: opts.tables, needles: opts.needles });
    for (const table of unvacuumed) {
      v.unseen.push({ what: 'unvacuumed-table', facts: { table },
        reach: 'an agent\'s transaction held the table through every attempt of VACUUM FULL: the deleted rows may still be in its pages (texts not given as needles among them); erase again when the agents are idle' });
    }
    const found = [];
    let shared = 0;
    const heldByRows = new Map<number, boolean>();
    for (const f of v.found) {
      if (!heldByRows.has(f.needle)) heldByRows.set(f.needle, await heldByRemainingRow(client, cfg.schema, opts.tables, opts.needles[f.needle]!));
      if (heldByRows.get(f.needle)) shared += 1;
      else found.push(f);
    }
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
    return { vacuumed: unvacuumed.length === 0, walTruncated: false, bytes };
  } finally {
    client.release();
  }
}

async function vacuumFull(client: pg.PoolClient, handle: PostgresStoreHandle, cfg: PostgresConfig, table: string): Promise<boolean> {
  await client.query(`SET lock_timeout = ${Math.floor(cfg.lockTimeoutMs)}`);
  try {
    for (let attempt = 1; attempt <= VACUUM_ATTEMPTS; attempt++) {
      try {
        await vacuumTouched(client, cfg.schema, [table], 'full');
        return true;
      } catch (err) {
        if (sqlState(err) !== '55P03' && sqlState(err) !== '40P01') throw handle.pg.explain(err, `erase: VACUUM FULL ${table}`);
        await new Promise((r) => setTimeout(r, Math.min(1000, 10 * attempt) + Math.random() * 20));
      }
    }
    return false;
  } finally {
    await client.query('RESET lock_timeout').catch(() => {});
  }
}

/** Whether a row of these tables holds the text (in any column, as the row reads as text). */
async function heldByRemainingRow(client: pg.ClientBase, schema: string, tables: readonly string[], needle: string): Promise<boolean> {
  for (const t of new Set(tables)) {
    const r = await client.query(`SELECT 1 FROM ${q(schema)}.${q(t)} x WHERE strpos(x::text, $1) > 0 LIMIT 1`, [needle]);
    if (r.rows.length > 0) return true;
  }
  return false;
}
