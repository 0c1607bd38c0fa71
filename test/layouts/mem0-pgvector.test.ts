import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { copyFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import YAML from 'yaml';
import { tempDir } from '../helpers/store.js';
import { startPgvectorServer, type PgvectorServer } from '../helpers/pg.js';
import { cliAsync as cli, PG_URL_VAR, sdkStore, type SdkStore } from './mem0-sdk.js';

/**
 * A mem0 store written by mem0ai 3.3.1's own TypeScript SDK with its pgvector provider (tables `memories` and
 * `memories_entities` in PostgreSQL, history in the SDK's SQLite file), on PGlite with pgvector, taken through
 * memory-warden's commands. After each one the SDK still reads and writes the store; what prune and erase did is
 * compared with the SDK's own delete on a copy of the same store.
 */
const FAR = '2027-09-01T00:00:00Z';

interface Built {
  alice: string[];
  bobKept: string;
  bobExpiring: string;
  carolDeleted: string;
}

async function build(m: any): Promise<Built> {
  const add = async (text: string, userId: string, extra: Record<string, unknown> = {}) =>
    (await m.add(text, { userId, infer: false, ...extra })).results[0].id as string;
  const a1 = await add('Alice Martin lives in Berlin', 'alice', { expirationDate: '2026-12-20' });
  await m.update(a1, { text: 'Alice Martin lives in Berlin near Tempelhof Airport' });
  const a2 = await add('Alice Martin prefers pnpm', 'alice');
  await m.update(a2, { text: 'Alice Martin prefers npm for Project Falcon' });
  const b1 = await add('Bob Keller works on Project Falcon', 'bob');
  await m.update(b1, { text: 'Bob Keller leads Project Falcon' });
  const b2 = await add('Bob Keller drinks tea', 'bob', { expirationDate: '2026-12-20' });
  await m.update(b2, { text: 'Bob Keller drinks Earl Grey in Vienna' });
  const c1 = await add('Carol Nguyen has a cat', 'carol');
  await m.update(c1, { text: 'Carol Nguyen has a cat named Miso Tanaka' });
  await m.delete(c1);
  return { alice: [a1, a2], bobKept: b1, bobExpiring: b2, carolDeleted: c1 };
}

/** mem0's own API on the store: getAll, get, search, history and add all work, and say what they should. */
async function mem0StillWorks(m: any, b: Built, expectAlice: boolean): Promise<void> {
  const bob = (await m.getAll({ filters: { user_id: 'bob' } })).results.map((r: any) => r.id);
  expect(bob).toContain(b.bobKept);
  expect((await m.get(b.bobKept)).memory).toBe('Bob Keller leads Project Falcon');
  const found = await m.search('Bob Keller leads Project Falcon', { filters: { user_id: 'bob' } });
  expect(found.results.map((r: any) => r.id)).toContain(b.bobKept);
  expect((await m.history(b.bobKept)).map((h: any) => h.action).sort()).toEqual(['ADD', 'UPDATE']);
  expect((await m.getAll({ filters: { user_id: 'alice' } })).results.length > 0).toBe(expectAlice);
  const added = (await m.add('Erin Walsh likes rowing', { userId: 'erin', infer: false })).results[0].id;
  expect((await m.get(added)).memory).toBe('Erin Walsh likes rowing');
  await m.delete(added);
}

async function linksOf(m: any, userId: string): Promise<string[]> {
  const [rows] = await (await m.getEntityStore()).list({ user_id: userId }, 1000);
  return rows.flatMap((r: any) => r.payload.linkedMemoryIds ?? []);
}

/** What the store holds, without times: each table's ids and payloads, and the history rows in order. */
async function contents(client: pg.Client, historyPath: string, ids: Map<string, string>): Promise<unknown> {
  const name = (id: string) => ids.get(id) ?? id;
  const tables: Record<string, unknown[]> = {};
  for (const t of ['memories', 'memories_entities']) {
    const rows = (await client.query(`SELECT id::text AS id, payload FROM ${t}`)).rows;
    tables[t] = rows.map((r) => {
      const { createdAt: _c, updatedAt: _u, ...p } = r.payload;
      if (Array.isArray(p.linkedMemoryIds)) p.linkedMemoryIds = p.linkedMemoryIds.map(name).sort();
      return { id: t === 'memories' ? name(r.id) : p.data, payload: p };
    }).sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)));
  }
  const Database = (await import('better-sqlite3')).default;
  const db = new Database(historyPath, { readonly: true });
  const history = db.prepare('SELECT memory_id, previous_value, new_value, action, is_deleted FROM memory_history ORDER BY id').all()
    .map((r: any) => ({ ...r, memory_id: name(r.memory_id) }));
  db.close();
  return { tables, history };
}

