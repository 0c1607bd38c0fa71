import { usageError } from '../../core/errors.js';
import type { Db } from '../../store/sqlite.js';
import { toCanonical } from '../../time/instants.js';
import type { ConfirmOptions, CurrentMemory, OlderVersion, StoreHandle } from '../contract.js';
import type { Sql } from './chain.js';

/** A live row of that id, or a usage error saying why it cannot be decided on. */
export function liveRow(db: Db, store: string, id: string): { id: string; superseded_by: string | null } {
  const row = db.prepare(`SELECT id, superseded_by FROM memory WHERE id = ?`).get(id) as { id: string; superseded_by: string | null } | undefined;
  if (!row) throw usageError(`no memory ${JSON.stringify(id)} in store ${store}`);
  if (row.superseded_by !== null) throw usageError(`memory ${id} is already superseded by ${row.superseded_by}; review that one`);
  return row;
}

/** The brief's table: the stamp and its record in one transaction on each database. */
export function confirmWarden(store: StoreHandle, { id, now, log, decided, guard }: ConfirmOptions): number {
  return log.together(store.db, () => {
    guard?.(currentWardenRow(store, id));
    liveRow(store.db, store.name, id);
    store.db.prepare(`UPDATE memory SET confirmed_at = ? WHERE id = ?`).run(toCanonical(now), id);
    return decided();
  });
}

/** The row as a person's decision sees it: its columns, and every older version whose chain leads to it. */
export function currentWardenRow(store: StoreHandle, id: string): CurrentMemory {
  const row = store.db.prepare(`SELECT id, subject, fact, source, confirmed_at, expires_at, superseded_by FROM memory WHERE id = ?`).get(id);
  if (!row) return null;
  const olderVersions = store.db.prepare(OLDER_VERSIONS_SQL).all({ id }) as OlderVersion[];
  return { ...(row as NonNullable<CurrentMemory>), olderVersions };
}

// UNION (not UNION ALL): a chain that loops (written with foreign keys off) is read once, not forever.
const OLDER_VERSIONS_SQL = `WITH RECURSIVE older(id) AS (
  SELECT id FROM memory WHERE superseded_by = @id
  UNION
  SELECT m.id FROM memory m JOIN older o ON m.superseded_by = o.id
)
SELECT m.id, m.subject, m.fact, m.source, m.confirmed_at, m.expires_at, m.superseded_by FROM older JOIN memory m ON m.id = older.id
WHERE m.id IS NOT @id ORDER BY m.id`;

/** For a DELETE's recheck: the row still holds exactly what `currentWardenRow` read (NULLs included). */
export function stillReads(row: NonNullable<CurrentMemory>): Sql {
  const cols = ['subject', 'fact', 'source', 'confirmed_at', 'expires_at', 'superseded_by'] as const;
  return { sql: cols.map((c) => `${c} IS @seen_${c}`).join(' AND '), params: Object.fromEntries(cols.map((c) => [`seen_${c}`, row[c]])) };
}
