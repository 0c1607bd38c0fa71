import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from '../helpers/store.js';
import { cli } from '../helpers/cli.js';
import { MastraFixture } from './mastra-fixture.js';
import { DIM } from '../helpers/mastra-embed.js';
import { validateConfig, type Config } from '../../src/config/config.js';
import { openStore } from '../../src/layouts/open.js';
import { LAYOUTS } from '../../src/layouts/registry.js';
import { erase } from '../../src/erase/erase.js';
import { silentLogger } from '../../src/log/logger.js';

/**
 * The mastra layout's own promises beyond the contract suite, on Mastra's tables written by test/layouts/
 * mastra-fixture.ts (any Node): prune beside a live agent, its per-thread limit, check's findings, erase's dry run.
 */
const layout = LAYOUTS.mastra;
const NOW = Date.UTC(2026, 10, 29, 12, 0, 0);
const DAY = 86_400_000;
const VEC = `memory_messages_${DIM}`;

let tmp: ReturnType<typeof tempDir>;
let file: string;
let fx: MastraFixture;
beforeEach(() => {
  tmp = tempDir('mw-mastra-');
  file = join(tmp.dir, 'mastra.db');
  fx = MastraFixture.create(file);
});
afterEach(() => {
  fx.close();
  tmp.cleanup();
});

const configFor = (mastra: Record<string, unknown> = {}): Config => validateConfig({
  stateDb: join(tmp.dir, 'state.db'), stores: { s: { layout: 'mastra', db: file, mastra } },
});
const ctx = (config: Config) => ({ config, log: silentLogger, now: () => NOW, signal: new AbortController().signal });

async function withStore<T>(config: Config, fn: (s: ReturnType<typeof openStore>) => Promise<T>): Promise<T> {
  const s = openStore(config, 's');
  try {
    return await fn(s);
  } finally {
    s.close();
  }
}

