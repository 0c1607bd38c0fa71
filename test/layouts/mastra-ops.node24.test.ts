import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Libsql from 'libsql';
import { tempDir } from '../helpers/store.js';
import { cli } from '../helpers/cli.js';
import { DIM, mastraSdk, type MastraSdk } from '../helpers/mastra-sdk.js';

/**
 * Each command memory-warden runs on a Mastra store, through the built CLI, on a store Mastra's SDK wrote (messages,
 * working memory, observations, embeddings), with the vectors in the store's file and in another (`mastra.vectorDb`):
 * after each, Mastra's own API reads threads, messages, working memory, observations and semantic recall, and an
 * agent writes and is recalled.
 */
const DAY = 86_400_000;
const bytesOf = (f: string) => [f, `${f}-wal`].filter(existsSync).map((p) => readFileSync(p).toString('latin1')).join('\n');

type Where = 'same file' | 'vector file';
interface World {
  db: string;
  vec: string;
  config: string;
  store: string[];
  ana: { old: string; recent: string; oldMessages: string[] };
  ben: string;
  sdk: () => Promise<MastraSdk>;
}

/** Each command, run as a person would; what it must have done beside leaving Mastra working. */
const OPS: { name: string; run: (w: World) => Promise<void> }[] = [
  {
    name: 'check',
    async run(w) {
      const r = cli(['check', ...w.store, '--json']);
      expect(r.code, r.stderr).toBe(0);
      expect(r.json()).toMatchObject({ ok: true, problems: [] });
    },
  },
  {
    name: 'prune',
    async run(w) {
      const r = cli(['run', 'prune', ...w.store, '--json']);
      expect(r.code, r.stderr).toBe(0);
      expect(r.json().ids).toEqual([w.ana.old]);
      // Its messages' embeddings are gone from the vector file, whichever file that is.
      expect(embeddingsOf(w.vec, w.ana.oldMessages)).toBe(0);
      expect(cli(['check', ...w.store, '--json']).json()).toMatchObject({ ok: true, gap: 0 });
    },
  },
  {
    name: 'digest',
    async run(w) {
      const r = cli(['digest', '--preview', '--config', w.config]);
      expect(r.code, r.stderr).toBe(0);
    },
  },
  {
    name: 'review confirm',
    async run(w) {
      const r = cli(['review', 'confirm', 'ben', ...w.store, '--json']);
      expect(r.code, r.stderr).toBe(0);
    },
  },
  {
    name: 'snapshot and restore',
    async run(w) {
      const made = cli(['run', 'snapshot', ...w.store, '--json']);
      expect(made.code, made.stderr).toBe(0);
      const dir = made.json().dir as string;
      // Written after the snapshot, in both files: the restore takes both back together.
      const s = await w.sdk();
      await s.thread('ben', ['Ben Okafor after the snapshot']);
      await s.close();
      // This test's process is the agent: Mastra's close() leaves libsql's native handles open until they are
      // garbage-collected, and restore sees them. It refuses, as it must with an agent running; --force overrides.
      const refused = cli(['restore', dir, ...w.store, '--json']);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toMatch(/is in use .*stop the agent first, or --force/);
      const done = cli(['restore', dir, ...w.store, '--force', '--json']);
      expect(done.code, done.stderr).toBe(0);
      for (const f of new Set([w.db, w.vec])) expect(bytesOf(f)).not.toContain('after the snapshot');
      expect(cli(['check', ...w.store, '--json']).json()).toMatchObject({ ok: true, problems: [] });
    },
  },
  {
    name: 'erase --user',
    async run(w) {
      const r = cli(['erase', ...w.store, '--user', 'ana', '--json']);
      expect(r.code, r.stderr).toBe(0);
      // Both files and both WALs: not one byte of her messages, working memory or observations.
      for (const f of new Set([w.db, w.vec])) {
        for (const secret of ['Ana Quintero', 'NORDEA-7781', 'lives in Oslo']) expect(bytesOf(f)).not.toContain(secret);
      }
      const s = await w.sdk();
      expect((await s.memory.listThreads({ filter: { resourceId: 'ana' } })).threads).toEqual([]);
      expect(await s.resourceWorkingMemory('ana')).toBeNull();
      expect(await s.observations('ana', w.ana.recent)).toBeUndefined();
      await s.close();
    },
  },
];

