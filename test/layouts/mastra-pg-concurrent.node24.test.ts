import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { cliAsync as cli } from '../helpers/cli.js';
import type { MastraSdk } from '../helpers/mastra-sdk.js';
import { bytesFound, messageText, pgRows, splitStore, VEC_TABLE, type SplitStore } from '../helpers/mastra-pg.js';

// Mastra's SDK on two servers, one of them PGlite (one backend for every client): each step waits on the other
// files' work on a loaded machine; a budget per test and hook, not a figure.
vi.setConfig({ testTimeout: 300_000, hookTimeout: 300_000 });

/**
 * Agents writing while prune and erase run, on the native PostgreSQL 15 (a backend per connection: PGlite would
 * serialise them): PostgresStore there, PgVector on PGlite (split form). Three writers, each a Mastra Memory with its
 * own PostgresStore and PgVector connections (one of them through @mastra/core's Agent), write without pause while
 * `run prune` and `erase --user` run through the CLI. Nothing they wrote may be lost, none of them may fail, and what
 * prune and erase must take is gone, erase's byte check clean. Then the one order of statements that can go wrong,
 * made to happen: Mastra's saveMessages between its insert and its thread's stamp while prune deletes that thread.
 */
const DAY = 86_400_000;

let s: SplitStore;
let t: { dan: string; ana: string; ben: string; benOld: string[] };

interface Writer { name: string; thread: string; written: string[]; errors: unknown[] }

/** A writer: its own Memory (own connections), a message at a time until `stop` is set. */
async function writer(name: string, thread: string, agent: boolean, stop: { now: boolean }): Promise<{ w: Writer; done: Promise<void> }> {
  const m: MastraSdk = await s.sdk();
  const w: Writer = { name, thread, written: [], errors: [] };
  const done = (async () => {
    try {
      for (let i = 0; !stop.now; i++) {
        const text = `${name} writes line ${i} ${randomUUID().slice(0, 8)}`;
        try {
          if (agent) await m.agentTurn(name, thread, text, 'Noted');
          else await m.memory.saveMessages({ messages: [{ id: randomUUID(), threadId: thread, resourceId: name, role: 'user', createdAt: new Date(), content: { format: 2, parts: [{ type: 'text', text }] } }] });
          w.written.push(text);
        } catch (err) {
          w.errors.push(err);
        }
      }
    } finally {
      await m.close();
    }
  })();
  return { w, done };
}

const written = (ws: Writer[]) => ws.reduce((n, w) => n + w.written.length, 0);

/** Waits until every writer has written `n` more messages than `from` (bounded by the test's own timeout). */
async function writesSince(ws: Writer[], from: number[], n = 1): Promise<void> {
  while (ws.some((w, i) => w.written.length < from[i]! + n)) {
    if (ws.some((w) => w.errors.length > 0)) return;
    await new Promise((r) => setTimeout(r, 20));
  }
}

beforeAll(async () => {
  s = await splitStore('conc', { threadIdleDays: 30, messageDays: 30 });
  await s.withSdk(async (m) => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(Date.now() - 40 * DAY);
    const dan = await m.thread('dan', ['Dan Moreau left a note about his bike', 'Dan Moreau owns a red bike']);
    const ben = await m.thread('ben', ['Ben Okafor first said hello']);
    vi.useRealTimers();
    const ana = await m.thread('ana', ['Ana Quintero banks at Nordea', 'Ana Quintero has a peanut allergy']);
    await m.workingMemory('ana', ana.threadId, '# Ana\n- account NORDEA-7781');
    t = { dan: dan.threadId, ana: ana.threadId, ben: ben.threadId, benOld: ben.messageIds };
  }).finally(() => vi.useRealTimers());
  await s.init();
}, 300_000);

afterAll(async () => {
  await s?.stop();
});

