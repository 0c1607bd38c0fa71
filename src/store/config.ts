import { z } from '../vendor/zod.js';
import { timerDuration } from '../time/timer-duration.js';
import { pathField } from '../config/path-field.js';
import { mem0CollectionConflict, mem0Schema } from '../layouts/mem0/config.js';
import { mastraSchema } from '../layouts/mastra/config.js';

/** How a SQLite row maps to its Qdrant point. */
export const pointIdModes = ['id', 'payload', 'uuid5'] as const;

export const qdrantSchema = z.strictObject({
  url: z.string().url(),
  /** From the environment only: `apiKey: ${QDRANT_API_KEY}`. */
  apiKey: z.string().optional(),
  collections: z.array(z.string().min(1)).min(1),
  /** `id`: point id is the row id; `payload`: a payload key holds the row id; `uuid5`: point id = UUIDv5(row id). */
  pointId: z.enum(pointIdModes).default('payload'),
  payloadKey: z.string().min(1).default('memory_id'),
  /** Payload key holding the fact text, compared with the row's fact by the consistency check. */
  textKey: z.string().min(1).optional(),
  /** Namespace for `pointId: uuid5`. */
  uuidNamespace: z.string().uuid().default('6ba7b811-9dad-11d1-80b4-00c04fd430c8'),
  timeoutMs: timerDuration('ms').int().positive().default(30_000),
  /**
   * Which live rows the consistency check expects a point for: `every` collection (default), `any` one of them
   * (collections partition the rows), or `none` (not every row is embedded; only orphans are looked for).
   */
  expectPoints: z.enum(['every', 'any', 'none']).default('every'),
});

export const storeSchema = z.strictObject({
  /** `warden`: the memory table of BRIEF.md; `mem0`: a mem0 deployment (history.db + Qdrant); `mastra`: Mastra's LibSQLStore file. */
  layout: z.enum(['warden', 'mem0', 'mastra']).default('warden'),
  /** The SQLite file: the memory store, or mem0's history.db. */
  db: pathField(),
  /** The machine that holds the file (its worker's host name); default: the machine reading the config. */
  host: z.string().regex(/^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,62}$/, 'a host name of letters, digits, _ . - (at most 63)').optional(),
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