function embeddingsOf(vec: string, messageIds: string[]): number {
  const db = new Libsql(vec, { readonly: true } as never);
  try {
    return (db.prepare(`SELECT count(*) AS n FROM memory_messages_${DIM} WHERE json_extract(metadata, '$.message_id') IN (SELECT value FROM json_each(?))`).get(JSON.stringify(messageIds)) as { n: number }).n;
  } finally {
    db.close();
  }
}

describe.each<Where>(['same file', 'vector file'])('Mastra reads and writes its store after each command (%s)', (where) => {
  let tmp: ReturnType<typeof tempDir>;
  beforeEach(() => {
    tmp = tempDir('mw-mastra-ops-');
  });
  afterEach(() => {
    vi.useRealTimers();
    tmp.cleanup();
  });

  async function world(): Promise<World> {
    const db = join(tmp.dir, 'mastra.db');
    const vec = where === 'vector file' ? join(tmp.dir, 'vectors.db') : db;
    const config = join(tmp.dir, 'memory-warden.yaml');
    writeFileSync(config, JSON.stringify({
      stateDb: join(tmp.dir, 'state.db'), snapshot: { root: join(tmp.dir, 'backups') },
      stores: { s: { layout: 'mastra', db, mastra: { retention: { threadIdleDays: 30 }, ...(vec !== db ? { vectorDb: vec } : {}) } } },
    }));
    const sdk = () => mastraSdk(db, 'resource', { observe: true, vectorFile: vec });
    const s = await sdk();
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(Date.now() - 40 * DAY);
    const old = await s.thread('ana', ['Ana Quintero banks at Nordea', 'Ana Quintero has a peanut allergy']);
    await s.observe('ana', old.threadId, '- Ana Quintero banks at Nordea (NORDEA-7781)');
    vi.useRealTimers();
    const recent = await s.thread('ana', ['Ana Quintero moved to Oslo']);
    await s.workingMemory('ana', recent.threadId, '# Ana\n- lives in Oslo');
    await s.observe('ana', recent.threadId, '- Ana Quintero moved to Oslo (NORDEA-7781 closed)');
    const ben = await s.thread('ben', ['Ben Okafor reads poetry', 'Ben Okafor plays chess']);
    await s.workingMemory('ben', ben.threadId, '# Ben\n- reads poetry');
    await s.observe('ben', ben.threadId, '- Ben Okafor enjoys chess (QUILL-2207)');
    await s.agentTurn('ben', ben.threadId, 'What does Ben Okafor read?', 'Ben Okafor reads poetry');
    await s.close();
    return { db, vec, config, store: ['--config', config, '--store', 's'], ana: { old: old.threadId, recent: recent.threadId, oldMessages: old.messageIds }, ben: ben.threadId, sdk };
  }

  it.each(OPS.map((op) => [op.name, op] as const))('%s', async (_name, op) => {
    const w = await world();
    await op.run(w);
    const s = await w.sdk();
    try {
      // Threads, messages, working memory, observations and semantic recall, as Mastra reads them.
      expect((await s.memory.listThreads({ filter: { resourceId: 'ben' } })).threads.map((t: { id: string }) => t.id)).toEqual([w.ben]);
      const { messages } = await s.memory.recall({ threadId: w.ben, resourceId: 'ben', perPage: false });
      expect(JSON.stringify(messages)).toContain('Ben Okafor plays chess');
      expect(await s.resourceWorkingMemory('ben')).toContain('reads poetry');
      expect(await s.observations('ben', w.ben)).toContain('QUILL-2207');
      expect(await s.recall('ben', w.ben, 'Ben Okafor chess')).toContain('Ben Okafor plays chess');
      // An agent writes; Mastra embeds it and recalls it.
      await s.agentTurn('ben', w.ben, 'Ben Okafor sails on Sundays', 'Noted');
      expect(await s.recall('ben', w.ben, 'sails Sundays')).toContain('Ben Okafor sails on Sundays');
    } finally {
      await s.close();
    }
    const after = cli(['check', ...w.store, '--json']);
    expect(after.json().problems, after.stderr).toEqual([]);
  });

  it('check finds an embedding whose message is gone, across the files', async () => {
    const w = await world();
    const raw = new Libsql(w.db);
    raw.prepare('DELETE FROM mastra_messages WHERE id = ?').run(w.ana.oldMessages[0]);
    raw.close();
    const r = cli(['check', ...w.store, '--json']);
    expect(r.code).toBe(1);
    expect(r.json().problems.map((p: { code: string; count: number }) => [p.code, p.count])).toEqual([['mastra_embedding_without_message', 1]]);
  });
});