/** A second server holding the same rows (ids, vectors, payloads) and a copy of the history file: the same store. */
async function copyStore(from: pg.Client, s: SdkStore, to: PgvectorServer, dir: string): Promise<{ client: pg.Client; store: SdkStore }> {
  const client = new pg.Client({ connectionString: to.url });
  await client.connect();
  const copy = await sdkStore('pgvector', dir, undefined, to.url);
  copyFileSync(s.historyPath, copy.historyPath);
  const m = await copy.open(); // the SDK makes its tables
  await (await m.getEntityStore()).list({}, 1);
  copy.close(m);
  for (const t of ['memories', 'memories_entities']) {
    for (const r of (await from.query(`SELECT id, vector::text AS v, payload FROM ${t}`)).rows) {
      await client.query(`INSERT INTO ${t} (id, vector, payload) VALUES ($1, $2::vector, $3)`, [r.id, r.v, r.payload]);
    }
  }
  return { client, store: copy };
}

describe('a store built by mem0ai 3.3.1 with its pgvector vector store (PGlite)', { timeout: 300_000 }, () => {
  let tmp: ReturnType<typeof tempDir>;
  const servers: PgvectorServer[] = [];
  const clients: pg.Client[] = [];
  let server: PgvectorServer;
  let client: pg.Client;
  let s: SdkStore;
  let m: any;

  beforeEach(async () => {
    tmp = tempDir('mw-sdk-pg-');
    server = await startPgvectorServer();
    servers.push(server);
    client = new pg.Client({ connectionString: server.url });
    await client.connect();
    clients.push(client);
    process.env[PG_URL_VAR] = server.url;
    s = await sdkStore('pgvector', tmp.dir, undefined, server.url);
    m = await s.open();
  });

  afterEach(async () => {
    if (m) s.close(m);
    m = undefined;
    for (const c of clients.splice(0)) await c.end().catch(() => {});
    for (const v of servers.splice(0)) await v.stop();
    delete process.env[PG_URL_VAR];
    tmp.cleanup();
  });

  it('the config: pgvector needs its section, not beside qdrant; a missing URL variable and a wrong URL are one line naming the field, exit 2', async () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ vectorStore: 'pgvector', pgvector: undefined }, /stores\.m\.mem0\.pgvector: mem0\.vectorStore: pgvector needs pgvector/],
      [{ vectorStore: 'qdrant', pgvector: { url: `\${${PG_URL_VAR}}` } }, /stores\.m\.mem0\.pgvector: only for mem0\.vectorStore: pgvector/],
      [{ pgvector: { url: server.url } }, /stores\.m\.mem0\.pgvector\.url/],
    ];
    for (const [extra, message] of cases) {
      const r = await cli(['check', '--config', s.configFile(extra)]);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(message);
      expect(r.stderr).not.toContain(server.url);
    }
    const both = s.configFile();
    const cfg = YAML.parse(readFileSync(both, 'utf8'));
    cfg.stores.m.qdrant = { url: 'http://127.0.0.1:6333', collections: ['memories'] };
    writeFileSync(both, YAML.stringify(cfg));
    const r = await cli(['check', '--config', both]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/stores\.m\.qdrant: a mem0 store's vectors are in pgvector or in Qdrant, not both/);

    expect((await cli(['check', '--config', s.configFile()])).code).toBe(0);

    // Snapshots do not take mem0's pgvector tables yet: snapshot and restore refuse, naming the field, nothing written.
    const plain = s.configFile();
    const before = readFileSync(s.historyPath);
    for (const args of [['run', 'snapshot'], ['restore', join(tmp.dir, 'backups', 'm', 'any')]]) {
      const r = await cli([...args, '--config', plain]);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toContain('stores.m.mem0.vectorStore: mem0\'s pgvector tables are not taken by snapshots yet');
    }
    expect(existsSync(join(tmp.dir, 'backups'))).toBe(false);
    expect(readFileSync(s.historyPath).equals(before)).toBe(true);
    const wrong = s.configFile({ pgvector: { url: '${MW_TEST_MEM0_PG_NONE}' } });
    process.env.MW_TEST_MEM0_PG_NONE = 'postgres://postgres:secretword@127.0.0.1:1/postgres';
    try {
      const w = await cli(['check', '--config', wrong]);
      expect(w.code).not.toBe(0);
      expect(w.stderr.trim().split('\n')).toHaveLength(1);
      expect(w.stderr).toContain('stores.m.mem0.pgvector.url');
      expect(w.stderr).not.toContain('secretword');
    } finally {
      delete process.env.MW_TEST_MEM0_PG_NONE;
    }
  });

  it('check, prune (as the SDK\'s own delete), digest, review and erase --user work, and mem0 still does', async () => {
    const b = await build(m);
    await (await m.getEntityStore()).list({}, 1);
    const config = s.configFile();
    const run = (...args: string[]) => cli([...args, '--config', config]);
    const names = new Map<string, string>([[b.alice[0]!, 'a1'], [b.alice[1]!, 'a2'], [b.bobKept, 'b1'], [b.bobExpiring, 'b2'], [b.carolDeleted, 'c1']]);

    // The copy, on which the SDK itself deletes what prune will.
    const copyServer = await startPgvectorServer();
    servers.push(copyServer);
    const copy = await copyStore(client, s, copyServer, join(tmp.dir, 'copy'));
    clients.push(copy.client);

    const check = await run('check', '--json', '--now', FAR);
    expect(check.stderr).toBe('');
    const report = check.json();
    expect(report.problems).toEqual([]);
    expect(report.rows).toBe(4);

    const list = (await run('review', 'list', '--json', '--now', FAR)).json();
    expect(report.reviewDue).toBe(list.dueTotal);
    expect(list.dueTotal).toBe(2);

    const digest = await run('digest', '--preview', '--now', FAR);
    expect(digest.code).toBe(0);
    expect(digest.stdout).toContain('2 due for review');
    expect(digest.stdout).toContain('4 point(s) in "memories"');

    // prune: the two expired memories go as mem0's delete takes them: vectors, history DELETE rows, entity links.
    expect(await linksOf(m, 'bob')).toContain(b.bobExpiring);
    const prune = await run('run', 'prune', '--json', '--now', FAR);
    expect(prune.stderr).toBe('');
    expect(prune.code).toBe(0);
    expect(prune.json().deleted).toBe(2);
    expect(await m.get(b.bobExpiring)).toBeNull();
    expect(await linksOf(m, 'bob')).not.toContain(b.bobExpiring);
    expect((await m.history(b.bobExpiring))[0].action).toBe('DELETE');
    const cm = await copy.store.open();
    for (const id of [b.alice[0]!, b.bobExpiring].sort()) await cm.delete(id); // prune reads the table in id order
    copy.store.close(cm);
    expect(await contents(client, s.historyPath, names)).toEqual(await contents(copy.client, copy.store.historyPath, names));
    await mem0StillWorks(m, b, true);

    // review confirm stamps the SDK's own updatedAt in the payload.
    expect((await run('review', 'confirm', b.bobKept, '--now', FAR)).code).toBe(0);
    expect((await m.get(b.bobKept)).updatedAt).toBe('2027-09-01T00:00:00.000Z');

    // erase --user alice: what the SDK's deleteAll does, then every byte of her in the tables' files gone.
    const erased = await run('erase', '--user', 'alice', '--json', '--now', FAR);
    expect(erased.stderr).toBe('');
    const receipt = erased.json();
    expect(erased.code, JSON.stringify(receipt.bytes)).toBe(0);
    expect(receipt.memories).toBe(2); // the one left, and the one prune took (the ledger knows whose it was)
    expect(receipt.bytes.verdict).toBe('clean');
    expect(receipt.bytes.relations).toBeGreaterThan(1);
    expect(await linksOf(m, 'alice')).toEqual([]);
    const cm2 = await copy.store.open();
    await cm2.deleteAll({ userId: 'alice' });
    copy.store.close(cm2);
    const ours = (await contents(client, s.historyPath, names)) as any;
    const sdks = (await contents(copy.client, copy.store.historyPath, names)) as any;
    expect(ours.tables).toEqual(sdks.tables); // the same vectors and payloads left
    // The SDK's history keeps her text; erase's keeps the events and not one of her words.
    expect(JSON.stringify(sdks.history)).toContain('Project Falcon');
    for (const w of ['Tempelhof', 'prefers npm', 'Alice Martin']) expect(JSON.stringify(ours.history)).not.toContain(w);
    const events = (h: any[]) => h.filter((r) => [...names.values()].includes(r.memory_id)).map((r) => [r.memory_id, r.action]); // not Erin's, mem0StillWorks's
    expect(events(ours.history)).toEqual(events(sdks.history));

    // The byte check read by the test itself: no relation file of either table holds her text or its lower-cased copy.
    await client.query('CHECKPOINT');
    const files = (await client.query(`SELECT pg_relation_filepath(c.oid) AS f FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i', 't')`)).rows.map((r) => r.f as string);
    const parts: Buffer[] = [];
    for (const f of files) parts.push((await client.query(`SELECT pg_read_binary_file($1) AS b`, [f])).rows[0]!.b as Buffer);
    const dump = Buffer.concat(parts);
    expect(dump.length).toBeGreaterThan(0);
    expect(dump.includes(Buffer.from('Bob Keller leads'))).toBe(true); // the check can see a text that is there
    for (const w of ['Tempelhof', 'tempelhof', 'prefers npm', 'Alice Martin', 'alice martin']) expect(dump.includes(Buffer.from(w)), w).toBe(false);
    expect(readFileSync(s.historyPath).includes(Buffer.from('Tempelhof'))).toBe(false);

    s.close(m);
    m = await s.open();
    await mem0StillWorks(m, b, false);
  });
});
