import { z } from 'zod';

/**
 * Where a mem0 deployment keeps what memory-warden looks after. The history file is the store's `db`, the Qdrant
 * server its `qdrant.url`; this section names mem0's collections and, for the tmpfs check, where the vectors live
 * on this machine. Defaults are mem0's own.
 */
export const mem0Schema = z.strictObject({
  /** mem0's `vector_store.config.collection_name`. */
  collection: z.string().min(1).default('mem0'),
  /** mem0 derives it as `<collection>_entities`; set it only if yours differs. */
  entityCollection: z.string().min(1).optional(),
  /** `auto` finds `history` (Python mem0) or `memory_history` (the TypeScript port). */
  historyTable: z.enum(['auto', 'history', 'memory_history']).default('auto'),
  /**
   * Folders on this machine that hold the vectors: mem0's local Qdrant `path` (default `/tmp/qdrant`) or the
   * Qdrant server's storage folder. The integrity check reports any that sits on tmpfs (lost at reboot).
   */
  vectorPaths: z.array(z.string().min(1)).default([]),
  /** Points read per Qdrant scroll page by prune, integrity, digest and erase. */
  pageSize: z.number().int().positive().max(10_000).default(256),
});

export type Mem0Config = z.infer<typeof mem0Schema>;

export function entityCollectionOf(cfg: Mem0Config): string {
  return cfg.entityCollection ?? `${cfg.collection}_entities`;
}
