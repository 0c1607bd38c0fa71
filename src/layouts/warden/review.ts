import { usageError } from '../../errors.js';
import type { Db } from '../../store/sqlite.js';
import { toCanonical } from '../../time.js';
import type { ConfirmOptions, CurrentMemory, StoreHandle } from '../contract.js';

/** A live row of that id, or a usage error saying why it cannot be decided on. */
export function liveRow(db: Db, store: string, id: string): { id: string; superseded_by: string | null } {
  const row = db.prepare(`SELECT id, superseded_by FROM memory WHERE id = ?`).get(id) as { id: string; superseded_by: string | null } | undefined;
  if (!row) throw usageError(`no memory ${JSON.stringify(id)} in store ${store}`);
  if (row.superseded_by !== null) throw usageError(`memory ${id} is already superseded by ${row.superseded_by}; review that one`);
  return row;
}

/** The brief's table: the stamp and its record in one transaction on each database. */
export function confirmWarden(store: StoreHandle, { id, now, log, decided }: ConfirmOptions): number {
  return log.together(store.db, () => {
    liveRow(store.db, store.name, id);
    store.db.prepare(`UPDATE memory SET confirmed_at = ? WHERE id = ?`).run(toCanonical(now), id);
    return decided();
  });
}

export function currentWardenRow(store: StoreHandle, id: string): CurrentMemory {
  const row = store.db.prepare(`SELECT id, subject, fact, source, confirmed_at, superseded_by FROM memory WHERE id = ?`).get(id);
  return (row as CurrentMemory | undefined) ?? null;
}
