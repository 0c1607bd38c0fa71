/** A local snapshot answers what its holds file would: plain and hashed look-ups against holdsContain, and what is not judged. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { sqliteHolds, type HoldsSearch } from '../../src/erase/snapshot-holds.js';
import { eraseKey } from '../../src/erase/ledger.js';
import { holdsContain, holdsStream, idMac, userMac } from '../../src/snapshot/targets/holds.js';
import { silentLogger } from '../../src/log/logger.js';
import { tempDir } from '../helpers/store.js';

/**
 * A local snapshot is asked what its holds would say: the plain look-up (this run's ids and user) and the hashed
 * one (ids earlier runs kept only as hashes) give the answer holdsContain gives over the holds file a push would
 * upload, for the warden layout (with and without user_id) and mem0's history and messages.
 */
let tmp: { dir: string; cleanup: () => void };
beforeEach(() => {
  tmp = tempDir('mw-erase-snapholds-');
});
afterEach(() => tmp.cleanup());

const SCHEMAS: Record<string, string[]> = {
  'warden, subject names the user': [
    `CREATE TABLE memory (id TEXT PRIMARY KEY, subject TEXT NOT NULL, fact TEXT NOT NULL)`,
    `INSERT INTO memory VALUES ('m1', 'carol', 'x'), ('m2', 'bob', 'y'), ('7', 'dee', 'z')`,
  ],
  'warden with a user_id column': [
    `CREATE TABLE memory (id TEXT PRIMARY KEY, subject TEXT NOT NULL, fact TEXT NOT NULL, user_id TEXT)`,
    `INSERT INTO memory VALUES ('m1', 'travel', 'x', 'carol'), ('m2', 'carol', 'y', 'bob'), ('7', 's', 'z', NULL)`,
  ],
  'mem0: history and messages': [
    `CREATE TABLE history (id TEXT PRIMARY KEY, memory_id TEXT, old_memory TEXT, new_memory TEXT)`,
    `CREATE TABLE messages (id INTEGER PRIMARY KEY, session_scope TEXT, role TEXT, content TEXT)`,
    `INSERT INTO history VALUES ('h1', 'm1', NULL, 'x'), ('h2', 'm2', 'x', NULL), ('h3', '7', NULL, 'z')`,
    `INSERT INTO messages (session_scope, role, content) VALUES ('user_id=carol&agent_id=a', 'user', 'hi'), ('agent_id=a&user_id=bob', 'user', 'yo'), ('user_id=a&b', 'user', 'amp')`,
  ],
};

function snapshotFolder(name: string, sql: string[], store = 'agent'): string {
  const dir = join(tmp.dir, 'backups', store, name);
  mkdirSync(dir, { recursive: true });
  const db = new Database(join(dir, 'store.db'));
  for (const s of sql) db.exec(s);
  db.close();
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify({
    format: 'memory-warden-snapshot/1', store, layout: 'warden', reason: 'scheduled', qdrant: [],
    sqlite: { file: 'store.db' }, files: { 'store.db': { bytes: 0, sha256: '0'.repeat(64) } },
  }));
  return dir;
}

const ASKED: { ids: string[]; user?: string }[] = [
  { ids: ['m1'] }, { ids: ['m2', 'none'] }, { ids: ['7'] }, { ids: ['M1', 'm1 '] }, { ids: [] , user: 'carol' },
  { ids: [], user: 'bob' }, { ids: [], user: 'Carol' }, { ids: ['none'], user: 'dee' }, { ids: [], user: 'a&b' }, { ids: [], user: 'a' },
  { ids: ['none'], user: 'nobody' },
];