describe('agents writing while prune and erase run (native PostgreSQL 15, split form)', () => {
  it('nothing the agents wrote is lost, none of them fails; prune and erase take what they must, byte-verified', async () => {
    const stop = { now: false };
    const [cara, erin] = await s.withSdk(async (m) => [
      (await m.thread('cara', ['Cara Lindqvist keeps bees'])).threadId, (await m.thread('erin', ['Erin Walsh runs marathons'])).threadId]);
    // Ben writes on the thread he started 40 days ago (its first message past retention), Cara on hers, Erin through an Agent.
    const started = [await writer('ben', t.ben, false, stop), await writer('cara', cara, false, stop), await writer('erin', erin, true, stop)];
    const ws = started.map((x) => x.w);
    let prune: Awaited<ReturnType<typeof cli>>;
    let erase: Awaited<ReturnType<typeof cli>>;
    const during: number[] = [];
    try {
      await writesSince(ws, ws.map(() => 0));
      let before = written(ws);
      prune = await cli(['run', 'prune', ...s.store, '--json'], s.env, 180_000);
      during.push(written(ws) - before);
      before = written(ws);
      erase = await cli(['erase', '--user', 'ana', ...s.store, '--json'], s.env, 180_000);
      during.push(written(ws) - before);
      await writesSince(ws, ws.map((w) => w.written.length));
    } finally {
      stop.now = true;
      await Promise.all(started.map((x) => x.done));
    }
    expect(ws.flatMap((w) => w.errors.map((e) => `${w.name}: ${String(e)}`))).toEqual([]);
    // The agents wrote while each command ran: not a rate, the test's own proof that the commands met writers (with
    // none, everything below would hold of a quiet store). Three writers writing without pause through a whole CLI
    // process (its start alone takes most of a second) write at least once on any machine; a command that kept them
    // all waiting from its start to its end is what this catches.
    for (const n of during) expect(n).toBeGreaterThan(0);

    expect(prune.code, prune.stderr).toBe(0);
    expect(prune.json().ids.sort()).toEqual([t.dan, t.benOld[0]].sort());
    expect(erase.code, erase.stderr + erase.stdout).toBe(0);
    expect(erase.json().bytes.verdict).toBe('clean');
    // What the read-back cannot see is said of each server: the WAL of the store's and of the vectors'.
    expect(erase.json().bytes.unseen.filter((u: any) => u.what === 'wal').map((u: any) => u.facts.server).sort()).toEqual(["the store's", "the vectors'"]);
    expect(erase.json().counts).toMatchObject({ threads: 1, resources: 1, bytesLeft: 0, bytesUnverified: 0 });

    // Every message an agent wrote is there, in its thread, with its embedding.
    const texts = new Map((await pgRows(s.storeUrl, `SELECT content, thread_id FROM mastra_messages`)).map((r) => [messageText(r.content), r.thread_id]));
    const vectors = new Set((await pgRows(s.vectorUrl, `SELECT metadata->>'content' AS t FROM ${VEC_TABLE}`)).map((r) => r.t));
    for (const w of ws) {
      expect(w.written.filter((x) => texts.get(x) !== w.thread), w.name).toEqual([]);
      expect(w.written.filter((x) => !vectors.has(x)), w.name).toEqual([]);
    }
    // What prune and erase had to take is gone.
    expect(texts.has('Ben Okafor first said hello')).toBe(false);
    expect(await pgRows(s.storeUrl, `SELECT id FROM mastra_threads WHERE id = ANY($1::text[]) OR "resourceId" = 'ana'`, [[t.dan, t.ana]])).toEqual([]);
    expect(await pgRows(s.storeUrl, `SELECT id FROM mastra_resources WHERE id = 'ana'`)).toEqual([]);
    expect([...vectors].filter((x) => /Dan Moreau|Ana Quintero|first said hello/.test(x))).toEqual([]);
    const needles = ['Ana Quintero banks at Nordea', 'NORDEA-7781', t.ana];
    expect(await bytesFound(s.storeUrl, ['mastra_threads', 'mastra_messages', 'mastra_resources'], needles)).toEqual([]);
    expect(await bytesFound(s.vectorUrl, [VEC_TABLE], needles)).toEqual([]);

    const check = await cli(['check', ...s.store, '--json'], s.env);
    expect(check.json().problems, check.stderr).toEqual([]);
    await s.withSdk(async (m) => {
      expect((await m.memory.listThreads({ filter: { resourceId: 'ben' } })).threads.map((x: { id: string }) => x.id)).toEqual([t.ben]);
      const last = ws[0]!.written.at(-1)!;
      expect(await m.recall('ben', t.ben, last)).toContain(last);
    });
  }, 600_000);

  it('a message Mastra is saving into an idle thread while prune takes it: the thread stays, whole, with its embeddings', async () => {
    const gus = await s.withSdk(async (m) => {
      vi.useFakeTimers({ toFake: ['Date'] });
      vi.setSystemTime(Date.now() - 40 * DAY);
      return m.thread('gus', ['Gus Hansen mends clocks']);
    }).finally(() => vi.useRealTimers());
    // Mastra's PostgresStore.saveMessages, statement for statement: the message inserted, then the thread stamped, one
    // transaction. Held open between the two while prune runs.
    const agent = new pg.Client({ connectionString: s.storeUrl });
    await agent.connect();
    const watch = new pg.Client({ connectionString: s.storeUrl });
    await watch.connect();
    try {
      const now = new Date().toISOString();
      await agent.query('BEGIN');
      await agent.query(`INSERT INTO mastra_messages (id, thread_id, content, "createdAt", "createdAtZ", role, type, "resourceId") VALUES ($1, $2, $3, $4, $5, 'user', 'v2', 'gus')`,
        [randomUUID(), gus.threadId, JSON.stringify({ format: 2, parts: [{ type: 'text', text: 'Gus Hansen is back' }] }), now, now]);
      let settled = false;
      const running = cli(['run', 'prune', ...s.store, '--json'], s.env, 180_000).finally(() => (settled = true));
      // Until prune waits for the agent's transaction (or, not waiting, is done).
      const waiting = async () => (await watch.query(`SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'mastra_messages' AND NOT l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`)).rows.length > 0;
      while (!settled && !(await waiting())) await new Promise((r) => setTimeout(r, 5));
      await agent.query(`UPDATE mastra_threads SET "updatedAt" = $1, "updatedAtZ" = $2 WHERE id = $3`, [now, now, gus.threadId]);
      await agent.query('COMMIT');
      const prune = await running;
      expect(prune.code, prune.stderr).toBe(0);
      expect(prune.json().ids).not.toContain(gus.threadId);
    } finally {
      await agent.end();
      await watch.end();
    }
    expect(await pgRows(s.storeUrl, `SELECT id FROM mastra_threads WHERE id = $1`, [gus.threadId])).toHaveLength(1);
    expect((await pgRows(s.storeUrl, `SELECT content FROM mastra_messages WHERE thread_id = $1`, [gus.threadId])).map((r) => messageText(r.content)).sort())
      .toEqual(['Gus Hansen is back', 'Gus Hansen mends clocks']);
    expect(await pgRows(s.vectorUrl, `SELECT 1 FROM ${VEC_TABLE} WHERE metadata->>'message_id' = $1`, [gus.messageIds[0]])).toHaveLength(1);
    const check = await cli(['check', ...s.store, '--json'], s.env);
    expect(check.json().problems, check.stderr).toEqual([]);
  }, 300_000);
});
