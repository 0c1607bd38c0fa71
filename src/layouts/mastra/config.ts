import { z } from '../../vendor/zod.js';
import { pathField } from '../../config/path-field.js';

/**
 * A Mastra store (`@mastra/libsql`'s LibSQLStore file, docs/mastra-layout.md): the store's `db` is that file. This
 * section says where the semantic-recall vectors are (LibSQLVector's file, when not the same) and what prune keeps.
 */
export const mastraSchema = z.strictObject({
  /** LibSQLVector's `url` as a path, when it is another file than `db`. Unset: the vectors are in `db`. */
  vectorDb: pathField().optional(),
  /** Retention for prune; an unset rule deletes nothing. Resource working memory is never pruned. */
  retention: z.strictObject({
    /** Messages created more than this many days ago go, each with its embeddings. */
    messageDays: z.number().int().positive().optional(),
    /** Threads whose last activity (updatedAt) is older than this go whole: messages, embeddings, thread memory. */
    threadIdleDays: z.number().int().positive().optional(),
    /** At most this many messages per thread: the oldest beyond go. */
    maxMessagesPerThread: z.number().int().positive().optional(),
  }).default({}),
  /** A working memory longer than this (UTF-8 bytes) is reported by check: a prompt carries it every turn. */
  workingMemoryMaxBytes: z.number().int().positive().default(16_384),
  /** Rows each of prune's and erase's transactions deletes: short, beside a live agent. */
  batch: z.number().int().positive().max(10_000).default(200),
});

export type MastraConfig = z.infer<typeof mastraSchema>;
