import type { Db } from '../../store/sqlite.js';
import { memoryColumns } from './schema.js';
import { cascadeClosure, deleteRoots, type DeletedRow } from './delete.js';
import type { Mem0Point, PointStore } from '../../vectors/contract.js';
import { rowVectorsFor, VECTOR_STORES } from '../../vectors/registry.js';
import { sweepCollections } from '../erase-sweep.js';
import type { EraseOptions, EraseSelector, Erased, StoreHandle } from '../contract.js';

/** The warden layout's erase (src/erase.ts runs it): rows with their cascade, then points still holding the text. */

/** Each erase transaction holds the write lock about this long. */
const ERASE_BATCH_MS = 40;

function wardenRoots(db: Db, sel: EraseSelector): string[] {
  const ids = (sql: string, ...args: unknown[]) => (db.prepare(sql).all(...args) as { id: string }[]).map((r) => String(r.id));
  if ('ids' in sel) return ids(`SELECT id FROM memory WHERE id IN (SELECT value FROM json_each(?))`, JSON.stringify(sel.ids));
  if ('user' in sel) {
    // The brief's table has no user column: a per-user store's subject names the person. A user_id column wins.
    return memoryColumns(db).has('user_id') ? ids(`SELECT id FROM memory WHERE user_id = ?`, sel.user) : ids(`SELECT id FROM memory WHERE subject = ?`, sel.user);
  }
  return ids(`SELECT id FROM memory WHERE instr(lower(subject), lower(?)) > 0 OR instr(lower(fact), lower(?)) > 0`, sel.subject, sel.subject);
}

export async function eraseWarden(store: StoreHandle, sel: EraseSelector, dryRun: boolean, opts: EraseOptions): Promise<Erased> {
  const roots = wardenRoots(store.db, sel);
  const closure = cascadeClosure(store.db, roots);
  const ids = closure.map((r) => r.id);
  const texts = ids.length === 0 ? [] : (store.db.prepare(`SELECT fact FROM memory WHERE id IN (SELECT value FROM json_each(?))`).all(JSON.stringify(ids)) as { fact: string }[]).map((r) => r.fact);
  const counts: Record<string, number> = { rows: ids.length, cascaded: ids.length - roots.length, strayPoints: 0 };
  if (dryRun || ids.length === 0) return { ids, counts, texts };
  // Short transactions however many rows the selector names: the agent keeps writing meanwhile.
  const deleted: DeletedRow[] = [];
  opts.progress?.start('erase', roots.length, 'rows');
  for (let i = 0; i < roots.length; ) {
    const step = await deleteRoots(store.db, roots.slice(i), { vectors: store.vectors, budget: { ms: ERASE_BATCH_MS, chunk: 100 } });
    for (const row of step.deleted) deleted.push(row);
    i += step.consumed;
    opts.progress?.set(i);
  }
  opts.progress?.done();
  counts.rows = deleted.length;
  counts.cascaded = deleted.length - roots.length;
  const points = pointsOf(store, opts);
  if (points && store.config.qdrant) {
    // A point that belongs to a row still in the store stays, even if it repeats an erased text word for word.
    const vectors = store.vectors ?? rowVectorsFor(store.config)!;
    const exists = store.db.prepare(`SELECT 1 FROM memory WHERE id = ?`);
    const keep = (p: Mem0Point) => vectors.rowIdsOf({ id: p.id, payload: p.payload }).some((id) => exists.get(id) !== undefined);
    counts.strayPoints = await sweepCollections(points, store.config.qdrant.collections, new Set(), texts, 'subject' in sel ? sel.subject : undefined, 256, keep);
  }
  return { ids: deleted.map((r) => r.id), counts, texts };
}

function pointsOf(store: StoreHandle, opts: EraseOptions): PointStore | undefined {
  if (opts.points) return opts.points;
  return store.vectors || store.config.qdrant ? VECTOR_STORES.qdrant({ open: store.vectors, qdrant: store.config.qdrant }) : undefined;
}

