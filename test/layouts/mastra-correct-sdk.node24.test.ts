import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { tempDir } from '../helpers/store.js';
import { validateConfig, type Config } from '../../src/config/config.js';
import { openStore } from '../../src/layouts/open.js';
import { openStateDb } from '../../src/state/state.js';
import { deleteMemory, supersedeMemory, type ReviewDecision } from '../../src/drift/review.js';
import { LAYOUTS } from '../../src/layouts/registry.js';

/**
 * A person's replace and clear of a working memory, on stores Mastra's own SDK wrote (Node 22.13+): afterwards
 * Mastra's API reads the person's text (or none), the agent is shown it, and the agent still updates it through its
 * own `updateWorkingMemory` tool, for Markdown working memory (resource and thread scope) and JSON (a schema).
 */
let tmp: ReturnType<typeof tempDir>;
let file: string;
let config: Config;
let open: Agentic | undefined;
beforeEach(() => {
  tmp = tempDir('mw-mastra-correct-sdk-');
  file = join(tmp.dir, 'mastra.db');
  config = validateConfig({ stateDb: join(tmp.dir, 'state.db'), stores: { s: { layout: 'mastra', db: file } } });
});
afterEach(async () => {
  await open?.close();
  open = undefined;
  tmp.cleanup();
});

interface Agentic {
  memory: any;
  /** One agent turn whose model calls `updateWorkingMemory` with `memory` (skipped when undefined), then answers; returns the system prompt the model was given. */
  turn(resource: string, threadId: string, memory?: unknown): Promise<string>;
  read(resource: string, threadId: string): Promise<string | null>;
  close(): Promise<void>;
}

/** Mastra's Memory on the file, an Agent with the AI SDK's mock model: no network, no embedder (no semantic recall). */
async function mastra(scope: 'resource' | 'thread', json = false): Promise<Agentic> {
  const [{ Memory }, { LibSQLStore }, { MockLanguageModelV3 }, { Agent }, { z }] = await Promise.all([
    import('@mastra/memory'), import('@mastra/libsql'), import('ai/test'), import('@mastra/core/agent'), import('zod'),
  ]);
  const schema = json ? z.object({ name: z.string().optional(), city: z.string().optional(), pets: z.array(z.string()).optional() }) : undefined;
  const storage = new LibSQLStore({ id: 'store', url: `file:${file}` });
  const memory = new Memory({ storage, options: { lastMessages: 10, semanticRecall: false, workingMemory: { enabled: true, scope, ...(schema ? { schema } : {}) } } } as never);
  const usage = { inputTokens: { total: 1 }, outputTokens: { total: 1 } };
  return {
    memory,
    async turn(resource, threadId, update) {
      let calls = 0;
      let system = '';
      const model = new MockLanguageModelV3({
        doGenerate: async (options: any) => {
          if (calls++ === 0) system = (options.prompt as any[]).filter((m) => m.role === 'system').map((m) => m.content).join('\n');
          if (calls === 1 && update !== undefined) {
            return { content: [{ type: 'tool-call', toolCallId: 'wm-1', toolName: 'updateWorkingMemory', input: JSON.stringify({ memory: update }) }], finishReason: { unified: 'tool-calls', raw: 'tool_calls' }, usage, warnings: [] };
          }
          return { content: [{ type: 'text', text: 'noted' }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] };
        },
      } as never);
      const agent = new Agent({ id: 'helper', name: 'helper', instructions: 'Help.', model, memory } as never);
      await agent.generate('Please remember this.', { memory: { thread: threadId, resource }, maxSteps: 3 } as never);
      return system;
    },
    read: async (resource, threadId) => memory.getWorkingMemory({ threadId, resourceId: resource }),
    async close() {
      await memory.settled?.();
      await (storage as any).close?.();
    },
  };
}

