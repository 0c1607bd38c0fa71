import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { tempDir } from '../helpers/store.js';
import { startQdrantTestServer, type QdrantTestServer } from '../helpers/qdrant-server.js';
import { sdkStore, type SdkStore } from './mem0-sdk.js';
import { sqliteVectorStore } from '../../src/vectors/mem0-sqlite/index.js';
import { scrollAll } from '../../src/vectors/contract.js';
import { openStore } from '../../src/layouts/open.js';
import { mem0Prune } from '../../src/layouts/mem0/memories.js';
import { mem0CheckReport, mem0Integrity } from '../../src/layouts/mem0/check.js';
import { writeFileSync } from 'node:fs';
import { erase } from '../../src/erase/erase.js';
import { validateConfig, type Config } from '../../src/config/config.js';
import { silentLogger } from '../../src/log/logger.js';

/**
 * The TypeScript SDK's SQLite vector store as memory-warden's PointStore, on files the SDK itself wrote, and the
 * checks that keep erase from reporting success on a store it cannot see.
 */
const NOW = Date.parse('2027-06-01T00:00:00Z');
let tmp: ReturnType<typeof tempDir>;
let s: SdkStore;
let m: any;

beforeEach(async () => {
  tmp = tempDir('mw-sdkv-');
  s = await sdkStore('sqlite', tmp.dir);
  m = await s.open();
});
afterEach(() => {
  s.close(m);
  tmp.cleanup();
});

const add = async (text: string, userId: string, extra: Record<string, unknown> = {}) => (await m.add(text, { userId, infer: false, ...extra })).results[0].id as string;
const files = () => sqliteVectorStore({ memories: s.vectorDb, memories_entities: s.entityVectorDb });

function config(mem0: Record<string, unknown> = {}): Config {
  return validateConfig({ stateDb: join(tmp.dir, 'state.db'), snapshot: { root: join(tmp.dir, 'b') }, stores: { m: { layout: 'mem0', db: s.historyPath, mem0: { vectorStore: 'sqlite', vectorDb: s.vectorDb, pageSize: 2, ...mem0 } } } });
}

describe('the SDK SQLite files as a PointStore', () => {
  it('pages through every point once, in id order, with only the asked keys; unknown ids are absent', async () => {
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push(await add(`Hana Ito fact number ${i}`, 'hana'));
    const v = files();
    expect(await v.collections()).toEqual(['memories']); // no entity linked yet: the SDK made no entity file
    const seen: string[] = [];
    for await (const page of scrollAll(v, 'memories', 2, ['data'])) {
      expect(page.length).toBeLessThanOrEqual(2);
      for (const p of page) {
        expect(Object.keys(p.payload)).toEqual(['data']);
        seen.push(p.id);
      }
    }
    expect(seen).toEqual([...ids].sort());
    expect((await v.retrieve('memories', [ids[0]!, 'no-such-id'], false)).map((p) => p.id)).toEqual([ids[0]]);
  });

  it('setPayload merges into the JSON the SDK reads back; delete + compact leave no byte of the text', async () => {
    const a = await add('Ivo Peters has a Tesla', 'ivo');
    const b = await add('Ivo Peters sails', 'ivo');
    const v = files();
    await v.setPayload('memories', a, { updatedAt: '2027-01-01T00:00:00.000Z' });
    expect(await m.get(a)).toMatchObject({ memory: 'Ivo Peters has a Tesla', updatedAt: '2027-01-01T00:00:00.000Z', user_id: 'ivo' });
    await v.delete('memories', [a]);
    await v.compact();
    expect(await m.get(a)).toBeNull();
    expect((await m.get(b)).memory).toBe('Ivo Peters sails');
    expect(readFileSync(s.vectorDb).includes(Buffer.from('Tesla'))).toBe(false);
    const db = new Database(s.vectorDb, { readonly: true });
    expect(db.pragma('journal_mode', { simple: true })).toBe('delete');
    db.close();
  });

  it('a file that is not the SDK\'s is refused, naming it', async () => {
    const other = join(tmp.dir, 'other.db');
    new Database(other).exec('CREATE TABLE t (x)');
    const v = sqliteVectorStore({ memories: other });
    expect(await v.collections()).toEqual([]);
    await expect(v.scroll('memories', { limit: 2 })).rejects.toThrow(/other\.db: no table "vectors"/);
  });
});