describe('prune', () => {
  it('run snapshot through the CLI says how many tables and rows it took (Mastra has no one memory table to count)', () => {
    fx.thread('ben', 'Ben reads poetry', NOW - 4 * DAY);
    fx.thread('ana', 'Ana likes tea', NOW - 5 * DAY);
    const config = join(tmp.dir, 'memory-warden.json');
    writeFileSync(config, JSON.stringify({ stateDb: join(tmp.dir, 'state.db'), snapshot: { root: join(tmp.dir, 'backups') }, stores: { s: { layout: 'mastra', db: file } } }));
    // Two snapshots of one store, a second apart (a snapshot is named by its second: two in the same one are refused).
    const r = cli(['run', 'snapshot', '--json', '--config', config, '--now', new Date(NOW).toISOString()]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json().rows).toBeNull();
    expect(r.json().tables).toMatchObject({ mastra_threads: 2, mastra_messages: 2, [VEC]: 2 });
    const text = cli(['run', 'snapshot', '--config', config, '--now', new Date(NOW + 1000).toISOString()]);
    expect(text.code, text.stderr).toBe(0);
    const all = Object.values(r.json().tables as Record<string, number>).reduce((a, b) => a + b, 0);
    expect(text.stdout).toMatch(new RegExp(`^s: snapshot \\S+ in .*: store: ${Object.keys(r.json().tables).length} table\\(s\\), ${all} row\\(s\\), \\d+ bytes$`, 'm'));
    expect(r.json().vectorTables).toEqual({});
    expect(text.stdout).not.toContain('?');
  });

  it('run prune through the CLI says what went in Mastra\'s words (threads, messages), and its JSON counts each kind', () => {
    const idle = fx.thread('ben', 'Ben reads poetry', NOW - 400 * DAY);
    fx.message(idle, 'ben', 'Ben plays chess', NOW - 399 * DAY);
    const kept = fx.thread('ana', 'Ana likes tea', NOW - 5 * DAY);
    fx.message(kept, 'ana', 'Ana moved to Oslo', NOW - 200 * DAY);
    const config = join(tmp.dir, 'memory-warden.json');
    writeFileSync(config, JSON.stringify({ stateDb: join(tmp.dir, 'state.db'), stores: { s: { layout: 'mastra', db: file, mastra: { retention: { threadIdleDays: 30, messageDays: 100 } } } } }));
    const at = new Date(NOW).toISOString();
    const dry = cli(['run', 'prune', '--dry-run', '--now', at, '--config', config]);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toContain('s: would delete 1 idle thread(s) and 1 message(s) past retention as of ');
    expect(dry.stdout).toContain('with them 2 message(s) of those threads, 3 embedding(s), 0 observation record(s)');
    expect(dry.stdout).not.toMatch(/expired|superseded|row\(s\)/);
    const r = cli(['run', 'prune', '--json', '--now', at, '--config', config]);
    expect(r.code, r.stderr).toBe(0);
    // Each message with its embedding (the fixture writes them as Mastra's semantic recall does).
    expect(r.json().counts).toEqual({ threads: 1, messages: 1, threadMessages: 2, embeddings: 3, observations: 0 });
    // The morning digest says the same of the day's prune runs.
    const digest = cli(['digest', '--preview', '--config', config]);
    expect(digest.code, digest.stderr).toBe(0);
    expect(digest.stdout).toContain('prune: deleted 1 idle thread(s) and 1 message(s) past retention in 1 run (with the threads, 2 message(s); 3 embedding(s), 0 observation record(s))');
  });

  it('keeps a thread an agent writes to after prune chose it, and deletes the other idle one with its embeddings', async () => {
    const busy = fx.thread('ana', 'Ana likes tea', NOW - 400 * DAY);
    const idle = fx.thread('ben', 'Ben reads poetry', NOW - 400 * DAY);
    const config = configFor({ retention: { threadIdleDays: 30 } });
    const done = await withStore(config, (s) => layout.prune(s, {
      ctx: ctx(config), dryRun: false,
      // Called before each thread's transaction: the agent answers in `busy` right then.
      beforeDelete: (ms) => { if (ms.some((m) => m.id === busy)) fx.touch(busy, NOW); },
    }));
    expect(done.ids).toEqual([idle]);
    expect(fx.count(`SELECT count(*) AS n FROM mastra_threads`)).toBe(1);
    expect(fx.count(`SELECT count(*) AS n FROM mastra_messages WHERE thread_id = '${busy}'`)).toBe(1);
    expect(fx.count(`SELECT count(*) AS n FROM ${VEC} WHERE json_extract(metadata, '$.thread_id') = '${busy}'`)).toBe(1);
    expect(fx.count(`SELECT count(*) AS n FROM ${VEC} WHERE json_extract(metadata, '$.thread_id') = '${idle}'`)).toBe(0);
  });

  it('at most K messages per thread: the oldest go with their embeddings, the newest K stay, working memory stays', async () => {
    const t = fx.thread('ana', 'first', NOW - 10 * DAY);
    const later = [1, 2, 3].map((i) => fx.message(t, 'ana', `message ${i}`, NOW - (10 - i) * DAY));
    fx.db.prepare(`INSERT INTO mastra_resources (id, workingMemory, createdAt, updatedAt) VALUES ('ana', '# Ana', ?, ?)`).run(new Date(NOW - 500 * DAY).toISOString(), new Date(NOW - 500 * DAY).toISOString());
    const config = configFor({ retention: { maxMessagesPerThread: 2, threadIdleDays: 365, messageDays: 365 } });
    const dry = await withStore(config, (s) => layout.prune(s, { ctx: ctx(config), dryRun: true }));
    expect(dry.deleted).toBe(2);
    const done = await withStore(config, (s) => layout.prune(s, { ctx: ctx(config), dryRun: false }));
    expect(done.deleted).toBe(2);
    expect(done.cascaded).toBe(2);
    const left = (fx.db.prepare('SELECT id FROM mastra_messages ORDER BY createdAt').all() as { id: string }[]).map((r) => r.id);
    expect(left).toEqual(later.slice(1));
    expect(fx.count(`SELECT count(*) AS n FROM ${VEC}`)).toBe(2);
    expect(fx.count(`SELECT count(*) AS n FROM mastra_resources WHERE workingMemory = '# Ana'`)).toBe(1);
    expect((await withStore(config, (s) => layout.prune(s, { ctx: ctx(config), dryRun: false }))).deleted).toBe(0);
  });

  it('embeddings whose message is gone (what Mastra\'s own deletes leave) go, and no other: counted by a dry run first', async () => {
    const t = fx.thread('ana', 'Ana likes tea', NOW - DAY);
    const gone = fx.message(t, 'ana', 'Ana banks at Nordea', NOW - DAY);
    fx.thread('ben', 'Ben reads poetry', NOW - DAY);
    fx.db.prepare(`DELETE FROM mastra_messages WHERE id = ?`).run(gone); // Mastra's storage.prune of messages, as it leaves it
    // Metadata that is not JSON, or that names no message (an observation group's), is not a message's embedding.
    fx.db.prepare(`INSERT INTO ${VEC} (vector_id, embedding, metadata) VALUES ('raw', vector32(?), 'not json')`).run(JSON.stringify(new Array(DIM).fill(0.1)));
    fx.db.prepare(`INSERT INTO ${VEC} (vector_id, embedding, metadata) VALUES ('group', vector32(?), ?)`).run(JSON.stringify(new Array(DIM).fill(0.2)), JSON.stringify({ thread_id: t }));
    const before = fx.count(`SELECT count(*) AS n FROM ${VEC}`);
    const config = configFor(); // no retention: the leftovers are prune's only work
    expect((await withStore(config, (s) => layout.prune(s, { ctx: ctx(config), dryRun: true }))).leftovers).toEqual({ mastra_embedding_without_message: 1, mastra_embedding_without_thread: 0, mastra_observation_without_thread: 0 });
    expect(fx.count(`SELECT count(*) AS n FROM ${VEC}`)).toBe(before);
    const done = await withStore(config, (s) => layout.prune(s, { ctx: ctx(config), dryRun: false }));
    expect(done.deleted).toBe(0);
    expect(done.leftovers).toEqual({ mastra_embedding_without_message: 1, mastra_embedding_without_thread: 0, mastra_observation_without_thread: 0 });
    expect(fx.count(`SELECT count(*) AS n FROM ${VEC}`)).toBe(before - 1);
    expect(fx.count(`SELECT count(*) AS n FROM ${VEC} WHERE json_valid(metadata) AND json_extract(metadata, '$.message_id') = '${gone}'`)).toBe(0);
    expect(fx.count(`SELECT count(*) AS n FROM ${VEC} WHERE vector_id IN ('raw', 'group')`)).toBe(2);
    // libsql's vector index still answers, without the removed one.
    expect(fx.count(`SELECT count(*) AS n FROM vector_top_k('${VEC}_vector_idx', vector32('${JSON.stringify(new Array(DIM).fill(0.3))}'), 10)`)).toBe(before - 1);
    const report = await withStore(config, (s) => layout.check(s, { ctx: ctx(config) }));
    expect(report.problems.map((p) => p.code)).not.toContain('mastra_embedding_without_message');
  });

  it('no retention configured: nothing is deleted', async () => {
    fx.thread('ana', 'Ana likes tea', NOW - 4000 * DAY);
    const config = configFor();
    expect((await withStore(config, (s) => layout.prune(s, { ctx: ctx(config), dryRun: false }))).deleted).toBe(0);
    expect(fx.count('SELECT count(*) AS n FROM mastra_messages')).toBe(1);
  });
});

