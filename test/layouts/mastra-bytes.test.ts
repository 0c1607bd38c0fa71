import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Libsql from 'libsql';
import { tempDir } from '../helpers/store.js';
import { cli } from '../helpers/cli.js';
import { MastraFixture } from './mastra-fixture.js';
import { DIM } from '../helpers/mastra-embed.js';

/**
 * What of a person a Mastra store's files still hold after `erase --user`, byte for byte, in every page, live or free,
 * of the file and its WAL: after memory-warden's prune, after Mastra's own deletes and rewrites (which never turn
 * secure_delete on), and what the receipt's bytesLeft counts (the person's own ids and texts, not what other people's
 * rows also say). Stores written as @mastra/libsql writes them (mastra-fixture.ts), through the built CLI.
 */
const DAY = 86_400_000;
const NOW = Date.UTC(2026, 10, 29, 12);
const VEC = `memory_messages_${DIM}`;

let tmp: ReturnType<typeof tempDir>;
let db: string;
beforeEach(() => {
  tmp = tempDir('mw-mastra-bytes-');
  db = join(tmp.dir, 'mastra.db');
});
afterEach(() => tmp.cleanup());

function config(mastra: Record<string, unknown> = {}): string {
  const file = join(tmp.dir, 'warden.yaml');
  writeFileSync(file, JSON.stringify({ stateDb: join(tmp.dir, 'state.db'), stores: { s: { layout: 'mastra', db, mastra } } }));
  return file;
}

/** How often each needle is in the store's file or its WAL, as written or JSON-escaped. */
function hits(needles: readonly string[]): Record<string, number> {
  const files = [db, `${db}-wal`].filter(existsSync).map((p) => readFileSync(p));
  const out: Record<string, number> = {};
  for (const n of new Set(needles)) {
    let count = 0;
    for (const form of new Set([n, JSON.stringify(n).slice(1, -1)])) {
      for (const b of files) for (let at = b.indexOf(form); at >= 0; at = b.indexOf(form, at + 1)) count++;
    }
    if (count > 0) out[n] = count;
  }
  return out;
}

interface Person {
  threads: string[];
  messages: string[];
  texts: string[];
}

/**
 * Three people writing over 60 days, interleaved as an agent serving them would: a thread each a day, a message in
 * it and a second one later (the thread's updatedAt moves with it: Mastra rewrites the row). Carol's texts are hers
 * alone; `workingMemory` puts each thread's first text in its metadata too.
 */
function conversations(fx: MastraFixture, workingMemory: boolean): Record<string, Person> {
  const people: Record<string, Person> = {};
  for (let i = 0; i < 60; i++) {
    for (const who of ['user-alice', 'user-bob', 'user-carol']) {
      const p = (people[who] ??= { threads: [], messages: [], texts: [] });
      const first = `${who} day ${i}: the ${who === 'user-carol' ? 'heron' : 'sparrow'} note ${i * 7919}`;
      const second = `${who} later ${i}: account ${who === 'user-carol' ? 'NO-' : 'OK-'}${i * 104729} confirmed`;
      const t = fx.thread(who, first, NOW - (70 - i) * DAY, NOW - (70 - i) * DAY, workingMemory);
      p.threads.push(t);
      p.messages.push((fx.db.prepare('SELECT id FROM mastra_messages WHERE thread_id = ?').get(t) as { id: string }).id);
      p.messages.push(fx.message(t, who, second, NOW - (69 - i) * DAY));
      fx.touch(t, NOW - (69 - i) * DAY);
      p.texts.push(first, second);
    }
  }
  return people;
}

const erase = (file: string, ...more: string[]) => cli(['erase', '--config', file, '--store', 's', '--user', 'user-carol', '--json', '--now', new Date(NOW).toISOString(), ...more]);

