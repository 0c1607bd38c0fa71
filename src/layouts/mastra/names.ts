import type { MastraConfig } from './config.js';

// The section's defaults without zod (the layout's sync methods run for every store that is opened), and Mastra's
// table names (@mastra/core's storage constants, docs/mastra-layout.md).

export const MASTRA_DEFAULTS: Readonly<MastraConfig> = Object.freeze({ retention: {}, workingMemoryMaxBytes: 16_384, batch: 200 });

export const mastraOf = (store: { mastra?: MastraConfig | undefined }): MastraConfig => store.mastra ?? { ...MASTRA_DEFAULTS, retention: {} };

export const THREADS = 'mastra_threads';
export const MESSAGES = 'mastra_messages';
export const RESOURCES = 'mastra_resources';
export const OBSERVATIONS = 'mastra_observational_memory';
/** The tables a Mastra memory store always has (LibSQLStore creates them at init). */
export const REQUIRED = [THREADS, MESSAGES, RESOURCES] as const;
