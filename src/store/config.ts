import { z } from '../vendor/zod.js';
import { timerDuration } from '../time/timer-duration.js';
import { pathField } from '../config/path-field.js';
import { secretField } from '../config/secret-fields.js';
import { mem0CollectionConflict, mem0Schema } from '../layouts/mem0/config.js';
import { mastraSchema } from '../layouts/mastra/config.js';

/** How a SQLite row maps to its Qdrant point. */
export const pointIdModes = ['id', 'payload', 'uuid5'] as const;

export const qdrantSchema = z.strictObject({
  url: z.string().url().describe('Qdrant\'s URL.'),
  apiKey: secretField().optional().describe('From the environment only: `apiKey: ${QDRANT_API_KEY}`.'),
  collections: z.array(z.string().min(1)).min(1)
    .describe('Every collection holding this store\'s vectors: snapshotted, swept on erase, checked for consistency.'),
  pointId: z.enum(pointIdModes).default('payload')
    .describe('`id`: point id is the row id; `payload`: a payload key holds the row id; `uuid5`: point id = UUIDv5(row id).'),
  payloadKey: z.string().min(1).default('memory_id')
    .describe('Payload key holding the row id (payload mode; also read in uuid5 mode).'),
  textKey: z.string().min(1).optional()
    .describe('Payload key holding the fact text, compared with the row\'s fact by the consistency check.'),
  uuidNamespace: z.string().uuid().default('6ba7b811-9dad-11d1-80b4-00c04fd430c8')
    .describe('Namespace for `pointId: uuid5`.'),
  timeoutMs: timerDuration('ms').int().positive().default(30_000)
    .describe('Per Qdrant request (snapshot create, download and upload are not limited by it).'),
  expectPoints: z.enum(['every', 'any', 'none']).default('every')
    .describe('Which live rows the consistency check expects a point for: `every` collection (default), `any` one of them (collections partition the rows), or `none` (not every row is embedded; only orphans are looked for).'),
});

export const storeSchema = z.strictObject({
  layout: z.enum(['warden', 'mem0', 'mastra']).default('warden')
    .describe('`warden`: the memory table of BRIEF.md; `mem0`: a mem0 deployment (history.db + Qdrant); `mastra`: Mastra\'s LibSQLStore file.'),
  db: pathField().describe('The SQLite file: the memory store, or mem0\'s history.db.'),
  host: z.string().regex(/^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,62}$/, 'a host name of letters, digits, _ . - (at most 63)').optional()
    .describe('The machine that holds the file (its worker\'s host name); default: the machine reading the config.'),
  qdrant: qdrantSchema.optional(),
  /** `layout: mem0` only: mem0's collections and where its vectors live (src/layouts/mem0/config.ts). */
  mem0: mem0Schema.optional(),
  /** `layout: mastra` only: where its vectors are and what prune keeps (src/layouts/mastra/config.ts). */
  mastra: mastraSchema.optional(),
}).superRefine((store, ctx) => {
  const conflict = mem0CollectionConflict(store);
  if (conflict) ctx.addIssue({ code: 'custom', path: conflict.path, message: conflict.message });
});

export type QdrantConfig = z.infer<typeof qdrantSchema>;
export type StoreConfig = z.infer<typeof storeSchema>;
