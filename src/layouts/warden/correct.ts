import { usageError } from '../../core/errors.js';
import type { CorrectOptions, Corrected, StoreHandle } from '../contract.js';
import { deleteWithCascade } from './delete.js';
import { supersedeRow } from './apply.js';
import { currentWardenRow, liveRow, stillReads } from './review.js';

/**
 * A person's correction on the brief's table. Supersede and expire are one transaction on each database; a delete
 * goes through both stores with the cascade (older versions pointing at it go too), each store transaction's
 * records committed right after it (a deep chain takes several).
 */
export async function correctWarden(store: StoreHandle, { id, now, correction, log, decided, guard }: CorrectOptions): Promise<Corrected> {
  switch (correction.action) {
    case 'supersede':
      return log.together(store.db, () => {
        guard?.(currentWardenRow(store, id));
        liveRow(store.db, store.name, id);
        const newId = supersedeRow(store.db, id, correction, now);
        const resolution = `superseded:${newId}`;
        const resolved = decided(id, resolution, { action: 'supersede', newId, fact: correction.fact, source: correction.source });
        return { resolution, resolved, newId };
      });
    case 'expire':
      return log.together(store.db, () => {
        guard?.(currentWardenRow(store, id));
        liveRow(store.db, store.name, id);
        store.db.prepare(`UPDATE memory SET expires_at = ? WHERE id = ?`).run(correction.expiresAt, id);
        const resolution = `expires:${correction.expiresAt}`;
        return { resolution, resolved: decided(id, resolution, { action: 'expire', expiresAt: correction.expiresAt }), expiresAt: correction.expiresAt };
      });
    case 'delete': {
      const row = currentWardenRow(store, id);
      if (!row) throw usageError(`no memory ${JSON.stringify(id)} in store ${store.name}`);
      // The vectors go before the SQLite transaction: the guard looks first, and the DELETE then takes the row
      // only if it still reads as the guard saw it.
      guard?.(row);
      let resolved = 0;
      try {
        const deleted = await deleteWithCascade(store.db, [id], {
          vectors: store.vectors,
          // The guard again inside the transaction: the row and every older version the cascade takes, as the
          // person saw them (a version the agent linked to it meanwhile would otherwise go unseen).
          ...(guard ? { recheck: stillReads(row), beforeDelete: () => guard(currentWardenRow(store, id)) } : {}),
          beforeCommit: (rows) => {
            log.begin();
            for (const r of rows) resolved += decided(r.id, 'deleted', { action: 'delete', ...(r.id !== id ? { cascadedFrom: id } : {}) });
          },
          afterCommit: () => log.commit(),
        });
        log.commit();
        if (deleted.length === 0) throw usageError(`memory ${id} was ${guard ? 'changed or ' : ''}deleted by someone else meanwhile`);
        return { resolution: 'deleted', resolved, deleted: deleted.map((r) => r.id) };
      } finally {
        log.rollback();
      }
    }
  }
}
