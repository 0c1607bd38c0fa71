import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { copyFileSync, existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { tempDir } from '../helpers/store.js';
import { startQdrantTestServer, type QdrantTestServer } from '../helpers/qdrant-server.js';
import { cliAsync as cli, sdkStore, type SdkStore, type VectorKind } from './mem0-sdk.js';

/**
 * A mem0 store written only by mem0ai's own TypeScript SDK (adds, text updates that link entities, deletes,
 * deleteAll, several users), with its default SQLite vector store and with Qdrant, taken through every
 * memory-warden command a user runs on it. After each one mem0's own API still reads and writes the store.
 */
const FAR = '2027-09-01T00:00:00Z'; // past every expiration_date below, and > 90 days after every write

interface Built {
  alice: string[];
  /** Alice's memory whose point went in a crash of mem0's own delete: only her entities' links still reach it. */
  aliceLinkedOnly: string;
  bobKept: string;
  bobExpiring: string;
  dave: string[];
  carolDeleted: string;
}

async function build(s: SdkStore, m: any): Promise<Built> {
  const add = async (text: string, userId: string, extra: Record<string, unknown> = {}) =>
    (await m.add(text, { userId, infer: false, ...extra })).results[0].id as string;
  const a1 = await add('Alice Martin lives in Berlin', 'alice', { expirationDate: '2026-12-20' });
  await m.update(a1, { text: 'Alice Martin lives in Berlin near Tempelhof Airport' });
  const a2 = await add('Alice Martin prefers pnpm', 'alice');
  await m.update(a2, { text: 'Alice Martin prefers npm for Project Falcon' });
  const a3 = await add('Alice Martin visits Lisbon', 'alice');
  await m.update(a3, { text: 'Alice Martin visits Lisbon with Hugo Brandt' });
  const b1 = await add('Bob Keller works on Project Falcon', 'bob');
  await m.update(b1, { text: 'Bob Keller leads Project Falcon' });
  const b2 = await add('Bob Keller drinks tea', 'bob', { expirationDate: '2026-12-20' });
  await m.update(b2, { text: 'Bob Keller drinks Earl Grey in Vienna' });
  const d1 = await add('Dave Olsen plays chess', 'dave');
  const d2 = await add('Dave Olsen owns a boat', 'dave');
  await m.deleteAll({ userId: 'dave' });
  const c1 = await add('Carol Nguyen has a cat', 'carol');
  await m.update(c1, { text: 'Carol Nguyen has a cat named Miso Tanaka' });
  await m.delete(c1);
  // mem0's deleteMemory removes the vector first, then writes history, then unlinks entities: killed after the
  // first step, the memory's text is in history and only Alice's entities still point at it.
  await m.vectorStore.delete(a3);
  expect(await m.get(a3)).toBeNull();
  return { alice: [a1, a2], aliceLinkedOnly: a3, bobKept: b1, bobExpiring: b2, dave: [d1, d2], carolDeleted: c1 };
}

/** mem0's own API on the store: getAll, get, search, history and add all work, and say what they should. */
async function mem0StillWorks(m: any, b: Built, expectAlice: boolean): Promise<void> {
  const bob = (await m.getAll({ filters: { user_id: 'bob' } })).results.map((r: any) => r.id);
  expect(bob).toContain(b.bobKept);
  expect((await m.get(b.bobKept)).memory).toBe('Bob Keller leads Project Falcon');
  const found = await m.search('Bob Keller leads Project Falcon', { filters: { user_id: 'bob' } });
  expect(found.results.map((r: any) => r.id)).toContain(b.bobKept);
  expect((await m.history(b.bobKept)).map((h: any) => h.action).sort()).toEqual(['ADD', 'UPDATE']);
  const alice = (await m.getAll({ filters: { user_id: 'alice' } })).results;
  expect(alice.length > 0).toBe(expectAlice);
  const added = (await m.add('Erin Walsh likes rowing', { userId: 'erin', infer: false })).results[0].id;
  expect((await m.get(added)).memory).toBe('Erin Walsh likes rowing');
  await m.delete(added);
}

/** Entity links of one user's entities, read through the SDK's own entity store. */
async function linksOf(m: any, userId: string): Promise<string[]> {
  const [rows] = await (await m.getEntityStore()).list({ user_id: userId }, 1000);
  return rows.flatMap((r: any) => r.payload.linkedMemoryIds ?? []);
}

/** One user's entities as the SDK lists them: text and links, in order. */
async function entitiesOf(m: any, userId: string): Promise<unknown[]> {
  const [rows] = await (await m.getEntityStore()).list({ user_id: userId }, 1000);
  return rows.map((r: any) => ({ id: r.id, data: r.payload.data, links: [...(r.payload.linkedMemoryIds ?? [])].sort() }))
    .sort((a: any, b: any) => a.id.localeCompare(b.id));
}

/** Every file under the test's folder: the SDK's files, memory-warden's state db, every snapshot folder. */
function filesOf(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? filesOf(join(dir, e.name)) : e.isFile() ? [join(dir, e.name)] : []));
}

