import type { MastraConfig } from './config.js';

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