/** A person's decision through the same functions `memory-warden review supersede|delete` and the page call. */
async function decide(fn: (store: ReturnType<typeof openStore>, state: ReturnType<typeof openStateDb>) => Promise<ReviewDecision>): Promise<ReviewDecision> {
  await open?.close();
  open = undefined;
  const store = openStore(config, 's');
  const state = openStateDb(join(tmp.dir, 'state.db'));
  try {
    return await fn(store, state);
  } finally {
    state.close();
    store.close();
  }
}
const replace = (id: string, fact: string) => decide((store, state) => supersedeMemory(store, state, id, { fact, source: 'phone call' }, Date.now()));
const clear = (id: string) => decide((store, state) => deleteMemory(store, state, id, Date.now()));

describe.each(['resource', 'thread'] as const)('a person corrects %s-scoped Markdown working memory Mastra wrote', (scope) => {
  const idOf = (threadId: string) => (scope === 'resource' ? 'ana' : threadId);

  it('replaced: Mastra reads the person\'s text, the agent is shown it, and the agent\'s own update then wins', async () => {
    open = await mastra(scope);
    const threadId = crypto.randomUUID();
    await open.turn('ana', threadId, '# Ana\n- lives in Oslo');
    expect(await open.read('ana', threadId)).toBe('# Ana\n- lives in Oslo');
    const text = '# Ana\n- lives in Bergen (told us <b>2026-11-28</b>)';
    expect(await replace(idOf(threadId), text)).toMatchObject({ action: 'supersede', resolution: 'replaced', id: idOf(threadId) });

    open = await mastra(scope);
    expect(await open.read('ana', threadId)).toBe(text);
    const system = await open.turn('ana', threadId, '# Ana\n- lives in Bergen\n- has a cat');
    expect(system).toContain('lives in Bergen (told us <b>2026-11-28</b>)');
    expect(await open.read('ana', threadId)).toBe('# Ana\n- lives in Bergen\n- has a cat');
  });

  it('cleared: Mastra reads no working memory, the agent is shown none, and the agent writes it again', async () => {
    open = await mastra(scope);
    const threadId = crypto.randomUUID();
    await open.turn('ana', threadId, '# Ana\n- secret: the cellar key is under the mat');
    expect(await clear(idOf(threadId))).toMatchObject({ action: 'delete', resolution: 'deleted', deleted: [idOf(threadId)] });

    open = await mastra(scope);
    expect(await open.read('ana', threadId)).toBeNull();
    expect(await open.memory.getThreadById({ threadId })).toMatchObject({ id: threadId, resourceId: 'ana' });
    const system = await open.turn('ana', threadId, '# Ana\n- starts afresh');
    expect(system).not.toContain('cellar key');
    expect(await open.read('ana', threadId)).toBe('# Ana\n- starts afresh');
    // And memory-warden reviews the new text again.
    await open.close();
    open = undefined;
    const s = openStore(config, 's');
    try {
      expect((await LAYOUTS.mastra.currentMemory(s, idOf(threadId)))?.fact).toBe('# Ana\n- starts afresh');
    } finally {
      s.close();
    }
  });
});

describe('a person corrects JSON working memory (an agent with a schema)', () => {
  it('a JSON object replaces it and the agent\'s update merges into the person\'s; anything else is refused, nothing changed', async () => {
    open = await mastra('resource', true);
    const threadId = crypto.randomUUID();
    await open.turn('ben', threadId, { name: 'Ben', city: 'Lagos' });
    expect(JSON.parse((await open.read('ben', threadId))!)).toEqual({ name: 'Ben', city: 'Lagos' });

    await expect(replace('ben', 'Ben moved to Accra')).rejects.toThrow(/is JSON .*the replacement must be a JSON object too; nothing changed/);
    open = await mastra('resource', true);
    expect(JSON.parse((await open.read('ben', threadId))!)).toEqual({ name: 'Ben', city: 'Lagos' });

    const json = '{"name":"Ben","city":"Accra","pets":["dog"]}';
    expect(await replace('ben', json)).toMatchObject({ resolution: 'replaced' });
    open = await mastra('resource', true);
    expect(await open.read('ben', threadId)).toBe(json);
    // Mastra's tool merges the agent's fields into what is stored: the person's fields are the base it merges into.
    await open.turn('ben', threadId, { pets: ['dog', 'parrot'] });
    expect(JSON.parse((await open.read('ben', threadId))!)).toEqual({ name: 'Ben', city: 'Accra', pets: ['dog', 'parrot'] });
  });
});
