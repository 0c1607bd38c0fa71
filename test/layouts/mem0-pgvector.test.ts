import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { copyFileSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { CLI } from '../helpers/cli.js';
import { snapshotLine } from '../../src/commands/run-output.js';
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
const PG_KILL_AT = fileURLToPath(new URL('../helpers/pg-kill-at.cjs', import.meta.url));

const KILL_AT = fileURLToPath(new URL('../helpers/kill-at.cjs', import.meta.url));

/**
 * The CLI killed -9 at the nth statement to PostgreSQL matching `sql` (test/helpers/pg-kill-at.cjs), or at a step of
 * what it changes in files (`file`: test/helpers/kill-at.cjs).
 */
function killedAt(args: string[], at: { sql: string; nth: number; when: 'before' } | { file: { op: 'write' | 'delete'; path: string; when: 'before' | 'after' } }): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }> {
  const hooks = 'file' in at ? { NODE_OPTIONS: `--require ${KILL_AT}`, MW_KILL_AT: JSON.stringify(at.file) } : { NODE_OPTIONS: `--require ${PG_KILL_AT}`, MW_PG_KILL_AT: JSON.stringify(at) };
  // NODE_OPTIONS: the job's own process, where it runs in one, is killed too.
  const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, LOG_LEVEL: 'silent', ...hooks }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve) => child.on('close', (code, signal) => resolve({ code, signal, stderr })));
}

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