describe('a local snapshot answers as its holds file would', () => {
  it.each(Object.keys(SCHEMAS))('%s: every question, plain and hashed, answered as holdsContain answers it', async (schema) => {
    const dir = snapshotFolder('2026-11-20T020000Z', SCHEMAS[schema]!);
    const key = eraseKey({ stateDb: join(tmp.dir, 'state.db') });
    for (const q of ASKED) {
      const wanted = { ids: new Set(q.ids.map((id) => idMac(key, id))), ...(q.user === undefined ? {} : { user: userMac(key, q.user) }) };
      const truth = await holdsContain(holdsStream(join(dir, 'store.db'), key), wanted, 'test');
      const plain: HoldsSearch = { key, store: 'agent', ids: q.ids, user: q.user, earlier: [] };
      expect(await sqliteHolds(dir, plain, silentLogger), `${JSON.stringify(q)} plain`).toBe(truth ? 'holds' : null);
      // The same ids known only by their hashes, as a later run knows them.
      const hashed: HoldsSearch = { key, store: 'agent', ids: [], earlier: [...wanted.ids] };
      if (q.user === undefined) expect(await sqliteHolds(dir, hashed, silentLogger), `${JSON.stringify(q)} hashed`).toBe(truth ? 'holds' : null);
    }
  });

  it('judges only snapshots of this store with a manifest; a copy that cannot be read cannot be ruled out', async () => {
    const key = eraseKey({ stateDb: join(tmp.dir, 'state.db') });
    const ask = (dir: string) => sqliteHolds(dir, { key, store: 'agent', ids: ['none'], earlier: [idMac(key, 'gone')] }, silentLogger);
    const other = snapshotFolder('2026-11-20T020000Z', SCHEMAS['warden, subject names the user']!, 'other');
    expect(await ask(other)).toBe(null);
    const bare = join(tmp.dir, 'backups', 'agent', 'not-a-snapshot');
    mkdirSync(bare, { recursive: true });
    expect(await ask(bare)).toBe(null);
    const broken = snapshotFolder('2026-11-21T020000Z', []);
    writeFileSync(join(broken, 'store.db'), 'not a database, whatever its manifest says');
    expect(await ask(broken)).toBe('unsure');
    const outside = snapshotFolder('2026-11-22T020000Z', SCHEMAS['warden, subject names the user']!);
    writeFileSync(join(outside, 'manifest.json'), JSON.stringify({
      format: 'memory-warden-snapshot/1', store: 'agent', qdrant: [], sqlite: { file: '../../../state.db' }, files: { 'store.db': { bytes: 0, sha256: '' } },
    }));
    expect(await ask(outside)).toBe('unsure'); // its SQLite copy is not one of its files: never read, not ruled out
  });

  it('reads a copy in WAL mode (made by another tool) without leaving a file beside it, held or not', async () => {
    const key = eraseKey({ stateDb: join(tmp.dir, 'state.db') });
    for (const [name, ids, user, want] of [
      ['2026-11-23T020000Z', ['m1'], undefined, 'holds'], ['2026-11-24T020000Z', ['none'], 'nobody', null],
      ['2026-11-25T020000Z', ['none'], undefined, null],
    ] as const) {
      const dir = snapshotFolder(name, [`PRAGMA journal_mode = WAL`, ...SCHEMAS['warden, subject names the user']!]);
      expect(readdirSync(dir).sort()).toEqual(['manifest.json', 'store.db']);
      const earlier = name.endsWith('5T020000Z') ? [idMac(key, 'm9')] : [];
      expect(await sqliteHolds(dir, { key, store: 'agent', ids, user, earlier }, silentLogger)).toBe(want);
      expect(readdirSync(dir).sort(), name).toEqual(['manifest.json', 'store.db']);
      const chunks: Buffer[] = [];
      for await (const c of holdsStream(join(dir, 'store.db'), key)) chunks.push(c);
      expect(await holdsContain((async function* () { yield* chunks; })(), { ids: new Set([idMac(key, 'm1')]) }, dir)).toBe(true);
      expect(readdirSync(dir).sort(), name).toEqual(['manifest.json', 'store.db']);
    }
  });
});
