import type { DanglingRepair, StoreHandle, TimestampChange, TimestampRepair } from '../contract.js';
import { deleteRoots, type DeletedRow } from './delete.js';
import { withMaintenanceLock } from '../../store/lock.js';
import { assertIntact } from '../../store/sqlite.js';
import { memoryColumns } from './schema.js';
import { canonicalSql, classifyTime, inCanonicalRange, parseInstant, toCanonical } from '../../time/instants.js';

/** Re-checked by the DELETE: the agent may have written the missing row back meanwhile. */
const STILL_DANGLING = `superseded_by IS NOT NULL AND NOT EXISTS (SELECT 1 FROM memory p WHERE p.id = memory.superseded_by)`;
/** Each repair transaction holds the write lock about this long. */
const BATCH_MS = 40;
const DANGLING_SQL = `SELECT m.id FROM pragma_foreign_key_check('memory') f JOIN memory m ON m.rowid = f.rowid`;

/**
 * Delete rows whose superseded_by points at nothing, with their cascade, through both stores. Never reset them
 * to NULL: that would put the corrected fact straight back into live_memory.
 */
export async function repairDangling(store: StoreHandle): Promise<DanglingRepair> {
  const out: DanglingRepair = { store: store.name, deleted: 0, dangling: [], cascaded: [] };
  await withMaintenanceLock(store.path, 'repair dangling', async () => {
    assertIntact(store.db, store.path);
    for (;;) {
      const roots = (store.db.prepare(DANGLING_SQL).all() as { id: string }[]).map((r) => r.id);
      if (roots.length === 0) break;
      // Short transactions however many rows dangle: each takes roots until about BATCH_MS have gone by.
      const deleted: DeletedRow[] = [];
      for (let i = 0; i < roots.length; ) {
        const step = await deleteRoots(store.db, roots.slice(i), {
          vectors: store.vectors,
          recheck: { sql: STILL_DANGLING },
          classify: { sql: `CASE WHEN id IN (SELECT value FROM json_each(@roots)) THEN 'dangling' ELSE 'cascaded' END` },
          budget: { ms: BATCH_MS, chunk: 100 },
        });
        for (const row of step.deleted) deleted.push(row);
        i += step.consumed;
      }
      if (deleted.length === 0) break;
      for (const row of deleted) (row.reason === 'dangling' ? out.dangling : out.cascaded).push(row.id);
      out.deleted += deleted.length;
    }
  });
  return out;
}

/**
 * Rewrite parseable non-canonical timestamps to `YYYY-MM-DD HH:MM:SS` UTC; leave for a person the unparseable ones
 * and those whose UTC instant falls outside the years 0000-9999 (rewritten, they would be no timestamp at all).
 */
export async function repairTimestamps(store: StoreHandle): Promise<TimestampRepair> {
  const out: TimestampRepair = { store: store.name, rewritten: 0, unparseable: 0, outOfRange: 0, changes: [] };
  const cols = [...memoryColumns(store.db)].filter((c) => ['created_at', 'confirmed_at', 'expires_at', 'last_used_at'].includes(c));
  await withMaintenanceLock(store.path, 'repair timestamps', async () => {
    assertIntact(store.db, store.path);
    for (const col of cols) {
      const odd = store.db
        .prepare(`SELECT id, ${col} AS v FROM memory WHERE ${col} IS NOT NULL AND NOT ${canonicalSql(col)}`)
        .all() as { id: string; v: unknown }[];
      const update = store.db.prepare(`UPDATE memory SET ${col} = ? WHERE id = ? AND ${col} IS ?`);
      const changes: TimestampChange[] = [];
      for (const { id, v } of odd) {
        if (classifyTime(v) === 'unparseable') {
          out.unparseable += 1;
          continue;
        }
        const at = parseInstant(v)!;
        if (!inCanonicalRange(at)) {
          out.outOfRange += 1;
          continue;
        }
        changes.push({ id, column: col, from: String(v), to: toCanonical(at) });
      }
      // One short transaction per 500 rows; `IS ?` skips a value the agent rewrote in between.
      for (let i = 0; i < changes.length; i += 500) {
        const batch = changes.slice(i, i + 500);
        store.db.transaction(() => {
          for (const c of batch) if (update.run(c.to, c.id, c.from).changes === 1) out.changes.push(c);
        }).immediate();
      }
    }
  });
  out.rewritten = out.changes.length;
  return out;
}