/** Every relation file of the schema `public` (heap, TOAST, indexes), read back through the server after a CHECKPOINT. */
async function relationBytes(client: pg.Client): Promise<Buffer> {
  await client.query('CHECKPOINT');
  const files = (await client.query(`SELECT pg_relation_filepath(c.oid) AS f FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i', 't')`)).rows.map((r) => r.f as string);
  const parts: Buffer[] = [];
  for (const f of files) parts.push((await client.query(`SELECT pg_read_binary_file($1) AS b`, [f])).rows[0]!.b as Buffer);
  return Buffer.concat(parts);
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

  /** A server of its own, the test's connection to it, and the SDK's store on it with its history in `dir`. */
  async function fresh(dir: string): Promise<void> {
    server = await startPgvectorServer();
    servers.push(server);
    client = new pg.Client({ connectionString: server.url });
    await client.connect();
    clients.push(client);
    process.env[PG_URL_VAR] = server.url;
    s = await sdkStore('pgvector', dir, undefined, server.url);
    m = await s.open();
  }

  beforeEach(async () => {
    tmp = tempDir('mw-sdk-pg-');
    await fresh(tmp.dir);
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
    // The effective config shows where the vectors really are: pgvector, not the SDK's SQLite vector file.
    const shown = await cli(['config', '--config', s.configFile()]);
    expect(shown.code, shown.stderr).toBe(0);
    const mem0 = shown.json().stores.m.mem0;
    expect(mem0).toMatchObject({ vectorStore: 'pgvector', pgvector: { url: '[redacted]', schema: 'public' } });
    expect(Object.keys(mem0).filter((k) => k.startsWith('vector'))).toEqual(['vectorStore', 'vectorPaths']);
    expect(shown.stdout).not.toContain('vector_store');

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
    // A dry run first: it counts what the prune then changes (links of both keys, entities left empty), changing nothing.
    expect(await linksOf(m, 'bob')).toContain(b.bobExpiring);
    const unpruned = await contents(client, s.historyPath, names);
    const dry = await run('run', 'prune', '--dry-run', '--json', '--now', FAR);
    expect(dry.code, dry.stderr).toBe(0);
    expect(await contents(client, s.historyPath, names)).toEqual(unpruned);
    const prune = await run('run', 'prune', '--json', '--now', FAR);
    expect(prune.stderr).toBe('');
    expect(prune.code).toBe(0);
    expect(prune.json().deleted).toBe(2);
    const counts = (r: any) => ({ deleted: r.deleted, ids: [...r.ids].sort(), historyRows: r.historyRows, entityLinksRemoved: r.entityLinksRemoved, entitiesDeleted: r.entitiesDeleted, leftovers: r.leftovers });
    expect(counts(dry.json())).toEqual(counts(prune.json()));
    expect(prune.json().entityLinksRemoved).toBeGreaterThan(0);
    expect(prune.json().entitiesDeleted).toBeGreaterThan(0);
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
    const dump = await relationBytes(client);
    expect(dump.length).toBeGreaterThan(0);
    expect(dump.includes(Buffer.from('Bob Keller leads'))).toBe(true); // the check can see a text that is there
    for (const w of ['Tempelhof', 'tempelhof', 'prefers npm', 'Alice Martin', 'alice martin']) expect(dump.includes(Buffer.from(w)), w).toBe(false);
    expect(readFileSync(s.historyPath).includes(Buffer.from('Tempelhof'))).toBe(false);
    // Again: nothing of hers is left to look for, and the receipt says what was not looked for, not "none found".
    const again = (await run('erase', '--user', 'alice', '--json', '--now', FAR)).json();
    expect(again.memories).toBe(0);
    expect(again.bytes.unseen.map((u: { what: string }) => u.what)).toContain('earlier-erases');

    s.close(m);
    m = await s.open();
    await mem0StillWorks(m, b, false);
  });
  it('a snapshot takes mem0\'s tables at one instant with the history file; restore puts them back, the erase ledger re-applied; mem0 still works', async () => {
    const b = await build(m);
    await (await m.getEntityStore()).list({}, 1);
    const config = s.configFile();
    const run = (...args: string[]) => cli([...args, '--config', config]);

    const snap = await run('run', 'snapshot', '--json');
    expect(snap.stderr).toBe('');
    expect(snap.code).toBe(0);
    const dir = snap.json().dir as string;
    const manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8'));
    expect(manifest.sqlite.file).toBe('store.db');
    expect(manifest.vectorTables.dir).toBe('pgvector');
    expect(manifest.vectorTables.source).toBe('postgres schema public: memories, memories_entities');
    expect(manifest.vectorTables.tables.memories).toBe(4);
    // The result counts both parts: the history file's tables and mem0's pgvector tables.
    expect(snap.json().vectorTables).toEqual(manifest.vectorTables.tables);
    const side = manifest.vectorTables.tables as Record<string, number>;
    const said = `; pgvector: 2 table(s), ${Object.values(side).reduce((a, b) => a + b, 0)} row(s), `;
    // The line the CLI prints of this result (one snapshot only: the steps below count them).
    expect(snapshotLine(snap.json())).toMatch(/: store: \d+ table\(s\), \d+ row\(s\); pgvector: /);
    expect(snapshotLine(snap.json())).toContain(said);
    expect(Object.keys(manifest.files).filter((f) => f.startsWith('pgvector/')).length).toBe(3); // its manifest and two tables
    expect(readdirSync(join(dir, 'pgvector')).sort()).toEqual(['000.copy', '001.copy', 'manifest.json']);
    const holds = JSON.parse(gunzipSync(readFileSync(join(dir, 'holds.json.gz'))).toString('utf8'));
    expect(holds.users.length).toBe(2); // alice and bob: the payloads' user_id (Carol's memory was deleted)
    expect(holds.ids.length).toBeGreaterThanOrEqual(5);
    const listed = await run('snapshots', 'list', '--verify', '--store', 'm', '--json');
    expect(listed.code, listed.stdout + listed.stderr).toBe(0);
    expect(listed.json().snapshots.map((x: any) => x.verified)).toEqual(['ok']);

    // After the snapshot: a memory added, one deleted by mem0, and Alice erased.
    const dana = (await m.add('Dana Fox plays chess', { userId: 'dana', infer: false })).results[0].id as string;
    await m.delete(b.bobKept);
    const erased = await run('erase', '--user', 'alice', '--json', '--now', FAR);
    // Erased from the store, and found in the snapshot by its holds (the payloads' user_id): exit 1 while a copy remains.
    expect(erased.code, erased.stdout + erased.stderr).toBe(1);
    expect(erased.json().bytes.verdict).toBe('clean');
    expect(erased.json().snapshots.found).toEqual([dir]);
    s.close(m);
    m = undefined;

    // Restore: the tables and the history as the snapshot has them, Alice kept out, an undo snapshot of the store as it was.
    const restored = await run('restore', dir, '--store', 'm', '--json', '--now', '2026-12-06T09:00:00Z');
    expect(restored.stderr).toBe('');
    expect(restored.code, restored.stdout).toBe(0);
    const r = restored.json();
    expect(r.steps.join('\n')).toContain('replaced the tables of postgres schema public: memories, memories_entities with the snapshot\'s');
    expect(r.erasedKeptOut).toBe(2);
    expect(r.undo).toBeTruthy();
    const ids = async () => (await client.query('SELECT id::text AS id FROM memories')).rows.map((x) => x.id as string).sort();
    expect(await ids()).toEqual([b.bobKept, b.bobExpiring].sort()); // Bob's back, Dana's gone, Alice's kept out
    const payloads = JSON.stringify((await client.query('SELECT payload FROM memories_entities')).rows);
    expect(payloads).not.toMatch(/alice/i);
    expect(readFileSync(s.historyPath).includes(Buffer.from('Tempelhof'))).toBe(false);
    const dump = await relationBytes(client);
    expect(dump.includes(Buffer.from('Bob Keller leads'))).toBe(true);
    for (const w of ['Tempelhof', 'tempelhof', 'Alice Martin', 'alice martin']) expect(dump.includes(Buffer.from(w)), w).toBe(false);
    expect((await run('check', '--json', '--now', FAR)).json().problems).toEqual([]);

    m = await s.open();
    await mem0StillWorks(m, b, false);
    expect(await m.get(dana)).toBeNull();
    s.close(m);
    m = undefined;

    // The undo snapshot puts the store back as it was before the restore: Dana's memory, without Bob's first one.
    const back = await run('restore', r.undo, '--store', 'm', '--json', '--now', '2026-12-06T09:01:00Z');
    expect(back.code, back.stdout + back.stderr).toBe(0);
    expect(await ids()).toEqual([b.bobExpiring, dana].sort());
    m = await s.open();
    expect((await m.get(dana)).memory).toBe('Dana Fox plays chess');
    expect(await m.get(b.bobKept)).toBeNull();
  });
  it('erase --user, --subject and --ids take exactly what they take from the same store with the SDK\'s SQLite vectors', async () => {
    /** What mem0 itself reads of a store: each user's memories, and each named memory's history. */
    const seen = async (mm: any, b: Built) => {
      const users: Record<string, string[]> = {};
      for (const u of ['alice', 'bob', 'carol']) users[u] = (await mm.getAll({ filters: { user_id: u } })).results.map((r: any) => r.memory).sort();
      const history: Record<string, unknown> = {};
      const named: [string, string][] = [['a1', b.alice[0]!], ['a2', b.alice[1]!], ['b1', b.bobKept], ['b2', b.bobExpiring], ['c1', b.carolDeleted]];
      for (const [n, id] of named) history[n] = (await mm.history(id)).map((h: any) => [h.action, h.previousValue ?? h.previous_value ?? null, h.newValue ?? h.new_value ?? null]);
      return { users, history };
    };
    const selectors = (b: Built): string[][] => [['--subject', 'project falcon'], ['--ids', b.bobExpiring, b.carolDeleted, 'not-a-memory'], ['--user', 'alice']];
    const results: Record<string, unknown[]> = {};
    for (const kind of ['sqlite', 'pgvector'] as const) {
      const dir = join(tmp.dir, kind);
      const st = kind === 'pgvector' ? s : await sdkStore('sqlite', dir);
      const mm = kind === 'pgvector' ? m : await st.open();
      const b = await build(mm);
      await (await mm.getEntityStore()).list({}, 1);
      const config = st.configFile();
      const out: unknown[] = [];
      for (const sel of selectors(b)) {
        // A dry run first: it counts what the erase then changes, the byte check's counts aside (pgvector's only).
        const dry = await cli(['erase', ...sel, '--dry-run', '--json', '--now', FAR, '--config', config]);
        expect(dry.code, dry.stdout).toBe(0);
        const r = await cli(['erase', ...sel, '--json', '--now', FAR, '--config', config]);
        expect(r.stderr).toBe('');
        expect(r.code, r.stdout).toBe(0);
        const receipt = r.json();
        const { bytesLeft: _bl, bytesUnverified: _bu, ...done } = receipt.counts;
        expect(dry.json().counts, `${kind} ${sel[0]}`).toEqual(done);
        const { strayPoints: _s, bytesLeft: _l, bytesUnverified: _u, ...counts } = receipt.counts; // the byte check's, pgvector's only
        out.push({ memories: receipt.memories, counts });
        if (kind === 'pgvector') expect(receipt.bytes.verdict).toBe('clean');
        out.push(await seen(mm, b));
      }
      results[kind] = out;
      if (kind === 'sqlite') st.close(mm);
    }
    expect(results.pgvector).toEqual(results.sqlite);
    // Something was taken by each, and not everything.
    expect(JSON.stringify(results.pgvector)).toContain('Bob Keller');
    expect(JSON.stringify(results.pgvector)).not.toContain('Project Falcon');
  });
  it('run drift confirms and flags as on the same store with the SDK\'s SQLite vectors, and mem0 still works', async () => {
    const team = join(tmp.dir, 'team.json');
    writeFileSync(team, JSON.stringify({ falcon: { lead: 'Bob Keller', tool: 'pnpm' } }));
    const verify = {
      allow: { fileRoots: [tmp.dir] },
      rules: [
        { name: 'lead', match: { source: '.*', fact: '^Bob Keller leads Project Falcon$' }, use: 'file', with: { path: team, select: '$.falcon.lead', expect: { equals: 'Bob Keller' } } },
        { name: 'tool', match: { source: '.*', fact: 'prefers npm' }, use: 'file', with: { path: team, select: '$.falcon.tool', expect: { equals: 'npm' } } },
      ],
    };
    const results: Record<string, unknown> = {};
    for (const kind of ['sqlite', 'pgvector'] as const) {
      const st = kind === 'pgvector' ? s : await sdkStore('sqlite', join(tmp.dir, kind));
      const mm = kind === 'pgvector' ? m : await st.open();
      const b = await build(mm);
      const config = st.configFile();
      const cfg = YAML.parse(readFileSync(config, 'utf8'));
      cfg.verify = verify;
      writeFileSync(config, YAML.stringify(cfg));
      const names = new Map([[b.alice[1]!, 'a2'], [b.bobKept, 'b1']]);
      const r = await cli(['run', 'drift', '--store', 'm', '--json', '--now', FAR, '--config', config]);
      expect(r.stderr).toBe('');
      expect(r.code, r.stdout).toBe(0);
      const out = r.json();
      const { verdicts, store: _st, now: _n, ...summary } = out;
      const applied = verdicts.map((x: any) => ({ id: names.get(x.id) ?? x.id, verdict: x.verdict, needsPerson: x.needsPerson }))
        .sort((x: any, y: any) => String(x.id).localeCompare(String(y.id)));
      expect(applied.length, JSON.stringify(out)).toBe(2);
      // Confirmed: the SDK's own updatedAt stamped; contradicted: left as it was, for a person.
      const stamps = { b1: (await mm.get(b.bobKept)).updatedAt, a2: (await mm.get(b.alice[1]!)).memory };
      results[kind] = { summary, applied, stamps };
      if (kind === 'pgvector') await mem0StillWorks(mm, b, true);
      else st.close(mm);
    }
    expect(results.pgvector).toEqual(results.sqlite);
    expect(results.pgvector).toMatchObject({ summary: { due: 2, confirmed: 1, contradicted: 1, toPerson: 1 }, applied: [{ id: 'a2', verdict: 'contradicted', needsPerson: true }, { id: 'b1', verdict: 'confirmed' }], stamps: { b1: '2027-09-01T00:00:00.000Z' } });
  });
  it('links mem0\'s own delete left to a memory that is gone: check names them, prune removes them as mem0\'s cleanup would, also killed -9 and run again; mem0 still works', async () => {
    const b = await build(m);
    // Alice's third memory, its delete cut short after mem0's first step (the row; then history; then the entity
    // links): only her entities still reach it, two of them ('Lisbon', 'Hugo Brandt') linking it alone.
    const a3 = (await m.add('Alice Martin visits Lisbon', { userId: 'alice', infer: false })).results[0].id as string;
    await m.update(a3, { text: 'Alice Martin visits Lisbon with Hugo Brandt' });
    await m.vectorStore.delete(a3);
    const linked = (await linksOf(m, 'alice')).filter((id) => id === a3).length;
    expect(linked).toBeGreaterThan(1);
    const names = new Map<string, string>([[b.alice[0]!, 'a1'], [b.alice[1]!, 'a2'], [a3, 'a3'], [b.bobKept, 'b1'], [b.bobExpiring, 'b2'], [b.carolDeleted, 'c1']]);
    const config = s.configFile();
    const run = (...args: string[]) => cli([...args, '--config', config]);
    const EARLY = '2026-12-10T00:00:00Z'; // before the expiries: prune's only work is what the cut-short delete left

    // The same store on a second server, where mem0's own cleanup finishes the delete.
    const copyServer = await startPgvectorServer();
    servers.push(copyServer);
    const copy = await copyStore(client, s, copyServer, join(tmp.dir, 'copy'));
    clients.push(copy.client);
    const cm = await copy.store.open();
    await cm._removeMemoryFromEntityStore(a3, { user_id: 'alice' });
    copy.store.close(cm);

    const check = (await run('check', '--json', '--now', EARLY)).json();
    expect(check.problems.find((p: any) => p.code === 'mem0_dangling_entity_link')?.count).toBe(linked);
    const before = await contents(client, s.historyPath, names);
    const dry = await run('run', 'prune', '--dry-run', '--json', '--now', EARLY);
    const dryLeft = dry.json().leftovers;
    expect(dryLeft.mem0_dangling_entity_link).toBe(linked);
    expect(dryLeft.mem0_entity_left_without_links).toBeGreaterThan(0);
    expect(await contents(client, s.historyPath, names)).toEqual(before);

    // Killed -9 after the links are rewritten, before the entities they left empty are deleted (in their grace).
    const args = ['run', 'prune', '--json', '--now', EARLY, '--config', config];
    const killed = await killedAt(args, { sql: 'DELETE FROM .*"memories_entities"', nth: 1, when: 'before' });
    expect(killed.signal ?? killed.code, killed.stderr).not.toBe(0);
    expect((await linksOf(m, 'alice')).filter((id) => id === a3)).toEqual([]);
    const emptyLists = async () => (await client.query(`SELECT count(*)::int AS n FROM memories_entities WHERE payload->'linkedMemoryIds' = '[]'::jsonb`)).rows[0].n as number;
    expect(await emptyLists()).toBeGreaterThan(0);
    const again = await cli(args);
    expect(again.stderr).toBe('');
    expect(again.code).toBe(0);
    expect(again.json().deleted).toBe(0);
    expect(again.json().leftovers.mem0_entity_left_without_links).toBe(dryLeft.mem0_entity_left_without_links); // as the dry run counted
    expect(await emptyLists()).toBe(0);
    // What mem0's own cleanup left on the copy: the same entities, links and history.
    expect(await contents(client, s.historyPath, names)).toEqual(await contents(copy.client, copy.store.historyPath, names));
    const after = (await run('check', '--json', '--now', EARLY)).json();
    expect(after.dangling).toBe(0);
    expect(after.problems.map((p: any) => p.code)).toEqual(['mem0_lost_vector']); // its history, which mem0 cannot delete either

    // erase --user alice still finds a3's text in history: prune recorded whose it was before the links went.
    const erased = await run('erase', '--user', 'alice', '--json', '--now', EARLY);
    expect(erased.code, erased.stdout).toBe(0);
    expect(readFileSync(s.historyPath).includes(Buffer.from('Lisbon'))).toBe(false);

    // mem0 reads and writes, and links entities again.
    s.close(m);
    m = await s.open();
    await mem0StillWorks(m, b, false);
    const d = (await m.add('Dora Lind visits Lisbon', { userId: 'dora', infer: false })).results[0].id;
    await m.update(d, { text: 'Dora Lind visits Lisbon with Hugo Brandt' });
    expect(await linksOf(m, 'dora')).toContain(d);
  });

  it('kill -9 of prune and erase at several points, then the re-run: nothing live lost, everything due gone, erase verified', async () => {
    // Each the step the process is killed instead of taking (pg-kill-at.cjs: before the nth matching statement).
    const points: { job: 'prune' | 'erase'; sql: string; nth?: number }[] = [
      { job: 'prune', sql: 'DELETE FROM .*"memories" WHERE' }, // nothing deleted yet
      { job: 'prune', sql: 'FROM "public"."memories_entities"' }, // the points gone, the entity links not yet touched
      { job: 'prune', sql: 'UPDATE .*"memories_entities"', nth: 2 }, // one link key's links rewritten (entities may be left with an empty list), the other's not yet
      { job: 'erase', sql: 'DELETE FROM .*"memories" WHERE' },
      { job: 'erase', sql: 'VACUUM' }, // rows deleted, the tables not yet rewritten
      { job: 'erase', sql: 'pg_read_binary_file|get_raw_page' }, // rewritten, the files not yet read back
    ];
    let first = true;
    for (const at of points) {
      if (!first) {
        // A store of its own for each point: a server, the SDK's tables, the same memories.
        s.close(m);
        await fresh(join(tmp.dir, `k${points.indexOf(at)}`));
      }
      first = false;
      const b = await build(m);
      const config = s.configFile();
      const args = at.job === 'prune' ? ['run', 'prune', '--json', '--now', FAR] : ['erase', '--user', 'alice', '--json', '--now', FAR];
      const killed = await killedAt([...args, '--config', config], { sql: at.sql, nth: at.nth ?? 1, when: 'before' });
      expect(killed.signal ?? killed.code, `${at.job} at ${at.sql}: ${killed.stderr}`).not.toBe(0); // killed, itself or its job's process
      const again = await cli([...args, '--config', config]);
      expect(again.stderr, `${at.job} at ${at.sql}`).toBe('');
      expect(again.code, `${at.job} at ${at.sql}: ${again.stdout}`).toBe(0);
      const ids = (await client.query('SELECT id::text AS id FROM memories')).rows.map((x) => x.id as string).sort();
      if (at.job === 'prune') {
        expect(ids, `${at.job} at ${at.sql}`).toEqual([b.alice[1]!, b.bobKept].sort()); // the two live ones, and only they
        // What the killed run left half done: a history without its DELETE row (mem0's own delete killed there leaves
        // the same) is named by check, never silent; an entity still linking the deleted memory is taken by the re-run.
        const report = (await cli(['check', '--json', '--now', FAR, '--config', config])).json();
        const codes = [...report.problems, ...report.notes].map((f: any) => f.code);
        for (const id of [b.alice[0]!, b.bobExpiring]) {
          if ((await m.history(id))[0].action !== 'DELETE') expect(codes, `${at.sql}: history of a pruned memory`).toContain('mem0_lost_vector');
        }
        expect(await linksOf(m, 'bob'), `${at.sql}: a link to a pruned memory`).not.toContain(b.bobExpiring);
        expect(codes, at.sql).not.toContain('mem0_dangling_entity_link');
      } else {
        expect(ids, `${at.job} at ${at.sql}`).toEqual([b.bobKept, b.bobExpiring].sort());
        expect(again.json().bytes.verdict).toBe('clean');
        expect(readFileSync(s.historyPath).includes(Buffer.from('Tempelhof'))).toBe(false);
        const dump = await relationBytes(client);
        for (const w of ['Tempelhof', 'tempelhof', 'Alice Martin', 'alice martin']) expect(dump.includes(Buffer.from(w)), `${at.sql}: ${w}`).toBe(false);
      }
      s.close(m);
      m = await s.open();
      await mem0StillWorks(m, b, at.job === 'prune');
    }
  });
  it('a restore killed -9 between mem0\'s tables and the history file: check names it, writers refuse, the next restore finishes it', async () => {
    const b = await build(m);
    const config = s.configFile();
    const run = (...args: string[]) => cli([...args, '--config', config]);
    const snap = await run('run', 'snapshot', '--json');
    expect(snap.code, snap.stderr).toBe(0);
    const dir = snap.json().dir as string;
    const dana = (await m.add('Dana Fox plays chess', { userId: 'dana', infer: false })).results[0].id as string;
    await m.delete(b.bobKept);
    s.close(m);
    m = undefined;

    // Killed instead of putting the restored history file in place: the tables are the snapshot's, the history not.
    const killed = await killedAt(['restore', dir, '--store', 'm', '--json', '--now', '2026-12-06T09:00:00Z', '--config', config],
      { file: { op: 'write', path: 'memory\\.db$', when: 'before' } });
    expect(killed.signal ?? killed.code, killed.stderr).not.toBe(0);
    const ids = async () => (await client.query('SELECT id::text AS id FROM memories')).rows.map((x) => x.id as string).sort();
    expect(await ids()).toEqual([...b.alice, b.bobKept, b.bobExpiring].sort());
    const check = await run('check', '--json', '--now', FAR);
    expect(check.code).toBe(1);
    expect(check.json().problems.map((f: any) => f.code)).toContain('restore_pending');
    const prune = await run('run', 'prune', '--json', '--now', FAR);
    expect(prune.code).not.toBe(0);
    expect(prune.stderr).toContain('was interrupted');

    const done = await run('restore', dir, '--store', 'm', '--json', '--now', '2026-12-06T09:00:30Z');
    expect(done.code, done.stdout + done.stderr).toBe(0);
    expect(await ids()).toEqual([...b.alice, b.bobKept, b.bobExpiring].sort());
    expect((await run('check', '--json', '--now', FAR)).json().problems).toEqual([]);
    m = await s.open();
    expect(await m.get(dana)).toBeNull();
    expect((await m.history(b.bobKept)).map((h: any) => h.action).sort()).toEqual(['ADD', 'UPDATE']); // the history is the snapshot's
    await mem0StillWorks(m, b, true);
  });
});
