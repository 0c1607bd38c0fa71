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

/**
 * Every row a delete removes, the cascade included, is captured by a TEMP trigger (this connection only; the
 * store's schema is not touched) into a TEMP table, inside the same transaction. That is how a batch learns its
 * exact cascade without walking the chains a second time.
 */
const CAPTURE_DDL = `
CREATE TEMP TABLE IF NOT EXISTS warden_deleted (id, expires_at, superseded_by, created_at);
CREATE TEMP TRIGGER IF NOT EXISTS warden_capture AFTER DELETE ON main.memory BEGIN
  INSERT INTO warden_deleted VALUES (OLD.id, OLD.expires_at, OLD.superseded_by, OLD.created_at);
END;`;

type Keep = (row: DoomedRow) => boolean;
const prepared = new WeakSet<Db>();

function prepareConnection(db: Db): void {
  if (prepared.has(db)) return;
  db.exec(CAPTURE_DDL);
  prepared.add(db);
}

const SELECT_ROOTS = `SELECT id, expires_at, superseded_by, created_at FROM memory WHERE id IN (SELECT value FROM json_each(?))`;
const DELETE_ROOTS = `DELETE FROM memory WHERE id IN (SELECT value FROM json_each(?))`;

export interface DeleteOptions {
  vectors?: VectorSink | undefined;
  /** Re-checked inside the write transaction: a root the agent changed meanwhile (no longer qualifies) stays. */
  stillQualifies?: Keep;
  /** Called inside the write transaction, after the delete, with every row removed (e.g. a receipt). */
  beforeCommit?: (deleted: DoomedRow[]) => void;
  maxAttempts?: number;
}

class ChainGrew extends Error {}

/**
 * Delete `roots` with their cascade through both stores. Vectors first (outside the SQLite write lock, so the
 * agent is never blocked on a network call), then one short write transaction that re-checks each root. If an
 * agent wrote a new row into a doomed chain in between, the cascade would remove a row whose vectors are still
 * there: the transaction is rolled back, the newcomers' vectors are deleted too, and the batch is tried again.
 */
export async function deleteWithCascade(db: Db, roots: readonly string[], opts: DeleteOptions = {}): Promise<DoomedRow[]> {
  if (roots.length === 0) return [];
  prepareConnection(db);
  const vectorsGone = new Set<string>();
  const attempts = opts.maxAttempts ?? 5;
  const rootsJson = JSON.stringify(roots);
  const current = db.prepare(SELECT_ROOTS);
  const remove = db.prepare(DELETE_ROOTS);
  const captured = db.prepare(`SELECT id, expires_at, superseded_by, created_at FROM temp.warden_deleted`);
  const clear = db.prepare(`DELETE FROM temp.warden_deleted`);
  for (let attempt = 1; attempt <= attempts; attempt++) {
    if (opts.vectors) {
      const planned = cascadeClosure(db, roots).map((r) => r.id).filter((id) => !vectorsGone.has(id));
      if (planned.length > 0) {
        await opts.vectors.deleteForRows(planned);
        planned.forEach((id) => vectorsGone.add(id));
      }
    }
    try {
      return db.transaction((): DoomedRow[] => {
        clear.run();
        const rows = current.all(rootsJson) as DoomedRow[];
        const keep = opts.stillQualifies ? rows.filter(opts.stillQualifies) : rows;
        if (keep.length === 0) return [];
        remove.run(keep.length === rows.length ? rootsJson : JSON.stringify(keep.map((r) => r.id)));
        const deleted = captured.all() as DoomedRow[];
        clear.run();
        if (opts.vectors && deleted.some((r) => !vectorsGone.has(r.id))) throw new ChainGrew();
        opts.beforeCommit?.(deleted);
        return deleted;
      }).immediate();
    } catch (err) {
      if (!(err instanceof ChainGrew)) throw err;
    }
  }
  throw transientError(`delete: supersede chains kept changing during ${attempts} attempts; try again`);
}