function expectNowhere(files: string[], words: string[]): void {
  for (const f of files) {
    const bytes = readFileSync(f);
    for (const w of words) expect(bytes.includes(Buffer.from(w)), `${w} in ${f}`).toBe(false);
  }
}

describe.each<VectorKind>(['sqlite', 'qdrant'])('a store built by mem0ai 3.3.1 with its %s vector store', (kind) => {
  let tmp: ReturnType<typeof tempDir>;
  let q: QdrantTestServer | undefined;
  let s: SdkStore;
  let m: any;

  beforeEach(async () => {
    tmp = tempDir('mw-sdk-');
    q = kind === 'qdrant' ? await startQdrantTestServer() : undefined;
    s = await sdkStore(kind, tmp.dir, q ? { url: q.url } : undefined);
    m = await s.open();
  });

  afterEach(async () => {
    if (m) s.close(m);
    q?.assertConforms();
    await q?.close();
    tmp.cleanup();
  });

  it('check, prune, digest, review, snapshot + restore and erase --user all work, and mem0 still does', async () => {
    const b = await build(s, m);
    const config = s.configFile();
    const run = (...args: string[]) => cli([...args, '--config', config]);
    const linkedOnly = (await linksOf(m, 'alice')).filter((id) => id === b.aliceLinkedOnly).length;
    expect(linkedOnly).toBeGreaterThan(0);

    // check: the SDK's defaults are found (collection memories, memory_history); what the crash left is reported:
    // the memory without its point, and the entity links to it (camelCase linkedMemoryIds).
    const check = await run('check', '--json', '--now', FAR);
    expect(check.stderr).toBe('');
    const report = check.json();
    expect(report.problems.map((p: any) => p.code)).toEqual(['mem0_lost_vector', 'mem0_dangling_entity_link']);
    expect(report.rows).toBe(4);
    expect(report.dangling).toBe(linkedOnly);

    // review: check's reviewDue is review list's count; confirm stamps the SDK's own updatedAt.
    const list = (await run('review', 'list', '--json', '--now', FAR)).json();
    expect(report.reviewDue).toBe(list.dueTotal);
    expect(list.dueTotal).toBe(2); // the two not expired by FAR
    // The SDK records no source (no actor, no role): the text says so, as the digest does.
    expect(list.next.map((r: any) => r.source)).toEqual(['', '']);
    const listed = await run('review', 'list', '--now', FAR);
    expect(listed.stdout.split('\n').filter((l: string) => l.includes('confirmed ')).map((l: string) => l.slice(l.lastIndexOf('  ') + 2))).toEqual(['[(none)]', '[(none)]']);
    const confirmed = await run('review', 'confirm', b.bobKept, '--now', FAR);
    expect(confirmed.code).toBe(0);
    expect((await m.get(b.bobKept)).updatedAt).toBe('2027-09-01T00:00:00.000Z');
    expect((await run('review', 'list', '--json', '--now', FAR)).json().dueTotal).toBe(1);

    // digest: only commands this layout can do.
    const digest = await run('digest', '--preview', '--now', FAR);
    expect(digest.code).toBe(0);
    expect(digest.stdout).toContain('review confirm');
    expect(digest.stdout).not.toContain('review supersede');

    // The same store copied (the SDK's files: sqlite only), on which mem0's own calls do what prune will: delete the
    // expired memories, and finish the delete the crash cut short with the SDK's own entity cleanup.
    const copyDir = tempDir('mw-sdk-copy-'); // outside the folder erase's byte check below reads
    const copy = kind === 'sqlite' ? await sdkStore('sqlite', copyDir.dir) : undefined;
    if (copy) for (const [from, to] of [[s.historyPath, copy.historyPath], [s.vectorDb, copy.vectorDb], [s.entityVectorDb, copy.entityVectorDb]]) copyFileSync(from!, to!);

    // prune --dry-run counts the links the crash left and changes nothing.
    const dry = await run('run', 'prune', '--dry-run', '--json', '--now', FAR);
    const dryLeft = dry.json().leftovers;
    expect(dryLeft.mem0_dangling_entity_link).toBe(linkedOnly);
    expect((await linksOf(m, 'alice')).filter((id) => id === b.aliceLinkedOnly).length).toBe(linkedOnly);

    // prune: the expired memories go as mem0's delete would take them, links included; then the links to the memory
    // whose delete was cut short, as mem0's own cleanup would have removed them.
    expect(await linksOf(m, 'bob')).toContain(b.bobExpiring);
    const prune = await run('run', 'prune', '--json', '--now', FAR);
    expect(prune.code).toBe(0);
    expect(prune.json().deleted).toBe(2);
    expect(prune.json().leftovers.mem0_dangling_entity_link).toBe(linkedOnly);
    expect(prune.json().leftovers.mem0_entity_left_without_links).toBeGreaterThan(0); // 'Lisbon', 'Hugo Brandt': linked to it alone
    expect(dryLeft).toEqual(prune.json().leftovers); // the dry run counted the entities too
    expect((await run('run', 'prune', '--json', '--now', FAR)).json().leftovers).toEqual({ mem0_dangling_entity_link: 0, mem0_entity_left_without_links: 0 });
    expect(await m.get(b.bobExpiring)).toBeNull();
    expect(await linksOf(m, 'bob')).not.toContain(b.bobExpiring);
    expect(await linksOf(m, 'bob')).toContain(b.bobKept);
    expect(await linksOf(m, 'alice')).not.toContain(b.aliceLinkedOnly);
    expect((await m.history(b.bobExpiring))[0].action).toBe('DELETE');
    const after = (await run('check', '--json', '--now', FAR)).json();
    expect(after.dangling).toBe(0);
    expect(after.problems.map((p: any) => p.code)).toEqual(['mem0_lost_vector']); // its history: mem0 cannot delete it either
    if (copy) {
      const cm = await copy.open();
      for (const id of [b.alice[0]!, b.bobExpiring]) await cm.delete(id);
      await cm._removeMemoryFromEntityStore(b.aliceLinkedOnly, { user_id: 'alice' });
      for (const user of ['alice', 'bob']) expect(await entitiesOf(m, user), user).toEqual(await entitiesOf(cm, user));
      copy.close(cm);
    }
    copyDir.cleanup();
    await mem0StillWorks(m, b, true);

    // snapshot, then a change, then restore: the change is gone from every part, mem0 reads the snapshot's state.
    const snap = await run('run', 'snapshot', '--json', '--now', '2027-09-01T01:00:00Z');
    expect(snap.code).toBe(0);
    const dir = snap.json().dir as string;
    if (kind === 'sqlite') expect(readdirSync(join(dir, 'vectors')).sort()).toEqual(['0-vector_store.db', '1-vector_store_entities.db']);
    const later = (await m.add('Frank Ross moved to Oslo', { userId: 'frank', infer: false })).results[0].id;
    await m.update(b.bobKept, { text: 'Bob Keller left Project Falcon' });
    s.close(m); // the agent stops for the restore
    m = undefined;
    const restore = await run('restore', dir, '--json', '--now', '2027-09-01T02:00:00Z');
    expect(restore.stderr).toBe('');
    expect(restore.code).toBe(0);
    m = await s.open();
    expect(await m.get(later)).toBeNull();
    expect((await m.get(b.bobKept)).memory).toBe('Bob Keller leads Project Falcon');
    await mem0StillWorks(m, b, true);
    expect((await run('check', '--json', '--now', FAR)).json().problems.map((p: any) => p.code)).toEqual(['mem0_lost_vector']);

    // erase --user alice: her memories, the one only her entities reached before prune removed those links (the
    // ledger recorded whose it was), her entities; bytes gone everywhere.
    const erased = await run('erase', '--user', 'alice', '--snapshots', '--json', '--now', FAR);
    expect(erased.stderr).toBe('');
    expect(erased.code).toBe(0);
    // her two, and the one prune took earlier: memory-warden's ledger remembers whose it was (src/erase/ledger.ts)
    expect(erased.json().memories).toBe(3);
    expect(erased.json().snapshots.deleted.length).toBeGreaterThan(0); // the snapshot taken above held her text
    expect(await linksOf(m, 'alice')).toEqual([]);
    expect(await m.get(b.alice[1]!)).toBeNull();
    await mem0StillWorks(m, b, false);
    s.close(m);
    m = await s.open();
    expectNowhere(filesOf(tmp.dir), ['Lisbon', 'Hugo Brandt', 'prefers npm', 'prefers pnpm', 'Tempelhof']);
    if (q) {
      // Qdrant's side: no point of any collection carries the erased text, in any payload key.
      for (const c of ['memories', 'memories_entities']) {
        const r = await fetch(`${q.url}/collections/${c}/points/scroll`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ limit: 1000, with_payload: true }) });
        const text = JSON.stringify(await r.json());
        for (const w of ['Lisbon', 'Hugo Brandt', 'prefers npm', 'Tempelhof', 'lisbon', 'tempelhof']) expect(text.includes(w), `${w} in ${c}`).toBe(false);
        if (c === 'memories') expect(text).toContain('Bob Keller leads Project Falcon');
      }
    }
    expect(readFileSync(s.historyPath).includes(Buffer.from('Bob Keller leads'))).toBe(true);
    expect(existsSync(join(tmp.dir, 'backups', 'm'))).toBe(true);
    await mem0StillWorks(m, b, false);
  }, 300_000);

  it('prune --dry-run counts what the prune after it changes (DELETE rows, entity links and entities) and changes nothing', async () => {
    const b = await build(s, m);
    const config = s.configFile();
    const files = () => [s.historyPath, ...(kind === 'sqlite' ? [s.vectorDb, s.entityVectorDb] : [])].map((f) => readFileSync(f));
    const before = files();
    const dry = await cli(['run', 'prune', '--dry-run', '--json', '--now', FAR, '--config', config]);
    expect(dry.stderr).toBe('');
    expect(dry.code, dry.stdout).toBe(0);
    expect(files()).toEqual(before);
    expect(await m.get(b.bobExpiring)).not.toBeNull();
    expect(await linksOf(m, 'bob')).toContain(b.bobExpiring);
    const real = await cli(['run', 'prune', '--json', '--now', FAR, '--config', config]);
    expect(real.stderr).toBe('');
    expect(real.code, real.stdout).toBe(0);
    const counts = (r: any) => ({
      deleted: r.deleted, expired: r.expired, ids: [...r.ids].sort(), historyRows: r.historyRows,
      entityLinksRemoved: r.entityLinksRemoved, entitiesDeleted: r.entitiesDeleted, leftovers: r.leftovers,
    });
    expect(counts(dry.json())).toEqual(counts(real.json()));
    for (const k of ['deleted', 'historyRows', 'entityLinksRemoved', 'entitiesDeleted'] as const) expect(counts(real.json())[k], k).toBeGreaterThan(0);
    expect(await m.get(b.bobExpiring)).toBeNull();
  }, 300_000);

  it('erase --dry-run counts what the erase after it changes (history rows, entity links and entities) and changes nothing', async () => {
    await build(s, m);
    const config = s.configFile();
    const files = () => [s.historyPath, ...(kind === 'sqlite' ? [s.vectorDb, s.entityVectorDb] : [])].map((f) => readFileSync(f));
    // --subject: entities naming it go whole, others lose their links to its memories; --user: her entities go,
    // and with them the links to the memory only they still reach.
    for (const sel of [['--subject', 'project falcon'], ['--user', 'alice']]) {
      const before = files();
      const dry = await cli(['erase', ...sel, '--dry-run', '--json', '--now', FAR, '--config', config]);
      expect(dry.stderr).toBe('');
      expect(dry.code, dry.stdout).toBe(0);
      expect(files()).toEqual(before);
      const real = await cli(['erase', ...sel, '--json', '--now', FAR, '--config', config]);
      expect(real.stderr).toBe('');
      expect(real.code, real.stdout).toBe(0);
      const counts = dry.json().counts;
      expect(counts, sel.join(' ')).toEqual(real.json().counts);
      expect(dry.json().memories).toBe(real.json().memories);
      for (const k of ['historyRowsScrubbed', 'deleteRowsAdded', 'entityLinksRemoved', 'entitiesDeleted']) expect(counts[k], `${sel.join(' ')}: ${k}`).toBeGreaterThan(0);
    }
    expect((await m.getAll({ filters: { user_id: 'bob' } })).results.map((r: any) => r.memory)).toEqual(['Bob Keller drinks Earl Grey in Vienna']);
  }, 300_000);

  it('the digest lists as new only the memories that still exist: one mem0 deleted the same day is not', async () => {
    const kept = (await m.add('Hana Sato likes kayaking', { userId: 'hana', infer: false })).results[0].id as string;
    const gone = (await m.add('Hana Sato lives in Osaka', { userId: 'hana', infer: false })).results[0].id as string;
    await m.delete(gone);
    expect(await m.get(gone)).toBeNull();
    const later = new Date(Date.now() + 3_600_000).toISOString();
    const json = await cli(['digest', '--preview', '--json', '--now', later, '--config', s.configFile()]);
    expect(json.code, json.stderr).toBe(0);
    const [section] = json.json().model.stores;
    expect(section.newRows).toMatchObject({ total: 1, more: 0 });
    expect(section.newRows.shown.map((r: any) => [r.id, r.fact])).toEqual([[kept, 'Hana Sato likes kayaking']]);
    const text = await cli(['digest', '--preview', '--now', later, '--config', s.configFile()]);
    expect(text.stdout).toContain('Hana Sato likes kayaking');
    expect(text.stdout).not.toContain('Hana Sato lives in Osaka');
    expect(text.stdout).toMatch(/New memories: 1\b/);
    expect(text.stdout).toContain(kept);
    expect(text.stdout).not.toContain(gone);
  }, 120_000);

  it('erase refuses, changing nothing, when the configured collection is not the one the SDK writes', async () => {
    const b = await build(s, m);
    const other = kind === 'sqlite' ? { collection: 'mem0', vectorDb: join(tmp.dir, 'elsewhere.db') } : { collection: 'mem0' };
    const config = s.configFile(other);
    const before = readFileSync(s.historyPath);
    for (const sel of [['--user', 'alice'], ['--subject', 'Alice Martin'], ['--ids', b.alice[0]!]]) {
      const r = await cli(['erase', ...sel, '--config', config]);
      expect(r.code).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      // With Qdrant the config names the collection twice, and the two disagree: one error naming both fields.
      if (kind === 'qdrant') expect(r.stderr).toMatch(/stores\.m\.mem0\.collection: "mem0" is not in this store's qdrant\.collections \(memories, memories_entities\)/);
      else expect(r.stderr).toMatch(/there is no collection "mem0" .* nothing was erased/);
    }
    expect(readFileSync(s.historyPath).equals(before)).toBe(true);
    expect((await m.getAll({ filters: { user_id: 'alice' } })).results).toHaveLength(2);
    const check = await cli(['check', '--json', '--config', config]);
    expect(check.code).toBe(kind === 'qdrant' ? 2 : 1);
    if (kind === 'sqlite') expect(check.json().problems.find((p: any) => p.code === 'mem0_no_collection').message).toContain('no collection "mem0"');
  }, 120_000);
});

describe('SQLite vector store details', () => {
  it('reads the SDK files without changing their journal mode', async () => {
    const tmp = tempDir('mw-sdk-');
    try {
      const s = await sdkStore('sqlite', tmp.dir);
      const m = await s.open();
      await m.add('Gina Lopez likes jazz', { userId: 'gina', infer: false });
      const r = await cli(['check', '--json', '--config', s.configFile()]);
      expect(r.json().rows).toBe(1);
      // The effective config names the SDK's vector file this store reads.
      expect((await cli(['config', '--config', s.configFile()])).json().stores.m.mem0).toMatchObject({ vectorStore: 'sqlite', vectorDb: s.vectorDb });
      s.close(m);
      for (const f of [s.historyPath, s.vectorDb]) {
        const db = new Database(f, { readonly: true });
        expect(db.pragma('journal_mode', { simple: true })).toBe('delete');
        db.close();
      }
    } finally {
      tmp.cleanup();
    }
  }, 60_000);
});
