import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { tempDir } from '../helpers/store.js';
import { cliAsync as cli } from '../helpers/cli.js';
import { DIM, mastraSdk, type MastraSdk } from '../helpers/mastra-sdk.js';
import { createTestDatabase, startPgvectorServer, type PgvectorServer, type TestDatabase } from '../helpers/pg.js';
import { verifyBytesGone } from '../../src/engines/postgres/bytes.js';
import { pgRows } from '../helpers/mastra-pg.js';

// Mastra's SDK on two servers, one of them PGlite (one backend for every client): each step waits on the other
// files' work on a loaded machine; a budget per test and hook, not a figure.
vi.setConfig({ testTimeout: 300_000, hookTimeout: 300_000 });

/**
 * The Mastra layout on PostgreSQL, on stores @mastra/pg writes through Mastra's own Agent and Memory: PostgresStore
 * and PgVector in one PGlite (with pgvector), and the split form, PostgresStore on the native PostgreSQL 15 (no
 * pgvector) and PgVector on PGlite (`mastra.pgvector.url`). Each command through the built CLI; after each, Mastra
 * lists the threads, reads the messages and the working memory, recalls semantically, and an agent writes and is
 * recalled. prune and erase are compared with Mastra's own deleteThread on a second store built the same way.
 */
const DAY = 86_400_000;
const VEC_TABLE = `memory_messages_${DIM}`;
type Form = 'one PGlite' | 'split';

interface World {
  storeUrl: string;
  vectorUrl: string;
  config: string;
  store: string[];
  env: Record<string, string>;
  ana: { old: string; recent: string; oldMessages: string[] };
  ben: string;
  sdk: () => Promise<MastraSdk>;
}

const rows = pgRows;

/** What a store holds, by text (ids differ between two builds): messages, thread titles, working memories, embeddings. */
async function contents(w: World) {
  const texts = (await rows(w.storeUrl, `SELECT content FROM mastra_messages`)).map((r) => JSON.parse(r.content).parts.map((p: any) => p.text ?? '').join('')).sort();
  const titles = (await rows(w.storeUrl, `SELECT title FROM mastra_threads`)).map((r) => r.title).sort();
  const memories = (await rows(w.storeUrl, `SELECT id, "workingMemory" FROM mastra_resources WHERE "workingMemory" IS NOT NULL`)).map((r) => `${r.id}:${r.workingMemory}`).sort();
  const vectors = (await rows(w.vectorUrl, `SELECT metadata->>'content' AS t FROM ${VEC_TABLE}`)).map((r) => r.t).sort();
  return { texts, titles, memories, vectors };
}

