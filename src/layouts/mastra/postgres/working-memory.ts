import type { PostgresStoreHandle } from '../../contract.js';
import type { WorkingMemory } from '../working-memory.js';
import { instant, RESOURCES, tableOf, THREADS, schemaOf } from './names.js';
import type { Queryable } from './vectors.js';

// Working memory in PostgresStore's tables: `mastra_resources."workingMemory"` (scope resource) and the
// `workingMemory` key of `mastra_threads.metadata` (jsonb, scope thread), as the libsql form reads them.

type Raw = { id: string; resource: string; text: string; at: Date | null; created: Date | null };

const iso = (d: Date | null) => (d === null ? '' : d.toISOString());

export async function workingMemoriesPg(q: Queryable, store: PostgresStoreHandle, id?: string): Promise<WorkingMemory[]> {
  const s = schemaOf(store);
  const by = id === undefined ? '' : ' AND id = $1';
  const args = id === undefined ? [] : [id];
  const resources = await q.query<Raw>(`SELECT id, id AS resource, "workingMemory" AS text, ${instant('updatedAt')} AS at, ${instant('createdAt')} AS created
    FROM ${tableOf(s, RESOURCES)} WHERE "workingMemory" IS NOT NULL AND "workingMemory" <> ''${by}`, args);
  const threads = await q.query<Raw>(`SELECT id, "resourceId" AS resource, metadata->>'workingMemory' AS text, ${instant('updatedAt')} AS at, ${instant('createdAt')} AS created
    FROM ${tableOf(s, THREADS)} WHERE jsonb_typeof(metadata->'workingMemory') = 'string' AND metadata->>'workingMemory' <> ''${by}`, args);
  const to = (scope: WorkingMemory['scope']) => (r: Raw): WorkingMemory => ({
    id: String(r.id), scope, resource: String(r.resource ?? ''), text: String(r.text), updatedAt: iso(r.at), createdAt: iso(r.created), at: r.at === null ? null : r.at.getTime(),
  });
  return [...resources.rows.map(to('resource')), ...threads.rows.map(to('thread'))];
}
