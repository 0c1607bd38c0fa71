import type { LibDb } from './files.js';
import { ifJson, RESOURCES, THREADS } from './names.js';
import { parseInstant, toCanonical, type Instant } from '../../time/instants.js';

// Working memory, the Mastra memory a person reviews: one Markdown (or JSON) text per resource (`scope: resource`,
// mastra_resources.workingMemory) or per thread (`scope: thread`, mastra_threads.metadata.workingMemory).

export interface WorkingMemory {
  /** The resource id or the thread id: the memory's id in review, drift and the digest. */
  id: string;
  scope: 'resource' | 'thread';
  /** Whose it is: the resource id (a thread's resourceId). */
  resource: string;
  text: string;
  /** Mastra's updatedAt as stored (ISO 8601) and as an instant (null: unparseable). */
  updatedAt: string;
  at: Instant | null;
  createdAt: string;
}

const RESOURCE_SQL = `SELECT id, id AS resource, workingMemory AS text, updatedAt, createdAt FROM ${RESOURCES} WHERE workingMemory IS NOT NULL AND workingMemory <> ''`;
const WM = ifJson('metadata', `json_extract(metadata, '$.workingMemory')`, '6');
const THREAD_SQL = `SELECT id, resourceId AS resource, ${WM} AS text, updatedAt, createdAt FROM ${THREADS}
  WHERE metadata IS NOT NULL AND ${ifJson('metadata', `json_type(metadata, '$.workingMemory')`, '6')} = 'text' AND ${WM} <> ''`;

type Raw = { id: string; resource: string; text: string; updatedAt: string; createdAt: string };

const toMemory = (scope: WorkingMemory['scope']) => (r: Raw): WorkingMemory => ({
  id: String(r.id), scope, resource: String(r.resource), text: String(r.text), updatedAt: String(r.updatedAt), createdAt: String(r.createdAt), at: parseInstant(r.updatedAt),
});

/** Every working memory in the store; `where` narrows both reads by id. */
export function workingMemories(db: LibDb, id?: string): WorkingMemory[] {
  const by = id === undefined ? '' : ' AND id = ?';
  const args = id === undefined ? [] : [id];
  return [
    ...(db.prepare(RESOURCE_SQL + by).all(...args) as Raw[]).map(toMemory('resource')),
    ...(db.prepare(THREAD_SQL + by).all(...args) as Raw[]).map(toMemory('thread')),
  ];
}

/** The memory as review shows it: the resource is the subject, where it lives is the source. */
export function underReview(m: WorkingMemory) {
  return { id: m.id, subject: m.resource, fact: m.text, source: `mastra:working-memory:${m.scope}`, confirmed_at: m.at === null ? m.updatedAt : toCanonical(m.at) };
}

/** Stamp a working memory confirmed at `now` (Mastra's updatedAt, which Mastra itself sets on each update). */
export function stampConfirmed(db: LibDb, m: WorkingMemory, now: Instant): boolean {
  const table = m.scope === 'resource' ? RESOURCES : THREADS;
  // Only if it still reads as it was read: an agent's update in between wins and keeps its own stamp.
  const current = workingMemories(db, m.id).find((x) => x.scope === m.scope);
  if (!current || current.text !== m.text) return false;
  return db.prepare(`UPDATE ${table} SET updatedAt = ? WHERE id = ? AND updatedAt = ?`).run(new Date(now).toISOString(), m.id, current.updatedAt).changes === 1;
}

/**
 * Set (text) or clear (null) a working memory the way Mastra's own writes leave it, stamping updatedAt as they do:
 * a resource's `workingMemory` column (NULL when cleared), a thread's `metadata.workingMemory` key (removed when
 * cleared; jsonb_* keep the column JSONB, as Mastra writes it). False when no row was changed.
 */
export function writeWorkingMemory(db: LibDb, m: WorkingMemory, text: string | null, now: Instant): boolean {
  const at = new Date(now).toISOString();
  if (m.scope === 'resource') return db.prepare(`UPDATE ${RESOURCES} SET workingMemory = ?, updatedAt = ? WHERE id = ?`).run(text, at, m.id).changes === 1;
  const metadata = text === null ? `jsonb_remove(metadata, '$.workingMemory')` : `jsonb_set(metadata, '$.workingMemory', ?)`;
  return db.prepare(`UPDATE ${THREADS} SET metadata = ${metadata}, updatedAt = ? WHERE id = ?`).run(...(text === null ? [] : [text]), at, m.id).changes === 1;
}