describe('check', () => {
  it('names each kind of damage, counted exactly', async () => {
    const t = fx.thread('ana', 'Ana likes tea', NOW - DAY);
    fx.thread('ben', 'Ben reads poetry', NOW - DAY);
    fx.db.prepare(`INSERT INTO mastra_messages (id, thread_id, content, role, type, createdAt, resourceId) VALUES ('lost', 'gone-thread', '{}', 'user', 'v2', ?, 'ana')`).run(new Date(NOW).toISOString());
    fx.db.prepare(`INSERT INTO mastra_messages (id, thread_id, content, role, type, createdAt, resourceId) VALUES ('garbled', ?, 'not json {', 'user', 'v2', ?, 'ana')`).run(t, new Date(NOW).toISOString());
    fx.db.prepare(`DELETE FROM mastra_messages WHERE thread_id IN (SELECT id FROM mastra_threads WHERE resourceId = 'ben')`).run();
    fx.db.prepare(`INSERT INTO mastra_resources (id, workingMemory, createdAt, updatedAt) VALUES ('ana', ?, ?, ?)`).run('x'.repeat(200), new Date(NOW).toISOString(), new Date(NOW).toISOString());
    const config = configFor({ workingMemoryMaxBytes: 100 });
    const report = await withStore(config, (s) => layout.check(s, { ctx: ctx(config) }));
    expect(report.ok).toBe(false);
    expect(Object.fromEntries(report.problems.map((p) => [p.code, p.count]))).toEqual({
      mastra_message_without_thread: 1, mastra_embedding_without_message: 1, mastra_unparseable_message: 1, mastra_large_working_memory: 1,
    });
    expect(report.integrity).toBe('ok');
  });

  it('a file that is not a Mastra store is refused with its path named', async () => {
    const other = join(tmp.dir, 'other.db');
    new MastraFixture(other).db.exec('CREATE TABLE x (a)');
    expect(() => openStore(validateConfig({ stateDb: join(tmp.dir, 'state.db'), stores: { s: { layout: 'mastra', db: other } } }), 's')).toThrow(/other\.db: not a Mastra memory store \(no mastra_threads/);
  });
});

describe('erase', () => {
  it('a dry run names what it would erase and changes no byte', async () => {
    fx.thread('ana', 'Ana Quintero banks at Nordea', NOW - DAY);
    fx.close();
    const before = [file, `${file}-wal`].filter(existsSync).map((p) => readFileSync(p));
    const receipt = await erase(configFor(), 's', { user: 'ana' }, { now: () => NOW, log: silentLogger, dryRun: true });
    expect(receipt.memories).toBe(2);
    expect([file, `${file}-wal`].filter(existsSync).map((p) => readFileSync(p))).toEqual(before);
    fx = new MastraFixture(file);
  });

  it('refuses a damaged file before deleting anything', async () => {
    fx.thread('ana', 'Ana Quintero banks at Nordea', NOW - DAY);
    fx.db.pragma('wal_checkpoint(TRUNCATE)');
    fx.close();
    // A page of the messages table overwritten: libsql's quick_check fails.
    const bytes = readFileSync(file);
    const at = bytes.indexOf('Ana Quintero banks');
    const page = Math.floor(at / 4096) * 4096;
    bytes.fill(0xff, page + 8, page + 64);
    writeFileSync(file, bytes);
    await expect(erase(configFor(), 's', { user: 'ana' }, { now: () => NOW, log: silentLogger })).rejects.toThrow(/mastra\.db/);
    expect(readFileSync(file).includes('Ana Quintero banks')).toBe(true);
    fx = new MastraFixture(file);
  });
});
