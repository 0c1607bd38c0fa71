import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from '../helpers/store.js';
import { cli } from '../helpers/cli.js';
import { mastraSdk } from '../helpers/mastra-sdk.js';

/**
 * On stores Mastra's own SDK wrote and rewrote (messages saved and deleted with Memory.deleteMessages, a working
 * memory the agent's tool rewrote, threads whose rows Mastra rewrites with every message): Mastra never turns
 * secure_delete on, so what it deleted or replaced stays in the files. `erase --user` leaves none of the person's
 * ids, resource id or texts in any page of the store's file, the vector file or their WALs, and Mastra still serves
 * everyone else.
 */
let tmp: ReturnType<typeof tempDir>;
beforeEach(() => (tmp = tempDir('mw-mastra-stale-')));
afterEach(() => tmp.cleanup());

function hits(files: string[], needles: readonly string[]): Record<string, number> {
  const bytes = files.flatMap((f) => [f, `${f}-wal`]).filter(existsSync).map((p) => readFileSync(p));
  const out: Record<string, number> = {};
  for (const n of new Set(needles)) {
    let count = 0;
    for (const form of new Set([n, JSON.stringify(n).slice(1, -1)])) for (const b of bytes) for (let at = b.indexOf(form); at >= 0; at = b.indexOf(form, at + 1)) count++;
    if (count > 0) out[n] = count;
  }
  return out;
}

describe.each(['same file', 'vector file'] as const)('vectors in the %s', (where) => {
  it('erase --user after Mastra\'s deleteMessages and working-memory rewrites: none of her bytes anywhere, exit 0', async () => {
    const db = join(tmp.dir, 'mastra.db');
    const vec = where === 'same file' ? db : join(tmp.dir, 'vectors.db');
    const files = [...new Set([db, vec])];
    let sdk = await mastraSdk(db, 'resource', where === 'same file' ? {} : { vectorFile: vec });
    const texts: string[] = [];
    const threads: string[] = [];
    const messages: string[] = [];
    const alice = await sdk.thread('user-alice', ['Alice keeps bees in the orchard', 'Alice sells honey on Saturdays']);
    for (let i = 0; i < 6; i++) {
      const said = [`Carol's passport number is K${4400 + i}871`, `Carol's sister Ingrid visits on day ${i}`, `Carol takes warfarin ${i} mg`];
      const t = await sdk.thread('user-carol', said, new Date(Date.UTC(2026, 10, 1 + i)));
      threads.push(t.threadId);
      messages.push(...t.messageIds);
      texts.push(...said);
      await sdk.thread('user-alice', [`Alice's hive ${i} swarmed`]);
    }
    const memories = ['# Carol\n- lives at Fjellveien 8', '# Carol\n- moved to Strandgata 3', '# Carol\n- works nights at the hospital'];
    for (const m of memories) await sdk.workingMemory('user-carol', threads[0]!, m);
    await sdk.workingMemory('user-alice', alice.threadId, '# Alice\n- beekeeper');
    // Mastra's own delete: her first three threads' messages, rows and embeddings, without secure_delete.
    await sdk.memory.deleteMessages(messages.slice(0, 9));
    await sdk.close();
    expect(Object.keys(hits(files, [...texts.slice(0, 9), ...memories.slice(0, 2)])).length).toBeGreaterThan(0);

    const config = join(tmp.dir, 'memory-warden.yaml');
    writeFileSync(config, JSON.stringify({ stateDb: join(tmp.dir, 'state.db'), stores: { s: { layout: 'mastra', db, mastra: vec === db ? {} : { vectorDb: vec } } } }));
    const r = cli(['erase', '--config', config, '--store', 's', '--user', 'user-carol', '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json().counts).toMatchObject({ threads: 6, resources: 1, bytesLeft: 0, pagesUnplaced: 0 });
    expect(hits(files, ['user-carol', ...threads, ...messages, ...texts, ...memories])).toEqual({});

    // Mastra serves Alice as before: her working memory, her messages, semantic recall.
    sdk = await mastraSdk(db, 'resource', where === 'same file' ? {} : { vectorFile: vec });
    try {
      expect(await sdk.resourceWorkingMemory('user-alice')).toBe('# Alice\n- beekeeper');
      expect(await sdk.resourceWorkingMemory('user-carol')).toBeNull();
      expect(await sdk.recall('user-alice', alice.threadId, 'honey')).toContain('Alice sells honey on Saturdays');
    } finally {
      await sdk.close();
    }
    expect(cli(['check', '--config', config, '--store', 's', '--json']).json()).toMatchObject({ ok: true, integrity: 'ok' });
  });
});
