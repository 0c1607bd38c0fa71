import type { Db } from './sqlite.js';
import type { VectorSink } from './vectors.js';
import { transientError } from '../errors.js';

/** What a deleted row looked like, enough to say why it went. */
export interface DoomedRow {
  id: string;
  expires_at: unknown;
  superseded_by: unknown;
  created_at: unknown;
}

const CLOSURE_SQL = `
WITH RECURSIVE doomed(id) AS (
  SELECT value FROM json_each(?)
  UNION
  SELECT m.id FROM memory m JOIN doomed d ON m.superseded_by = d.id
)
SELECT m.id, m.expires_at, m.superseded_by, m.created_at FROM doomed d JOIN memory m ON m.id = d.id`;

/**
 * The rows that deleting `roots` removes: the roots and, through ON DELETE CASCADE, every older version whose
 * supersede chain leads to one of them.
 */
export function cascadeClosure(db: Db, roots: readonly string[]): DoomedRow[] {
  if (roots.length === 0) return [];
  return db.prepare(CLOSURE_SQL).all(JSON.stringify(roots)) as DoomedRow[];
}

const SELECT_ROWS = `SELECT id, expires_at, superseded_by, created_at FROM memory WHERE id IN (SELECT value FROM json_each(?))`;
const DELETE_ROWS = `DELETE FROM memory WHERE id IN (SELECT value FROM json_each(?))`;

export interface DeleteOptions {
  vectors?: VectorSink | undefined;
  /** Re-checked inside the write transaction: a root the agent changed meanwhile (no longer qualifies) stays. */
  stillQualifies?: (row: DoomedRow) => boolean;
  /** Called inside the write transaction, before the delete, e.g. to record an erase receipt atomically. */
  beforeCommit?: (deleted: DoomedRow[]) => void;
  maxAttempts?: number;
}

/**
 * Delete `roots` with their cascade through both stores. Vectors first (outside the SQLite write lock, so the
 * agent is never blocked on a network call), then one short write transaction that re-checks what it deletes:
 * if an agent wrote a new row into a doomed chain in between, the transaction is rolled back, the newcomers'
 * vectors are deleted too, and the batch is tried again.
 */
export async function deleteWithCascade(db: Db, roots: readonly string[], opts: DeleteOptions = {}): Promise<DoomedRow[]> {
  const vectorsGone = new Set<string>();
  const attempts = opts.maxAttempts ?? 5;
  for (let attempt = 1; attempt <= attempts; attempt++) {
    if (opts.vectors) {
      const planned = cascadeClosure(db, roots).map((r) => r.id).filter((id) => !vectorsGone.has(id));
      if (planned.length > 0) {
        await opts.vectors.deleteForRows(planned);
        planned.forEach((id) => vectorsGone.add(id));
      }
    }
    const outcome = db.transaction((): DoomedRow[] | null => {
      const current = db.prepare(SELECT_ROWS).all(JSON.stringify(roots)) as DoomedRow[];
      const keep = opts.stillQualifies ? current.filter(opts.stillQualifies) : current;
      if (keep.length === 0) return [];
      const ids = keep.map((r) => r.id);
      const closure = cascadeClosure(db, ids);
      if (opts.vectors && closure.some((r) => !vectorsGone.has(r.id))) return null; // chain grew: vectors first
      opts.beforeCommit?.(closure);
      db.prepare(DELETE_ROWS).run(JSON.stringify(ids));
      return closure;
    }).immediate();
    if (outcome) return outcome;
  }
  throw transientError(`delete: supersede chains kept changing during ${attempts} attempts; try again`);
}
