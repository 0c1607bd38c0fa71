import type { MastraConfig } from './config.js';
import type { CopyNames } from '../contract.js';

// The section's defaults without zod (the layout's sync methods run for every store that is opened), and Mastra's
// table names (@mastra/core's storage constants, docs/mastra-layout.md).

export const MASTRA_DEFAULTS: Readonly<MastraConfig> = Object.freeze({ retention: {}, workingMemoryMaxBytes: 16_384, batch: 200 });

export const mastraOf = (store: { mastra?: MastraConfig | undefined }): MastraConfig => store.mastra ?? { ...MASTRA_DEFAULTS, retention: {} };

export const THREADS = 'mastra_threads';
export const MESSAGES = 'mastra_messages';
export const RESOURCES = 'mastra_resources';
export const OBSERVATIONS = 'mastra_observational_memory';
/**
 * A JSON function of a column, NULL where the column is not JSON: json_extract and its kin fail the whole statement
 * on one value that is not (another writer's, a NUL byte in it), and SQLite does not promise to test a WHERE clause's
 * `json_valid(x) AND …` left to right; CASE does. `valid` is json_valid's flags (6: text JSON or JSONB).
 */
export const ifJson = (col: string, expr: string, valid = '') => `CASE WHEN json_valid(${col}${valid ? `, ${valid}` : ''}) THEN ${expr} END`;
/** An embedding metadata's field (LibSQLVector writes text JSON), NULL when the metadata is not JSON. */
export const metaField = (key: string) => ifJson('metadata', `json_extract(metadata, '$.${key}')`);
/**
 * Embedding metadata that is not JSON yet quotes one of the ids in the JSON array `param` (`"<id>"`, as JSON would):
 * it still names whom it is about.
 */
export const metaQuotes = (param: string) => `(NOT json_valid(metadata) AND EXISTS (SELECT 1 FROM json_each(${param}) WHERE instr(CAST(metadata AS BLOB), CAST('"' || value || '"' AS BLOB)) > 0))`;

/** The tables a Mastra memory store always has (LibSQLStore creates them at init). */
export const REQUIRED = [THREADS, MESSAGES, RESOURCES] as const;

/**
 * What names a person in a copy of the store (Layout.copyNames): the ids of threads, messages, resources and
 * observation records, and the resource id (the person `erase --user` takes) wherever a row carries it; an
 * embedding's metadata names its resource, thread and message (one whose message is gone still does). As
 * mastraErasedIn reads them (erased-in.ts).
 */
export const MASTRA_COPY_NAMES: readonly CopyNames[] = [
  { table: RESOURCES, ids: [{ column: 'id' }], users: [{ column: 'id' }] },
  { table: THREADS, ids: [{ column: 'id' }], users: [{ column: 'resourceId' }] },
  { table: MESSAGES, ids: [{ column: 'id' }, { column: 'thread_id' }], users: [{ column: 'resourceId' }] },
  { table: OBSERVATIONS, ids: [{ column: 'id' }], users: [{ column: 'resourceId' }] },
  {
    table: { columns: ['vector_id', 'embedding', 'metadata'] },
    ids: [{ column: 'metadata', json: 'thread_id' }, { column: 'metadata', json: 'message_id' }],
    users: [{ column: 'metadata', json: 'resource_id' }],
  },
];
