import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { qdrantTarget, type QdrantTarget } from '../helpers/qdrant-server.js';
import { makeStore, tempDir, ids as rowIds } from '../helpers/store.js';
import { Mem0Fixture } from '../layouts/mem0-fixture.js';
import { writeSnapshotFolder } from '../helpers/snapshot-folder.js';
import { validateConfig, type Config } from '../../src/config/config.js';
import { erase } from '../../src/erase/erase.js';
import { listReceipts } from '../../src/erase/receipts.js';
import { openStore } from '../../src/layouts/open.js';
import { layoutOf } from '../../src/layouts/registry.js';
import { mem0Integrity } from '../../src/layouts/mem0/check.js';
import { silentLogger } from '../../src/log/logger.js';

const NOW = Date.UTC(2026, 10, 29, 12, 0, 0);
const DAY = 86_400_000;
const opts = { now: () => NOW, log: silentLogger };

let q: QdrantTarget;
let tmp: { dir: string; cleanup: () => void };
let fx: Mem0Fixture | undefined;

beforeEach(async () => {
  q = await qdrantTarget();
  tmp = tempDir('mw-erase-');
});
afterEach(async () => {
  fx?.close();
  fx = undefined;
  q.assertConforms();
  await q.close();
  tmp.cleanup();
});

/** Every byte SQLite keeps for this database: the file, its WAL and its rollback journal, whichever exist. */
function rawBytes(path: string): Buffer {
  return Buffer.concat([path, `${path}-wal`, `${path}-journal`].filter(existsSync).map((p) => readFileSync(p)));
}

function expectNowhere(bytes: Buffer, texts: string[]): void {
  for (const t of texts) expect(bytes.includes(Buffer.from(t, 'utf8')), `"${t}" still in the bytes`).toBe(false);
}