describe('integrity on the SDK files', () => {
  it('reports the vector files on tmpfs (the SDK file is the vector path)', async () => {
    await add('Pia Kern works nights', 'pia');
    const mounts = join(tmp.dir, 'mounts');
    writeFileSync(mounts, `/dev/sda1 / ext4 rw 0 0\ntmpfs ${join(tmp.dir, 'nothing-here')} tmpfs rw 0 0\n`);
    const store = openStore(config(), 'm');
    try {
      expect((await mem0Integrity(store, { now: NOW, mountsFile: mounts })).map((f) => f.code)).not.toContain('mem0_vectors_on_tmpfs');
      writeFileSync(mounts, `/dev/sda1 / ext4 rw 0 0\ntmpfs ${tmp.dir} tmpfs rw 0 0\n`);
      const f = (await mem0Integrity(store, { now: NOW, mountsFile: mounts })).find((x) => x.code === 'mem0_vectors_on_tmpfs');
      expect(f?.ids).toEqual([s.vectorDb, s.entityVectorDb]);
    } finally {
      store.close();
    }
  });
});

describe('camelCase entity links', () => {
  it('prune rewrites linkedMemoryIds under the SDK key, deletes an entity left with none; check counts dangling ones', async () => {
    const keep = await add('Jon Berg knows Kara Lind', 'jon');
    await m.update(keep, { text: 'Jon Berg works with Kara Lind' });
    const gone = await add('Jon Berg meets Kara Lind', 'jon', { expirationDate: '2027-01-01' });
    await m.update(gone, { text: 'Jon Berg meets Kara Lind and Olaf Rye' });
    const store = openStore(config(), 'm');
    try {
      const r = await mem0Prune(store, { now: () => NOW });
      expect(r).toMatchObject({ deleted: 1, entitiesDeleted: 1 }); // Olaf Rye linked only the pruned memory
      const [entities] = await (await m.getEntityStore()).list({ user_id: 'jon' }, 100);
      for (const e of entities) {
        expect(e.payload.linkedMemoryIds).toEqual([keep]);
        expect('linked_memory_ids' in e.payload).toBe(false);
      }
      expect(entities.map((e: any) => e.payload.data)).not.toContain('Olaf Rye');
      expect((await mem0CheckReport(store, { now: NOW })).dangling).toBe(0);
      // A link left dangling (the memory's vector gone around mem0) is counted, whichever key holds it.
      await m.vectorStore.delete(keep);
      expect((await mem0CheckReport(store, { now: NOW })).dangling).toBe(entities.length);
    } finally {
      store.close();
    }
  });
});

describe('erase finds the store or refuses', () => {
  const opts = { now: () => NOW, log: silentLogger, record: false };

  it('refuses, dry run included, when vectorDb is a file of no memory; erases when it is right', async () => {
    const a = await add('Lena Voss is pregnant', 'lena');
    const elsewhere = join(tmp.dir, 'empty_store.db');
    new Database(elsewhere).exec('CREATE TABLE vectors (id TEXT PRIMARY KEY, vector BLOB NOT NULL, payload TEXT NOT NULL)');
    for (const dryRun of [true, false]) {
      await expect(erase(config({ vectorDb: elsewhere }), 'm', { user: 'lena' }, { ...opts, dryRun }))
        .rejects.toThrow(/collection "memories" holds no mem0 memory while .* records 1 memory\(ies\): nothing was erased/);
    }
    expect(readFileSync(s.historyPath).includes(Buffer.from('pregnant'))).toBe(true);
    expect((await m.get(a)).memory).toBe('Lena Voss is pregnant');
    const r = await erase(config(), 'm', { user: 'lena' }, opts);
    expect(r.memories).toBe(1);
    expect(await m.get(a)).toBeNull();
  });

  it('a store whose history holds no memory erases nothing without refusing', async () => {
    const a = await add('Mia Roth plays golf', 'mia');
    await m.delete(a);
    const r = await erase(config({ collection: 'not_there' }), 'm', { user: 'mia' }, opts);
    expect(r.memories).toBe(0);
  });
});

describe('erase against Qdrant', () => {
  let q: QdrantTestServer;
  afterEach(async () => {
    q.assertConforms();
    await q.close();
  });

  it('refuses when the configured collection exists but is empty, names the SDK default that exists', async () => {
    q = await startQdrantTestServer();
    const qs = await sdkStore('qdrant', join(tmp.dir), { url: q.url });
    const qm = await qs.open();
    const id = (await qm.add('Nils Hahn owes money', { userId: 'nils', infer: false })).results[0].id;
    await fetch(`${q.url}/collections/mem0`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ vectors: { size: 4, distance: 'Cosine' } }) });
    qs.close(qm);
    const cfg = validateConfig({ stateDb: join(tmp.dir, 'state.db'), stores: { m: { layout: 'mem0', db: qs.historyPath, qdrant: { url: q.url, collections: ['mem0'] }, mem0: { collection: 'mem0' } } } });
    await expect(erase(cfg, 'm', { subject: 'Nils Hahn' }, { now: () => NOW, log: silentLogger, record: false }))
      .rejects.toThrow(/collection "mem0" holds no mem0 memory .*mem0\.collection: memories exists/);
    const again = await qs.open();
    expect((await again.get(id)).memory).toBe('Nils Hahn owes money');
    qs.close(again);
  });
});
