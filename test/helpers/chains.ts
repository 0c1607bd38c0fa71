import Database from 'better-sqlite3';

export interface ChainSpec {
  /** Versions are `${prefix}0` (the newest, the head) … `${prefix}${length - 1}` (the oldest). */
  prefix: string;
  length: number;
  /** Insert the head first (lowest rowids for the newest versions): prune's rowid order then meets the head first. */
  newestFirst?: boolean;
  createdAt?: string;
  headExpiresAt?: string | null;
  /** What the head points at: null (a live head), a missing id (dangling), or the oldest version (a ring). */
  headSupersededBy?: string | null;
}

/** The ids of a chain, newest first. */
export function chainIds(spec: Pick<ChainSpec, 'prefix' | 'length'>): string[] {
  return Array.from({ length: spec.length }, (_, i) => `${spec.prefix}${i}`);
}

/**
 * Add a supersede chain in one INSERT … SELECT from a recursive CTE, in one transaction, foreign keys off (an
 * agent may write any order, or a dangling head): 100,000 versions take well under a second.
 */
export function addChain(path: string, spec: ChainSpec): string[] {
  const db = new Database(path);
  try {
    db.pragma('foreign_keys = OFF');
    const order = spec.newestFirst ? 'ASC' : 'DESC';
    db.prepare(`
      INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at, expires_at, superseded_by)
      WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < @length)
      SELECT @prefix || i, 'chain ' || @prefix, 'version ' || i || ' of ' || @prefix, 'message:chain', @createdAt, @createdAt,
             CASE WHEN i = 0 THEN @headExpiresAt END,
             CASE WHEN i = 0 THEN @headSupersededBy ELSE @prefix || (i - 1) END
      FROM n ORDER BY i ${order}`).run({
      prefix: spec.prefix, length: spec.length, createdAt: spec.createdAt ?? '2026-11-01 00:00:00',
      headExpiresAt: spec.headExpiresAt ?? null, headSupersededBy: spec.headSupersededBy ?? null,
    });
  } finally {
    db.close();
  }
  return chainIds(spec);
}