describe.each<Form>(['one PGlite', 'split'])('Mastra on @mastra/pg (%s)', (form) => {
  let tmp: ReturnType<typeof tempDir>;
  const servers: PgvectorServer[] = [];
  const dbs: TestDatabase[] = [];
  beforeEach(() => {
    tmp = tempDir('mw-mastra-pg-');
  });
  afterEach(async () => {
    vi.useRealTimers();
    for (const s of servers.splice(0)) await s.stop();
    for (const d of dbs.splice(0)) await d.drop();
    tmp.cleanup();
  });

  async function world(label = 'w'): Promise<World> {
    const vec = await startPgvectorServer();
    servers.push(vec);
    let storeUrl = vec.url;
    if (form === 'split') {
      const d = await createTestDatabase('mw_mastra_pg');
      dbs.push(d);
      storeUrl = d.url;
    }
    const config = join(tmp.dir, `memory-warden-${label}.yaml`);
    writeFileSync(config, JSON.stringify({
      stateDb: join(tmp.dir, `state-${label}.db`), snapshot: { root: join(tmp.dir, `backups-${label}`) },
      stores: { s: { engine: 'postgres', layout: 'mastra', postgres: { url: '${MW_MASTRA_PG}', schema: 'public' },
        mastra: { retention: { threadIdleDays: 30 }, ...(form === 'split' ? { pgvector: { url: '${MW_MASTRA_VEC}' } } : {}) } } },
    }));
    const env = { MW_MASTRA_PG: storeUrl, MW_MASTRA_VEC: vec.url };
    const sdk = () => mastraSdk('', 'resource', { pg: { storeUrl, vectorUrl: vec.url } });
    const s = await sdk();
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(Date.now() - 40 * DAY);
    const old = await s.thread('ana', ['Ana Quintero banks at Nordea', 'Ana Quintero has a peanut allergy']);
    vi.useRealTimers();
    const recent = await s.thread('ana', ['Ana Quintero moved to Oslo']);
    await s.workingMemory('ana', recent.threadId, '# Ana\n- lives in Oslo, account NORDEA-7781');
    const ben = await s.thread('ben', ['Ben Okafor reads poetry', 'Ben Okafor plays chess']);
    await s.workingMemory('ben', ben.threadId, '# Ben\n- reads poetry');
    await s.agentTurn('ben', ben.threadId, 'What does Ben Okafor read?', 'Ben Okafor reads poetry');
    await s.close();
    const w: World = { storeUrl, vectorUrl: vec.url, config, store: ['--config', config, '--store', 's'], env, ana: { old: old.threadId, recent: recent.threadId, oldMessages: old.messageIds }, ben: ben.threadId, sdk };
    const init = await cli(['init', ...w.store, '--json'], env);
    expect(init.code, init.stderr).toBe(0);
    return w;
  }

  async function mastraStillWorks(w: World) {
    const s = await w.sdk();
    try {
      expect((await s.memory.listThreads({ filter: { resourceId: 'ben' } })).threads.map((t: { id: string }) => t.id)).toEqual([w.ben]);
      const { messages } = await s.memory.recall({ threadId: w.ben, resourceId: 'ben', perPage: false });
      expect(JSON.stringify(messages)).toContain('Ben Okafor plays chess');
      expect(await s.resourceWorkingMemory('ben')).toContain('reads poetry');
      expect(await s.recall('ben', w.ben, 'Ben Okafor chess')).toContain('Ben Okafor plays chess');
      await s.agentTurn('ben', w.ben, 'Ben Okafor sails on Sundays', 'Noted');
      expect(await s.recall('ben', w.ben, 'sails Sundays')).toContain('Ben Okafor sails on Sundays');
    } finally {
      await s.close();
    }
    const after = await cli(['check', ...w.store, '--json'], w.env);
    expect(after.json().problems, after.stderr).toEqual([]);
  }

  it('check, prune, digest, review confirm, erase --user: each leaves Mastra reading and writing', async () => {
    const w = await world();
    const check = await cli(['check', ...w.store, '--json'], w.env);
    expect(check.code, check.stderr).toBe(0);
    expect(check.json()).toMatchObject({ ok: true, problems: [], rows: 7, gap: 2 });
    await mastraStillWorks(w);

    // The dry run counts what the prune after it deletes, the idle thread's embeddings included, and changes nothing.
    const dry = await cli(['run', 'prune', '--dry-run', ...w.store, '--json'], w.env);
    expect(dry.code, dry.stderr).toBe(0);
    expect((await rows(w.vectorUrl, `SELECT 1 FROM ${VEC_TABLE} WHERE metadata->>'thread_id' = $1`, [w.ana.old])).length).toBe(dry.json().counts.embeddings);
    const prune = await cli(['run', 'prune', ...w.store, '--json'], w.env);
    expect(prune.code, prune.stderr).toBe(0);
    expect(prune.json().ids).toEqual([w.ana.old]);
    expect(dry.json().counts).toEqual(prune.json().counts);
    expect(prune.json().counts.embeddings).toBe(2);
    expect(await rows(w.vectorUrl, `SELECT 1 FROM ${VEC_TABLE} WHERE metadata->>'message_id' = ANY($1::text[])`, [w.ana.oldMessages])).toEqual([]);
    expect(await rows(w.storeUrl, `SELECT 1 FROM mastra_messages WHERE thread_id = $1`, [w.ana.old])).toEqual([]);
    // Her working memory is not pruned: she is still active.
    expect((await rows(w.storeUrl, `SELECT "workingMemory" FROM mastra_resources WHERE id = 'ana'`))[0].workingMemory).toContain('Oslo');
    expect((await cli(['check', ...w.store, '--json'], w.env)).json()).toMatchObject({ ok: true, gap: 0 });
    await mastraStillWorks(w);

    const digest = await cli(['digest', '--preview', '--config', w.config], w.env);
    expect(digest.code, digest.stderr).toBe(0);
    expect(digest.stdout).toContain('lives in Oslo');

    const confirm = await cli(['review', 'confirm', 'ben', ...w.store, '--json'], w.env);
    expect(confirm.code, confirm.stderr).toBe(0);
    await mastraStillWorks(w);

    // A person replaces Ana's working memory, then clears it: Mastra reads the person's text, then none; expire is refused.
    const replaced = await cli(['review', 'supersede', ...w.store, '--fact', '# Ana\n- lives in Bergen', '--source', 'phone call', '--json', '--', 'ana'], w.env);
    expect(replaced.code, replaced.stderr).toBe(0);
    const s = await w.sdk();
    try {
      expect(await s.resourceWorkingMemory('ana')).toBe('# Ana\n- lives in Bergen');
    } finally {
      await s.close();
    }
    const cleared = await cli(['review', 'delete', ...w.store, '--json', '--', 'ana'], w.env);
    expect(cleared.code, cleared.stderr).toBe(0);
    const s2 = await w.sdk();
    try {
      expect(await s2.resourceWorkingMemory('ana')).toBeNull();
    } finally {
      await s2.close();
    }
    const expire = await cli(['review', 'expire', ...w.store, '--in', '3d', '--json', '--', 'ana'], w.env);
    expect(expire.code).toBe(2);
    expect(expire.stderr).toMatch(/no expiry/);
    await mastraStillWorks(w);

    const needles = ['Ana Quintero moved to Oslo', 'NORDEA-7781', w.ana.recent];
    const erase = await cli(['erase', '--user', 'ana', ...w.store, '--json'], w.env);
    expect(erase.code, erase.stderr + erase.stdout).toBe(0);
    const receipt = erase.json();
    expect(receipt.bytes.verdict).toBe('clean');
    expect(receipt.counts).toMatchObject({ threads: 1, resources: 1, bytesLeft: 0, bytesUnverified: 0 });
    expect(await rows(w.storeUrl, `SELECT id FROM mastra_threads WHERE "resourceId" = 'ana'`)).toEqual([]);
    expect(await rows(w.storeUrl, `SELECT id FROM mastra_resources WHERE id = 'ana'`)).toEqual([]);
    expect(await rows(w.vectorUrl, `SELECT 1 FROM ${VEC_TABLE} WHERE metadata->>'resource_id' = 'ana'`)).toEqual([]);
    // Read back independently: the store's tables and PgVector's, wherever they are.
    for (const [url, tables] of [[w.storeUrl, ['mastra_threads', 'mastra_messages', 'mastra_resources']], [w.vectorUrl, [VEC_TABLE]]] as const) {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      try {
        expect((await verifyBytesGone(c, { schema: 'public', tables, needles })).found).toEqual([]);
      } finally {
        await c.end();
      }
    }
    await mastraStillWorks(w);
  });

  it('mastra.pgvector.url naming the store\'s own database, spelled otherwise, is refused; another server alike in every name is not', async () => {
    const w = await world();
    // The store's database as another URL reaches it: postgresql:, localhost, the default port left out, a parameter.
    const u = new URL(w.storeUrl);
    const respelled = `postgresql://${u.username}@localhost${u.port === '5432' ? '' : `:${u.port}`}${u.pathname}?sslmode=disable`;
    expect(respelled).not.toBe(w.storeUrl);
    // A server started from the same cluster image (PGlite's: the same system identifier), its database named alike.
    const twin = await startPgvectorServer();
    servers.push(twin);
    const configWith = (url: string) => {
      const file = join(tmp.dir, `memory-warden-${Math.random().toString(36).slice(2, 8)}.yaml`);
      writeFileSync(file, JSON.stringify({
        stateDb: join(tmp.dir, 'state-w.db'), snapshot: { root: join(tmp.dir, 'backups-w') },
        stores: { s: { engine: 'postgres', layout: 'mastra', postgres: { url: '${MW_MASTRA_PG}', schema: 'public' }, mastra: { pgvector: { url } } } },
      }));
      return file;
    };
    const same = await cli(['run', 'snapshot', '--config', configWith('${MW_MASTRA_VEC_AGAIN}'), '--store', 's'], { ...w.env, MW_MASTRA_VEC_AGAIN: respelled });
    expect(same.code, same.stderr).toBe(2);
    expect(same.stderr.trim().split('\n')).toHaveLength(1);
    expect(same.stderr).toContain('stores.s.mastra.pgvector.url: names the store\'s own database and schema');
    const { LAYOUTS } = await import('../../src/layouts/registry.js');
    const { loadConfig } = await import('../../src/config/config.js');
    const refused = async (url: string) => {
      const config = loadConfig({ file: configWith('${MW_MASTRA_VEC_AGAIN}'), env: { ...w.env, MW_MASTRA_VEC_AGAIN: url } });
      return LAYOUTS.mastra.snapshotRefused!(config.stores.s!, 's');
    };
    expect(await refused(respelled)).toMatchObject({ field: 'mastra.pgvector.url' });
    expect(await refused(w.storeUrl)).toMatchObject({ field: 'mastra.pgvector.url' });
    expect(await refused(twin.url)).toBeUndefined();
  });

  it('erase --subject takes the messages, embeddings and working memory that mention it; --ids a thread', async () => {
    const w = await world();
    const r = await cli(['erase', '--subject', 'nordea', ...w.store, '--json'], w.env);
    expect(r.code, r.stderr + r.stdout).toBe(0);
    expect(r.json().bytes.verdict).toBe('clean');
    const left = await contents(w);
    expect(left.texts.filter((t) => /nordea/i.test(t))).toEqual([]);
    expect(left.vectors.filter((t) => /nordea/i.test(t))).toEqual([]);
    expect(left.memories.filter((t) => /nordea/i.test(t))).toEqual([]);
    expect(left.texts).toContain('Ana Quintero has a peanut allergy');
    const ids = await cli(['erase', '--ids', w.ana.recent, ...w.store, '--json'], w.env);
    expect(ids.code, ids.stderr + ids.stdout).toBe(0);
    expect(await rows(w.storeUrl, `SELECT 1 FROM mastra_threads WHERE id = $1`, [w.ana.recent])).toEqual([]);
    expect((await contents(w)).texts).not.toContain('Ana Quintero moved to Oslo');
    await mastraStillWorks(w);
  });

  it('check finds an embedding whose message is gone (what a raw delete leaves), across the databases; prune removes it and no other', async () => {
    const w = await world();
    await rows(w.storeUrl, `DELETE FROM mastra_messages WHERE id = $1`, [w.ana.oldMessages[0]]);
    const r = await cli(['check', ...w.store, '--json'], w.env);
    expect(r.code).toBe(1);
    expect(r.json().problems.map((p: { code: string; count: number }) => [p.code, p.count])).toEqual([['mastra_embedding_without_message', 1]]);
    // Another, of a thread prune keeps (the idle one's embeddings go with it): only the leftover pass can take it.
    const [recent] = await rows(w.storeUrl, `SELECT id FROM mastra_messages WHERE thread_id = $1`, [w.ana.recent]);
    await rows(w.storeUrl, `DELETE FROM mastra_messages WHERE id = $1`, [recent.id]);
    const before = await contents(w);
    expect(before.vectors).toContain('Ana Quintero moved to Oslo');
    const dry = await cli(['run', 'prune', '--dry-run', ...w.store, '--json'], w.env);
    expect(dry.json().leftovers).toEqual({ mastra_embedding_without_message: 2, mastra_embedding_without_thread: 0, mastra_observation_without_thread: 0 });
    expect((await cli(['run', 'prune', '--dry-run', ...w.store], w.env)).stdout).toContain('left behind by the SDK\'s own deletes, would remove: mastra_embedding_without_message 2');
    expect(await contents(w)).toEqual(before);
    const pruned = await cli(['run', 'prune', ...w.store, '--json'], w.env);
    expect(pruned.code, pruned.stderr).toBe(0);
    expect(pruned.json().ids).toEqual([w.ana.old]);
    expect(pruned.json().leftovers).toEqual({ mastra_embedding_without_message: 1, mastra_embedding_without_thread: 0, mastra_observation_without_thread: 0 }); // the other went with its thread
    const after = await contents(w);
    expect(after.vectors).toEqual(after.texts);
    expect(after.vectors).not.toContain('Ana Quintero moved to Oslo');
    expect(after.vectors).toContain('Ben Okafor reads poetry');
    await mastraStillWorks(w);
  });

  it('against Mastra\'s own deleteThread on a second store built the same way: the same rows go, and none of its leftovers stay in ours', async () => {
    const ours = await world('ours');
    const theirs = await world('theirs');
    expect(await contents(theirs)).toEqual(await contents(ours));
    // prune's idle thread, and erase --user's threads.
    expect((await cli(['run', 'prune', ...ours.store, '--json'], ours.env)).code).toBe(0);
    expect((await cli(['erase', '--user', 'ana', ...ours.store, '--json'], ours.env)).code).toBe(0);
    const s = await theirs.sdk();
    try {
      await s.memory.deleteThread(theirs.ana.old);
      await s.memory.deleteThread(theirs.ana.recent);
    } finally {
      await s.close(); // waits for the vectors' deletion Mastra started in the background
    }
    const [a, b] = [await contents(ours), await contents(theirs)];
    expect(a.texts).toEqual(b.texts);
    expect(a.titles).toEqual(b.titles);
    expect(a.vectors).toEqual(b.vectors);
    // Mastra has no call that deletes a resource: her working memory stays in theirs, not in ours.
    expect(b.memories.some((m) => m.startsWith('ana:'))).toBe(true);
    expect(a.memories.some((m) => m.startsWith('ana:'))).toBe(false);
  });
});