describe('erase --user leaves no byte of the person in any page of the file', () => {
  it('after memory-warden\'s prune took her older messages (their ids known only to its ledger)', () => {
    const fx = MastraFixture.create(db);
    const people = conversations(fx, true);
    fx.close();
    const file = config({ retention: { messageDays: 30 } });
    const pruned = cli(['run', 'prune', '--config', file, '--store', 's', '--json', '--now', new Date(NOW).toISOString()]);
    expect(pruned.code, pruned.stderr).toBe(0);
    expect(pruned.json().deleted).toBeGreaterThan(100);

    const r = erase(file);
    expect(r.code, r.stderr).toBe(0);
    const carol = people['user-carol']!;
    expect(hits(['user-carol', ...carol.threads, ...carol.messages, ...carol.texts])).toEqual({});
    expect(r.json().counts).toMatchObject({ bytesLeft: 0, pagesUnplaced: 0 });
    // Everyone else's live rows are untouched.
    const alice = people['user-alice']!;
    expect(Object.keys(hits([...alice.threads, ...alice.texts.slice(-20)]))).toHaveLength(alice.threads.length + 20);
    expect(cli(['check', '--config', file, '--store', 's', '--json']).json()).toMatchObject({ ok: true, integrity: 'ok' });
  });

  it('after Mastra\'s own deleteMessages, and working memory Mastra rewrote, without secure_delete', () => {
    const fx = MastraFixture.create(db);
    const people = conversations(fx, false);
    const carol = people['user-carol']!;
    // Memory.deleteMessages: the rows in one transaction, their embeddings after; Mastra never sets secure_delete.
    fx.db.transaction(() => fx.db.prepare('DELETE FROM mastra_messages WHERE id IN (SELECT value FROM json_each(?))').run(JSON.stringify(carol.messages)))();
    fx.db.prepare(`DELETE FROM ${VEC} WHERE json_extract(metadata, '$.message_id') IN (SELECT value FROM json_each(?))`).run(JSON.stringify(carol.messages));
    // Her resource working memory, rewritten by the agent's tool turn after turn: only the last text is live.
    const memories = ['# Carol\n- lives in Tromsø, flat 4B', '# Carol\n- moved to Bodø, Storgata 12', '# Carol\n- allergic to penicillin'];
    memories.forEach((m, i) => fx.resourceMemory('user-carol', m, NOW - (10 - i) * DAY));
    fx.resourceMemory('user-alice', '# Alice\n- likes tea', NOW - DAY);
    fx.close();
    expect(Object.keys(hits([...carol.texts, ...memories])).length).toBeGreaterThan(0);

    const r = erase(config());
    expect(r.code, r.stderr).toBe(0);
    expect(hits(['user-carol', ...carol.threads, ...carol.messages, ...carol.texts, ...memories])).toEqual({});
    expect(r.json().counts).toMatchObject({ bytesLeft: 0, resources: 1 });
    expect(hits(['# Alice\n- likes tea', ...people['user-alice']!.texts.slice(-4)])).toEqual(Object.fromEntries(['# Alice\n- likes tea', ...people['user-alice']!.texts.slice(-4)].map((t) => [t, expect.any(Number)])));
  });
});

describe('her embeddings\' vectors', () => {
  it('no copy is left in the vector index\'s nodes (libsql\'s delete leaves them in the nodes that linked to hers), and the index still answers', () => {
    const fx = MastraFixture.create(db);
    for (let i = 0; i < 60; i++) for (const who of ['user-alice', 'user-bob', 'user-carol']) fx.thread(who, `${who} text ${i}`, NOW - DAY + i);
    // Her vectors made unmistakable: two marker floats first (secure_delete: no stale copy of her rows in the table).
    fx.db.pragma('secure_delete = ON');
    const hers = fx.db.prepare(`SELECT rowid AS r FROM ${VEC} WHERE json_extract(metadata, '$.resource_id') = 'user-carol' ORDER BY rowid`).all() as { r: number }[];
    hers.forEach((row, i) => fx.db.prepare(`UPDATE ${VEC} SET embedding = vector32(?) WHERE rowid = ?`).run(JSON.stringify([0.123456789, 0.987654321, ...Array.from({ length: DIM - 2 }, (_, k) => Math.sin(i * 31 + k))]), row.r));
    fx.db.pragma('wal_checkpoint(TRUNCATE)');
    fx.close();
    const marker = Buffer.from(new Float32Array([0.123456789, 0.987654321]).buffer);
    const copies = () => [db, `${db}-wal`].filter(existsSync).reduce((n, p) => {
      const b = readFileSync(p);
      for (let at = b.indexOf(marker); at >= 0; at = b.indexOf(marker, at + 1)) n++;
      return n;
    }, 0);
    expect(copies()).toBeGreaterThan(hers.length);
    const r = erase(config());
    expect(r.code, r.stderr).toBe(0);
    expect(r.json().counts).toMatchObject({ embeddings: 60, bytesLeft: 0 });
    expect(copies()).toBe(0);
    const left = new Libsql(db);
    try {
      expect(left.pragma('integrity_check')).toEqual([expect.objectContaining({ integrity_check: 'ok' })]);
      expect(left.prepare(`SELECT count(*) AS n FROM libsql_vector_meta_shadow`).get()).toMatchObject({ n: 1 });
      const near = left.prepare(`SELECT id FROM vector_top_k('${VEC}_vector_idx', vector32(?), 3)`).all(JSON.stringify(Array.from({ length: DIM }, () => 1)));
      expect(near.length).toBeGreaterThan(0);
    } finally {
      left.close();
    }
  });
});

