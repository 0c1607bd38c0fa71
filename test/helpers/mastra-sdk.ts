import { randomUUID } from 'node:crypto';

/**
 * Mastra memory stores written only through Mastra's own packages (`@mastra/memory`, `@mastra/libsql`,
 * `@mastra/core` agents; Node 22.13+), offline: the AI SDK's mock language model and a deterministic embedder.
 */

export { DIM, embed } from './mastra-embed.js';
import { embed } from './mastra-embed.js';

export interface MastraSdk {
  memory: any;
  storage: any;
  vector: any;
  /** A new thread of `resource` with these user messages (createdAt `at`), embedded by Mastra. */
  thread(resource: string, texts: string[], at?: Date): Promise<{ threadId: string; messageIds: string[] }>;
  workingMemory(resource: string, threadId: string, text: string): Promise<void>;
  /** An agent turn through @mastra/core's Agent: Mastra saves both messages and embeds them. */
  agentTurn(resource: string, threadId: string, text: string, reply: string): Promise<void>;
  /** Semantic recall through Mastra: the texts it returns for `query`. */
  recall(resource: string, threadId: string, query: string): Promise<string[]>;
  /** The resource's working memory as Mastra's storage reads it (null: no resource row or none written). */
  resourceWorkingMemory(resource: string): Promise<string | null>;
  /** Observational memory (opts.observe): the mock observer notes `observations` (lines "- …") for the thread now. */
  observe(resource: string, threadId: string, observations: string): Promise<boolean>;
  /** The thread's active observations as Mastra reads them (undefined: none). */
  observations(resource: string, threadId: string): Promise<string | undefined>;
  close(): Promise<void>;
}

export interface MastraSdkOptions {
  /** LibSQLVector on another file than the store's (memory-warden's `mastra.vectorDb`). */
  vectorFile?: string;
  /** Observational memory on (thread scope), its observer the AI SDK's mock model, its groups indexed (retrieval.vector). */
  observe?: boolean;
  /**
   * @mastra/pg instead of @mastra/libsql (`file` is then ignored): PostgresStore on `storeUrl`, PgVector on
   * `vectorUrl` (the same database, or another server: the split form).
   */
  pg?: { storeUrl: string; vectorUrl: string; schemaName?: string; vectorSchemaName?: string; vectorPool?: Record<string, unknown> };
}

