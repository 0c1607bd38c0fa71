import { z } from '../../vendor/zod.js';
import { pathField } from '../../config/path-field.js';

/**
 * A Mastra store (`@mastra/libsql`'s LibSQLStore file, docs/mastra-layout.md): the store's `db` is that file. This
 * section says where the semantic-recall vectors are (LibSQLVector's file, when not the same) and what prune keeps.
 */
export const mastraSchema = z.strictObject({
  vectorDb: pathField().optional()
    .describe('LibSQLVector\'s `url` as a path, when it is another file than `db`. Unset: the vectors are in `db`.'),
  retention: z.strictObject({
    messageDays: z.number().int().positive().optional()
      .describe('Messages created more than this many days ago go, each with its embeddings.'),
    threadIdleDays: z.number().int().positive().optional()
      .describe('Threads whose last activity (updatedAt) is older than this go whole: messages, embeddings, thread memory.'),
    maxMessagesPerThread: z.number().int().positive().optional()
      .describe('At most this many messages per thread: the oldest beyond go.'),
  }).default({})
    .describe('Retention for prune; an unset rule deletes nothing. Resource working memory is never pruned.'),
  workingMemoryMaxBytes: z.number().int().positive().default(16_384)
    .describe('A working memory longer than this (UTF-8 bytes) is reported by check: a prompt carries it every turn.'),
  batch: z.number().int().positive().max(10_000).default(200)
    .describe('Rows each of prune\'s and erase\'s transactions deletes: short, beside a live agent.'),
});

export type MastraConfig = z.infer<typeof mastraSchema>;