describe('erase, warden layout', () => {
  it('removes the rows with their cascade and their points, and the text is gone from the file and the WAL', async () => {
    const db = join(tmp.dir, 'memory.db');
    const secret = ['passport X123-SECRET-9981', 'lives at 7 Quay Lane, Dunmore', 'old address 3 Mill Row, Dunmore'];
    makeStore(db, [
      { id: 'a1', subject: 'alice', fact: `Alice ${secret[0]}`, created_at: '2026-11-01 10:00:00' },
      { id: 'a2', subject: 'alice', fact: `Alice ${secret[1]}`, created_at: '2026-11-02 10:00:00' },
      // an older version of a2, about to be cascaded away with it although its subject was mistyped
      { id: 'a0', subject: 'alcie', fact: `Alice ${secret[2]}`, created_at: '2026-10-02 10:00:00', superseded_by: 'a2' },
      { id: 'b1', subject: 'bob', fact: 'Bob prefers pnpm', created_at: '2026-11-03 10:00:00' },
      { id: 'b2', subject: 'bob', fact: 'Bob deploys through staging', created_at: '2026-11-03 11:00:00' },
    ]);
    const coll = q.name('memories');
    await q.createCollection(coll);
    await q.upsert(coll, [
      // a1's own point holds its text: the row's delete takes it, not the sweep
      ...['a1', 'a2', 'a0', 'b1', 'b2'].map((id, i) => ({ id: i + 1, payload: { memory_id: id, text: id === 'a1' ? `Alice ${secret[0]}` : `row ${id}` } })),
      // an orphan copy of alice's text that no row points to
      { id: 99, payload: { memory_id: 'gone', text: `Alice ${secret[0]}` } },
      // bob's point repeating alice's older text word for word: his row stays, so does the point
      { id: 98, payload: { memory_id: 'b2', note: `Alice ${secret[2]}` } },
    ]);
    const config: Config = validateConfig({
      stateDb: join(tmp.dir, 'state.db'),
      snapshot: { root: join(tmp.dir, 'backups') },
      stores: { agent: { db, qdrant: { url: q.url, ...(q.apiKey ? { apiKey: q.apiKey } : {}), collections: [coll] } } },
    });

    // The agent is running: its connection keeps the WAL (the rows are still only in WAL frames).
    const agent = new Database(db);
    agent.pragma('wal_autocheckpoint = 0');
    agent.prepare(`UPDATE memory SET last_used_at = '2026-11-28 00:00:00' WHERE id = 'a1'`).run();
    expect(rawBytes(db).includes(Buffer.from(secret[0]!))).toBe(true);

    // The dry run counts the stray copy the erase then deletes, and deletes nothing.
    const dry = await erase(config, 'agent', { user: 'alice' }, { ...opts, dryRun: true });
    expect(dry).toMatchObject({ dryRun: true, memories: 3, counts: { rows: 3, cascaded: 1, strayPoints: 1 } });
    expect(rowIds(db)).toEqual(['a0', 'a1', 'a2', 'b1', 'b2']);
    expect((await q.points(coll)).length).toBe(7);

    const r = await erase(config, 'agent', { user: 'alice' }, opts);
    expect(r).toMatchObject({ layout: 'warden', selector: 'user', memories: 3, counts: { rows: 3, cascaded: 1, strayPoints: 1 }, vacuumed: true, walTruncated: true });
    expect(r.counts).toEqual(dry.counts);
    expect(rowIds(db)).toEqual(['b1', 'b2']);
    expect((await q.points(coll)).map((p) => p.payload.memory_id).sort()).toEqual(['b1', 'b2', 'b2']);
    expectNowhere(rawBytes(db), [...secret, 'Alice']);
    // The agent's connection still works and sees the erase.
    expect(agent.prepare('SELECT count(*) AS n FROM memory').get()).toEqual({ n: 2 });
    agent.close();

    const [stored] = listReceipts(join(tmp.dir, 'state.db'));
    expect(stored).toMatchObject({ id: r.id, store: 'agent', selector: 'user', memories: 3 });
    const receiptText = JSON.stringify([r, stored]);
    for (const t of [...secret, 'alice', 'Alice']) expect(receiptText.includes(t)).toBe(false);
  });

  it('after its dry run the erase looks the rows up again once anything wrote to the store, and names the texts it deleted', async () => {
    const db = join(tmp.dir, 'memory.db');
    makeStore(db, [
      { id: 'a1', subject: 'alice', fact: 'Alice as planned' },
      { id: 'a0', subject: 'alcie', fact: 'Alice older', superseded_by: 'a1' }, // cascaded with a1
      { id: 'b1', subject: 'bob', fact: 'Bob stays' },
    ]);
    const config: Config = validateConfig({ stateDb: join(tmp.dir, 'state.db'), stores: { agent: { db } } });
    const store = openStore(config, 'agent');
    const agent = new Database(db);
    try {
      const layout = layoutOf(store);
      const run = (dryRun: boolean) => layout.erase(store, { ...opts, selector: { user: 'alice' }, dryRun });
      // The dry run names the rows and their texts as they are.
      const planned = await run(true);
      expect([...planned.texts].sort()).toEqual(['Alice as planned', 'Alice older']);
      agent.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES ('a5', 'alice', 'Alice five', 'message:t')`).run();
      // Another connection wrote after the dry run: a row added and a planned row's text changed.
      agent.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES ('a2', 'alice', 'Alice added after the plan', 'message:t')`).run();
      agent.prepare(`UPDATE memory SET fact = 'Alice changed after the plan' WHERE id = 'a1'`).run();
      const r = await run(false);
      expect([...r.ids].sort()).toEqual(['a0', 'a1', 'a2', 'a5']);
      expect([...r.texts].sort()).toEqual(['Alice added after the plan', 'Alice changed after the plan', 'Alice five', 'Alice older']);
      expect(r.counts).toMatchObject({ rows: 4, cascaded: 1 });
      expect(rowIds(db)).toEqual(['b1']);
      // The erase's own connection wrote after the dry run (no other connection did): looked up again too.
      await run(true);
      store.db.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES ('a3', 'alice', 'Alice three', 'message:t')`).run();
      expect([...(await run(false)).texts]).toEqual(['Alice three']);
      expect(rowIds(db)).toEqual(['b1']);
      // Nothing wrote in between, and the plan is kept for one erase only.
      agent.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES ('a4', 'alice', 'Alice four', 'message:t')`).run();
      await run(true);
      expect([...(await run(false)).ids]).toEqual(['a4']);
      agent.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES ('a6', 'alice', 'Alice six', 'message:t')`).run();
      expect([...(await run(false)).ids]).toEqual(['a6']);
    } finally {
      agent.close();
      store.close();
    }
  });

  it('--subject erases every row mentioning it, in any ASCII case', async () => {
    const db = join(tmp.dir, 'memory.db');
    makeStore(db, [
      { id: 'x1', subject: 'team', fact: 'Zed Okafor leads infra' },
      { id: 'x2', subject: 'ZED OKAFOR', fact: 'prefers tabs' },
      { id: 'x3', subject: 'team', fact: 'Infra uses Terraform' },
    ]);
    const config = validateConfig({ stateDb: join(tmp.dir, 'state.db'), stores: { s: { db } } });
    const r = await erase(config, 's', { subject: 'zed okafor' }, opts);
    expect(r.memories).toBe(2);
    expect(rowIds(db)).toEqual(['x3']);
    expectNowhere(rawBytes(db), ['Okafor', 'OKAFOR', 'prefers tabs']);
  });

  it('keeps a point of a surviving row even when its payload repeats an erased text', async () => {
    const db = join(tmp.dir, 'memory.db');
    makeStore(db, [
      { id: 'a1', subject: 'alice', fact: 'The build runs on Fridays' },
      { id: 'b1', subject: 'bob', fact: 'The build runs on Fridays' },
    ]);
    const coll = q.name('memories');
    await q.createCollection(coll);
    await q.upsert(coll, [
      { id: 1, payload: { memory_id: 'a1', text: 'The build runs on Fridays' } },
      { id: 2, payload: { memory_id: 'b1', text: 'The build runs on Fridays' } },
    ]);
    const config = validateConfig({
      stateDb: join(tmp.dir, 'state.db'),
      stores: { s: { db, qdrant: { url: q.url, ...(q.apiKey ? { apiKey: q.apiKey } : {}), collections: [coll] } } },
    });
    const r = await erase(config, 's', { user: 'alice' }, opts);
    expect(r.counts).toMatchObject({ rows: 1, strayPoints: 0 });
    expect((await q.points(coll)).map((p) => p.payload.memory_id)).toEqual(['b1']);
  });

  it('refuses a subject too short to mean one person', async () => {
    const db = makeStore(join(tmp.dir, 'memory.db'), []);
    const config = validateConfig({ stateDb: join(tmp.dir, 'state.db'), stores: { s: { db } } });
    await expect(erase(config, 's', { subject: 'Al' }, opts)).rejects.toThrow(/at least 3 characters/);
  });
});

describe('erase, mem0 layout', () => {
  async function mem0World() {
    fx = await Mem0Fixture.create(q, tmp.dir, 'python');
    const f = fx;
    const home = await f.add('Mira Zarkova lives at 12 Elm Street', { user_id: 'mira', actor_id: 'mira', role: 'user', at: NOW - 9 * DAY });
    await f.update(home, 'Mira Zarkova lives at 40 Oak Road', NOW - 5 * DAY);
    const health = await f.add('Mira Zarkova is allergic to penicillin', { user_id: 'mira', at: NOW - 8 * DAY, batch: true });
    await f.delete(health, NOW - 7 * DAY); // deleted through mem0: the text stays in history
    const pet = await f.add('Mira has a cat called Biscuit', { user_id: 'mira', at: NOW - 6 * DAY });
    const chess = await f.add('Bob likes chess', { user_id: 'bob', at: NOW - 6 * DAY });
    const meet = await f.add('Bob met Mira Zarkova at the chess club', { user_id: 'bob', at: NOW - 4 * DAY });
    const e1 = await f.entity('Mira Zarkova', [home, meet], { user_id: 'mira' });
    const e2 = await f.entity('Chess club', [chess, meet], { user_id: 'bob' });
    const e3 = await f.entity('Biscuit', [pet], { user_id: 'mira' });
    // mem0 left this link behind when it deleted the memory (its entity store was not open in that process)
    await f.entity('Penicillin', [health], { user_id: 'mira' });
    f.saveMessages('user_id=mira', [{ role: 'user', content: 'I am Mira Zarkova and I live at 40 Oak Road', name: 'mira' }], NOW - 5 * DAY);
    f.saveMessages('agent_id=helper&user_id=bob', [{ role: 'user', content: 'Bob here, I like chess' }], NOW - 4 * DAY);
    return { home, health, pet, chess, meet, e1, e2, e3 };
  }

  it('--subject scrubs points, entity links, history text and kept messages, byte for byte, and nothing else', async () => {
    const w = await mem0World();
    const f = fx!;
    const bobHistory = () => f.historyRows().filter((r) => r.memory_id === w.chess);
    const bobBefore = bobHistory();
    const config = f.config();
    const texts = ['Zarkova', '12 Elm Street', '40 Oak Road', 'penicillin'];
    expect(texts.every((t) => rawBytes(f.historyPath).includes(Buffer.from(t)))).toBe(true);
    // Two snapshots: one taken before (holds the text), one of unrelated data.
    const snapRoot = join(tmp.dir, 'backups', 'm');
    writeSnapshotFolder(join(tmp.dir, 'backups'), 'm', '2026-11-28T060000Z', { 'history.db': f.historyPath }, { layout: 'mem0' });
    writeFileSync(join(tmp.dir, 'points.json'), JSON.stringify({ points: [{ payload: { data: 'Bob likes chess' } }] }));
    writeSnapshotFolder(join(tmp.dir, 'backups'), 'm', '2026-11-20T060000Z', { 'store.db': makeStore(join(tmp.dir, 'empty.db')), 'mem0.snapshot': join(tmp.dir, 'points.json') }, { layout: 'mem0' });
    f.close();

    const dry = await erase(config, 'm', { subject: 'zarkova' }, { ...opts, dryRun: true });
    expect(dry.memories).toBe(3);
    expect(dry.counts).toMatchObject({ points: 2, messagesDeleted: 1 });
    expect((await f.points()).length).toBe(4);

    const r = await erase(config, 'm', { subject: 'zarkova' }, opts);
    expect(r.memories).toBe(3); // home, meet (points) and health (history only)
    expect(r.counts).toMatchObject({ points: 2, deleteRowsAdded: 2, messagesDeleted: 1, entitiesDeleted: 2 });
    expect(r.snapshots.found).toEqual([join(snapRoot, '2026-11-28T060000Z')]);
    expect(r.snapshots.deleted).toEqual([]);

    // Qdrant: the memories and the person's entity are gone, links to them dropped, everything else as it was.
    expect(new Set((await f.points()).map((p) => p.id))).toEqual(new Set([w.pet, w.chess]));
    const entities = await f.entityPoints();
    expect(new Map(entities.map((e) => [e.id, e.payload.linked_memory_ids]))).toEqual(new Map([[w.e2, [w.chess]], [w.e3, [w.pet]]]));
    for (const p of [...(await f.points()), ...entities]) expect(JSON.stringify(p.payload)).not.toMatch(/zarkova/i);

    // history.db: no byte of the text anywhere, history still a consistent mem0 log.
    expectNowhere(rawBytes(f.historyPath), texts);
    const h = new Database(f.historyPath, { readonly: true });
    const rows = h.prepare('SELECT * FROM history ORDER BY rowid').all() as Record<string, unknown>[];
    const messages = h.prepare('SELECT * FROM messages').all() as Record<string, unknown>[];
    h.close();
    for (const row of rows.filter((x) => [w.home, w.health, w.meet].includes(String(x.memory_id)))) {
      expect(row).toMatchObject({ old_memory: null, new_memory: null, actor_id: null });
    }
    const lastOf = (id: string) => rows.filter((x) => x.memory_id === id).at(-1)!;
    for (const id of [w.home, w.health, w.meet]) expect(lastOf(id)).toMatchObject({ event: 'DELETE', is_deleted: 1 });
    expect(rows.filter((x) => x.memory_id === w.chess)).toEqual(bobBefore);
    expect(lastOf(w.pet)).toMatchObject({ event: 'ADD', new_memory: 'Mira has a cat called Biscuit' });
    expect(messages.map((m) => m.content)).toEqual(['Bob here, I like chess']);

    const store = openStore(config, 'm');
    try {
      const findings = await mem0Integrity(store, { now: NOW, mountsFile: join(tmp.dir, 'none') });
      expect(findings.filter((x) => x.severity === 'error')).toEqual([]);
    } finally {
      store.close();
    }

    // Now with --snapshots: the folder holding the text goes, the other stays.
    const again = await erase(config, 'm', { subject: 'zarkova' }, { ...opts, snapshots: true });
    expect(again.snapshots.deleted).toEqual([join(snapRoot, '2026-11-28T060000Z')]);
    expect(existsSync(join(snapRoot, '2026-11-28T060000Z'))).toBe(false);
    expect(existsSync(join(snapRoot, '2026-11-20T060000Z', 'mem0.snapshot'))).toBe(true);
    expect(JSON.stringify(listReceipts(join(tmp.dir, 'state.db')))).not.toMatch(/zarkova|Elm|Oak|penicillin/i);
  });

  it('--user removes the person\'s memories, entities and conversation; other users keep theirs', async () => {
    const w = await mem0World();
    const f = fx!;
    f.close();
    const r = await erase(f.config(), 'm', { user: 'mira' }, opts);
    // home and pet by their points; health, deleted earlier, through the link mira's entity kept to it. Bob's
    // memory that mira's entity also links to stays: its point says it is bob's.
    expect(r.memories).toBe(3);
    expect(new Set((await f.points()).map((p) => p.id))).toEqual(new Set([w.chess, w.meet]));
    // mira's entities go whole (their text names her); bob's entity keeps its links to bob's memories.
    expect((await f.entityPoints()).map((e) => [e.id, e.payload.linked_memory_ids])).toEqual([[w.e2, [w.chess, w.meet]]]);
    expectNowhere(rawBytes(f.historyPath), ['12 Elm Street', '40 Oak Road', 'Biscuit', 'I am Mira', 'penicillin']);
    const h = new Database(f.historyPath, { readonly: true });
    expect((h.prepare('SELECT session_scope FROM messages').all() as { session_scope: string }[]).map((m) => m.session_scope)).toEqual(['agent_id=helper&user_id=bob']);
    h.close();
  });

  it('--user says how many deleted memories history still holds text of that it cannot attribute; --subject reaches them', async () => {
    fx = await Mem0Fixture.create(q, tmp.dir);
    const f = fx;
    await f.add('Erin Walsh likes rowing', { user_id: 'erin', at: NOW - 3 * DAY });
    const gone = await f.add('Erin Walsh moved to Cork', { user_id: 'erin', at: NOW - 3 * DAY });
    await f.add('Bob Lund plays chess', { user_id: 'bob', at: NOW - 3 * DAY });
    await f.delete(gone, NOW - 2 * DAY); // mem0's own delete: its point and links go, its text stays in history
    f.close();
    const r = await erase(f.config(), 'm', { user: 'erin' }, opts);
    expect(r.memories).toBe(1);
    expect(r.unreached).toEqual([{ what: 'history-of-deleted-memories', facts: { memories: 1 }, reach: expect.stringContaining('erase --subject TEXT') }]);
    expect(rawBytes(f.historyPath).includes(Buffer.from('moved to Cork'))).toBe(true); // the truth the receipt says
    const bySubject = await erase(f.config(), 'm', { subject: 'Erin Walsh' }, opts);
    expect(bySubject.memories).toBe(1);
    expectNowhere(rawBytes(f.historyPath), ['Erin Walsh', 'Cork']);
    expect((await erase(f.config(), 'm', { user: 'erin' }, opts)).unreached).toEqual([]);
    // Bob's live memory is no one's unknown: never counted.
    expect((await erase(f.config(), 'm', { user: 'nobody' }, { ...opts, dryRun: true })).unreached).toEqual([]);
  });

  it('--subject matches payload values, never payload keys', async () => {
    fx = await Mem0Fixture.create(q, tmp.dir);
    await fx.add('Likes hiking', { user_id: 'ursula', at: NOW - DAY, metadata: { category: 'hobby' } });
    fx.close();
    const r = await erase(fx.config(), 'm', { subject: 'user' }, { ...opts, dryRun: true });
    expect(r.memories).toBe(0);
    expect((await erase(fx.config(), 'm', { subject: 'hobby' }, { ...opts, dryRun: true })).memories).toBe(1);
  });

  it('scrubs history even when the vectors are gone (collection lost with a tmpfs reboot)', async () => {
    fx = await Mem0Fixture.create(q, tmp.dir);
    const a = await fx.add('Yusuf Demir was in hospital', { user_id: 'yusuf', at: NOW - DAY });
    fx.close();
    await fetch(`${q.url}/collections/${fx.collection}`, { method: 'DELETE', headers: q.apiKey ? { 'api-key': q.apiKey } : {} });
    await expect(erase(fx.config(), 'm', { subject: 'Demir' }, opts)).rejects.toThrow(/there is no collection .* records 1 memory\(ies\): nothing was erased/);
    expect(rawBytes(fx.historyPath).includes(Buffer.from('hospital'))).toBe(true);
    const r = await erase(fx.config(), 'm', { subject: 'Demir' }, { ...opts, vectorsLost: true });
    expect(r).toMatchObject({ memories: 1, counts: { points: 0, deleteRowsAdded: 1 } });
    expectNowhere(rawBytes(fx.historyPath), ['Demir', 'hospital']);
    const h = new Database(fx.historyPath, { readonly: true });
    expect(h.prepare('SELECT memory_id, event FROM history ORDER BY rowid').raw().all()).toEqual([[a, 'ADD'], [a, 'DELETE']]);
    h.close();
  });

  it('--ids on a TypeScript-port store: memory_history scrubbed, DELETE rows in the port\'s shape', async () => {
    fx = await Mem0Fixture.create(q, tmp.dir, 'typescript');
    const f = fx;
    const a = await f.add('Quentin Varga has diabetes', { user_id: 'quentin', at: NOW - 3 * DAY });
    const b = await f.add('Quentin Varga drives a van', { user_id: 'quentin', at: NOW - 3 * DAY });
    f.close();
    const r = await erase(f.config(), 'm', { ids: [a, '00000000-0000-4000-8000-000000000000'] }, opts);
    expect(r.memories).toBe(1);
    expect((await f.points()).map((p) => p.id)).toEqual([b]);
    expectNowhere(rawBytes(f.historyPath), ['diabetes']);
    expect(rawBytes(f.historyPath).includes(Buffer.from('drives a van'))).toBe(true);
    const h = new Database(f.historyPath, { readonly: true });
    const rows = h.prepare('SELECT memory_id, previous_value, new_value, action, is_deleted FROM memory_history WHERE memory_id = ? ORDER BY id').all(a);
    h.close();
    expect(rows).toEqual([
      { memory_id: a, previous_value: null, new_value: null, action: 'ADD', is_deleted: 0 },
      { memory_id: a, previous_value: null, new_value: null, action: 'DELETE', is_deleted: 1 },
    ]);
  });
});