describe('bytesLeft counts the person\'s own ids and texts', () => {
  it('texts other people\'s live rows also hold are shared, not left: 0 on a fresh store, exit 0', () => {
    const fx = MastraFixture.create(db);
    for (const who of ['user-alice', 'user-bob', 'user-carol']) {
      const t = fx.thread(who, 'hello there', NOW - 3 * DAY, NOW - 3 * DAY, false);
      fx.message(t, who, 'thanks a lot', NOW - 2 * DAY);
      fx.db.prepare(`UPDATE mastra_threads SET title = 'New Thread' WHERE id = ?`).run(t);
    }
    const own = fx.thread('user-carol', 'my locker code is 4417', NOW - DAY, NOW - DAY, false);
    fx.close();
    const r = erase(config());
    expect(r.code, r.stderr).toBe(0);
    // hello there, thanks a lot, New Thread, and the two texts' vectors: in alice's and bob's rows, where they belong.
    expect(r.json().counts).toMatchObject({ threads: 2, bytesLeft: 0, bytesShared: 5 });
    expect(hits(['user-carol', own, 'my locker code is 4417'])).toEqual({});
    expect(hits(['hello there'])['hello there']).toBeGreaterThan(0);
  });

  it('her resource id and thread id in a table erase does not take (a workflow snapshot): counted, exit 1', () => {
    const fx = MastraFixture.create(db);
    const t = fx.thread('user-carol', 'my locker code is 4417', NOW - DAY, NOW - DAY, false);
    fx.thread('user-alice', 'hello there', NOW - DAY, NOW - DAY, false);
    fx.db.exec(`CREATE TABLE mastra_workflow_snapshot (workflow_name TEXT NOT NULL, run_id TEXT NOT NULL, resourceId TEXT, snapshot TEXT NOT NULL, createdAt TEXT NOT NULL, updatedAt TEXT NOT NULL, PRIMARY KEY (workflow_name, run_id))`);
    fx.db.prepare(`INSERT INTO mastra_workflow_snapshot VALUES ('onboarding', 'run-1', 'user-carol', ?, ?, ?)`).run(JSON.stringify({ context: { threadId: t } }), new Date(NOW).toISOString(), new Date(NOW).toISOString());
    fx.close();
    const r = erase(config());
    expect(r.code, r.stderr).toBe(1);
    expect(r.json().counts).toMatchObject({ threads: 1, bytesLeft: 2 });
    // A later run knows her resource id; her thread's id only as the keyed hash erase keeps (unknown, not searched).
    const again = cli(['erase', '--config', config(), '--store', 's', '--user', 'user-carol']);
    expect(again.code).toBe(1);
    expect(again.stdout).toMatch(/store files NOT clean: 1 of the person's ids or texts still found in them/);
  });
});

/**
 * Bytes a writer other than Mastra's driver can leave in a text column (an agent in Go or C, a damaged page): libsql's
 * driver aborts the process (SIGABRT) on the first such value it hands to JavaScript. Each in every text column
 * Mastra has.
 */
const HOSTILE: Record<string, string> = {
  'a byte that starts nothing': 'ff',
  'a lone surrogate (CESU-8)': 'eda080',
  'an overlong encoding of "/"': 'c0af',
  'a sequence cut short': 'e282',
  'a code point past U+10FFFF': 'f4908080',
  'a NUL byte': '00',
};

describe.each(Object.entries(HOSTILE))('%s in every text column of a Mastra store', (_name, hex) => {
  it('check, digest, drift and erase run to their end; erase takes her rows and leaves none of her bytes', () => {
    const fx = MastraFixture.create(db);
    const bad = (text: string) => `'${text} ' || CAST(x'${hex}' AS TEXT) || ' tail'`;
    const t = fx.thread('user-carol', 'plain start', NOW - DAY, NOW - DAY, false);
    const m = fx.message(t, 'user-carol', 'plain message', NOW - DAY);
    fx.observation('user-carol', t, 'plain observation', NOW - DAY);
    fx.resourceMemory('user-carol', 'plain memory', NOW - DAY);
    fx.thread('user-alice', 'Alice keeps bees', NOW - DAY);
    const content = (s: string) => `'{"format":2,"parts":[{"type":"text","text":"' || ${bad(s)} || '"}]}'`;
    fx.db.exec(`UPDATE mastra_messages SET content = ${content('carol message with heron')} WHERE resourceId = 'user-carol'`);
    fx.db.exec(`UPDATE mastra_threads SET title = ${bad('carol title with heron')}, metadata = (SELECT CASE WHEN json_valid(j) THEN jsonb(j) ELSE j END FROM (SELECT '{"workingMemory":"' || ${bad('carol thread memory with heron')} || '"}' AS j)) WHERE resourceId = 'user-carol'`);
    fx.db.exec(`UPDATE mastra_resources SET workingMemory = ${bad('carol memory with heron')} WHERE id = 'user-carol'`);
    fx.db.exec(`UPDATE mastra_observational_memory SET activeObservations = ${bad('carol observed heron')} WHERE resourceId = 'user-carol'`);
    fx.db.exec(`UPDATE ${VEC} SET metadata = '{"message_id":"${m}","thread_id":"${t}","resource_id":"user-carol","content":"' || ${bad('carol embedded heron')} || '"}' WHERE json_extract(metadata, '$.resource_id') = 'user-carol'`);
    // A second thread whose metadata is text, not JSONB.
    const t2 = fx.thread('user-carol', 'second', NOW - DAY, NOW - DAY, false);
    fx.db.exec(`UPDATE mastra_threads SET metadata = '{"workingMemory":"' || ${bad('carol text metadata heron')} || '"}' WHERE id = '${t2}'`);
    fx.close();
    const file = config();
    const at = ['--now', new Date(NOW).toISOString()];

    const check = cli(['check', '--config', file, '--store', 's', '--json', ...at]);
    expect([0, 1], check.stderr).toContain(check.code);
    expect(check.json().integrity).toBe('ok');
    const digest = cli(['digest', '--preview', '--config', file, ...at]);
    expect(digest.code, digest.stderr).toBe(0);
    expect(digest.stdout).toContain('carol memory with heron');
    const drift = cli(['run', 'drift', '--config', file, '--store', 's', '--json', ...at]);
    expect(drift.code, drift.stderr).toBe(0);
    const review = cli(['review', 'list', '--config', file, '--store', 's', '--json', ...at]);
    expect(review.code, review.stderr).toBe(0);

    const r = erase(file);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json().counts).toMatchObject({ threads: 2, messages: 3, resources: 1, observations: 1, bytesLeft: 0 });
    expect(hits(['user-carol', t, t2, m, 'heron', ' tail'])).toEqual({});
    const left = new Libsql(db);
    try {
      expect(left.prepare(`SELECT count(*) AS n FROM mastra_threads`).get()).toMatchObject({ n: 1 });
    } finally {
      left.close();
    }
  });
});