export async function mastraSdk(file: string, scope: 'resource' | 'thread' = 'resource', opts: MastraSdkOptions = {}): Promise<MastraSdk> {
  const [{ Memory }, { LibSQLStore, LibSQLVector }, { MockEmbeddingModelV3, MockLanguageModelV3 }, { Agent }, { simulateReadableStream }] = await Promise.all([
    import('@mastra/memory'), import('@mastra/libsql'), import('ai/test'), import('@mastra/core/agent'), import('ai'),
  ]);
  const embedder = new MockEmbeddingModelV3({ doEmbed: async ({ values }: { values: string[] }) => ({ embeddings: values.map(embed), warnings: [] }) } as never);
  let storage: any;
  let vector: any;
  if (opts.pg) {
    const { PostgresStore, PgVector } = await import('@mastra/pg');
    storage = new PostgresStore({ id: 'store', connectionString: opts.pg.storeUrl, ...(opts.pg.schemaName ? { schemaName: opts.pg.schemaName } : {}) } as never);
    vector = new PgVector({ id: 'vectors', connectionString: opts.pg.vectorUrl, ...(opts.pg.vectorSchemaName ? { schemaName: opts.pg.vectorSchemaName } : {}), ...(opts.pg.vectorPool ? { pgPoolOptions: opts.pg.vectorPool } : {}) } as never);
  } else {
    storage = new LibSQLStore({ id: 'store', url: `file:${file}` });
    vector = new LibSQLVector({ id: 'vectors', url: `file:${opts.vectorFile ?? file}` });
  }
  // The observer streams what the test says it noted, once; any other observation (an agent turn's) notes nothing personal.
  let noted = '';
  const observer = new MockLanguageModelV3({
    doStream: async () => {
      const text = `<observations>\n${noted || '- The user chatted with the agent.'}\n</observations>`;
      noted = '';
      return { stream: simulateReadableStream({ chunks: [{ type: 'stream-start', warnings: [] }, { type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: text }, { type: 'text-end', id: 't' }, { type: 'finish', finishReason: 'stop', usage: { inputTokens: { total: 1 }, outputTokens: { total: 1 } } }] }) };
    },
  } as never);
  // Mastra stores its observational-memory config, model object included, in each record: the mock would carry every
  // prompt it was sent (other people's messages) into the next record; a real model's object holds no prompts.
  Object.assign(observer, { toJSON: () => ({ provider: 'mock', modelId: 'observer' }) });
  const observationalMemory = opts.observe ? { model: observer, scope: 'thread', observation: { messageTokens: 10, bufferTokens: false }, reflection: { observationTokens: 100_000 }, retrieval: { vector: true } } : undefined;
  const memory = new Memory({ storage, vector, embedder, options: { lastMessages: 10, semanticRecall: { topK: 3, messageRange: 0, scope: 'resource' }, workingMemory: { enabled: true, scope }, ...(observationalMemory ? { observationalMemory } : {}) } } as never);
  const textOf = (m: any): string => (typeof m.content === 'string' ? m.content : (m.content?.parts ?? []).map((p: any) => p.text ?? '').join(''));
  return {
    memory, storage, vector,
    async thread(resource, texts, at = new Date()) {
      const threadId = randomUUID();
      await memory.saveThread({ thread: { id: threadId, resourceId: resource, title: `thread of ${resource}`, createdAt: at, updatedAt: at } });
      const messageIds = texts.map(() => randomUUID());
      await memory.saveMessages({ messages: texts.map((text, i) => ({ id: messageIds[i]!, threadId, resourceId: resource, role: 'user', createdAt: new Date(at.getTime() + i), content: { format: 2, parts: [{ type: 'text', text }] } })) });
      return { threadId, messageIds };
    },
    async workingMemory(resource, threadId, text) {
      await memory.updateWorkingMemory({ threadId, resourceId: resource, workingMemory: text });
    },
    async agentTurn(resource, threadId, text, reply) {
      const model = new MockLanguageModelV3({
        doGenerate: async () => ({ content: [{ type: 'text', text: reply }], finishReason: 'stop', usage: { inputTokens: { total: 1 }, outputTokens: { total: 1 } }, warnings: [] }),
      } as never);
      const agent = new Agent({ id: 'helper', name: 'helper', instructions: 'Help.', model, memory } as never);
      await agent.generate(text, { memory: { thread: threadId, resource } } as never);
    },
    async recall(resource, threadId, query) {
      const r = await memory.recall({ threadId, resourceId: resource, vectorSearchString: query, threadConfig: { semanticRecall: { topK: 5, messageRange: 0, scope: 'resource' } } });
      return (r.messages as any[]).map(textOf);
    },
    async resourceWorkingMemory(resource) {
      const domain: any = typeof storage.getStore === 'function' ? await storage.getStore('memory') : storage.stores?.memory;
      const r = await domain.getResourceById({ resourceId: resource });
      return r?.workingMemory ?? null;
    },
    async observe(resource, threadId, observations) {
      noted = observations;
      const om = await memory.omEngine;
      if (!om) throw new Error('observe: this MastraSdk was opened without { observe: true }');
      return (await om.observe({ threadId, resourceId: resource })).observed;
    },
    async observations(resource, threadId) {
      const om = await memory.omEngine;
      return om ? om.getObservations(threadId, resource) : undefined;
    },
    async close() {
      await memory.settled();
      await storage.close?.();
      await vector.close?.();
      await vector.disconnect?.();
    },
  };
}
