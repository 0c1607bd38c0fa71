import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readlinkSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { holdsContain, holdsStream, holdsWatchCovers, idMac, tablesHoldsWatch, userMac, type Holds } from '../../../src/snapshot/targets/holds.js';
import { copyFieldReader, copyFieldText, copyRowReader } from '../../../src/engines/postgres/copy-text.js';
import { LAYOUTS } from '../../../src/layouts/registry.js';

const dir = mkdtempSync(join(tmpdir(), 'mw-holds-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const key = randomBytes(32);
const sorted = (xs: Iterable<string>) => [...new Set(xs)].sort();

async function holdsOf(file: string): Promise<{ json: string; gz: Buffer }> {
  const chunks: Buffer[] = [];
  for await (const c of holdsStream(file, key)) chunks.push(c);
  const gz = Buffer.concat(chunks);
  return { gz, json: gunzipSync(gz).toString('utf8') };
}

describe('holds.json.gz', () => {
  it('a warden store: every id and subject, hashed, deduplicated and sorted, across many batches', async () => {
    const file = join(dir, 'warden.db');
    const db = new Database(file);
    db.exec(`CREATE TABLE memory (id TEXT PRIMARY KEY, subject TEXT, fact TEXT)`);
    const ins = db.prepare(`INSERT INTO memory VALUES (?, ?, 'x')`);
    db.transaction(() => {
      for (let i = 0; i < 10_000; i++) ins.run(`m${i}`, i % 7 === 0 ? null : `user${i % 13}`);
    })();
    db.close();
    const before = statSync(file).mtimeMs;
    const { json, gz } = await holdsOf(file);
    const ids = sorted(Array.from({ length: 10_000 }, (_, i) => idMac(key, `m${i}`)));
    const users = sorted(Array.from({ length: 13 }, (_, u) => userMac(key, `user${u}`)));
    expect(json).toBe(JSON.stringify({ ids, users }));
    expect(JSON.parse(gunzipSync(gz).toString('utf8')) as Holds).toEqual({ ids, users });
    expect(statSync(file).mtimeMs).toBe(before); // read-only
  });

  it('a mem0 store: memory ids and history ids together, user_id, users of message scopes; no nulls', async () => {
    const file = join(dir, 'mem0.db');
    const db = new Database(file);
    db.exec(`CREATE TABLE memory (id TEXT, user_id TEXT);
      CREATE TABLE history (memory_id TEXT);
      CREATE TABLE messages (session_scope TEXT);
      INSERT INTO memory VALUES ('a', 'ada'), ('b', NULL), (7, 'bob');
      INSERT INTO history VALUES ('a'), ('gone'), ('gone'), (NULL);
      INSERT INTO messages VALUES ('user_id=cy&agent_id=x'), ('agent_id=y'), (NULL), ('user_id=ada')`);
    db.close();
    const { json } = await holdsOf(file);
    expect(json).toBe(JSON.stringify({
      ids: sorted(['a', 'b', '7', 'gone'].map((v) => idMac(key, v))),
      users: sorted(['ada', 'bob', 'cy'].map((v) => userMac(key, v))),
    }));
  });

  it('an empty store holds nothing; a reader that stops early leaves no handle on the file', async () => {
    const file = join(dir, 'empty.db');
    new Database(file).exec(`CREATE TABLE other (x)`).close();
    expect((await holdsOf(file)).json).toBe('{"ids":[],"users":[]}');
    const big = join(dir, 'early.db');
    const db = new Database(big);
    db.exec(`CREATE TABLE memory (id TEXT, subject TEXT)`);
    const ins = db.prepare(`INSERT INTO memory VALUES (?, 'u')`);
    db.transaction(() => { for (let i = 0; i < 200_000; i++) ins.run(`m${i}`); })();
    db.close();
    const open = () => readdirSync('/proc/self/fd').filter((fd) => { try { return readlinkSync(`/proc/self/fd/${fd}`) === big; } catch { return false; } }).length;
    const it = holdsStream(big, key)[Symbol.asyncIterator]();
    await it.next();
    expect(open()).toBe(1);
    await it.return!();
    expect(open()).toBe(0);
  });

  it('ids of any shape hash as idMac does: long, non-ASCII, empty, numbers', async () => {
    const file = join(dir, 'shapes.db');
    const db = new Database(file);
    db.exec(`CREATE TABLE memory (id, subject TEXT)`);
    const odd = ['', 'é', 'Zoë 🐝', 'x'.repeat(1000), `${'ü'.repeat(300)}-end`, 'id:nested', 42, 3.5];
    const ins = db.prepare(`INSERT INTO memory VALUES (?, 's')`);
    for (const v of odd) ins.run(v);
    db.close();
    const { json } = await holdsOf(file);
    expect((JSON.parse(json) as Holds).ids).toEqual(sorted(odd.map((v) => idMac(key, String(v)))));
  });

  it('more ids than one sorted run holds: runs spilled and merged give the same file, repeats across runs dropped, no temp file left', async () => {
    const file = join(dir, 'spill.db');
    const db = new Database(file);
    db.exec(`CREATE TABLE memory (id TEXT PRIMARY KEY, user_id TEXT); CREATE TABLE history (memory_id TEXT)`);
    const mem = db.prepare(`INSERT INTO memory VALUES (?, ?)`);
    const hist = db.prepare(`INSERT INTO history VALUES (?)`);
    db.transaction(() => {
      for (let i = 0; i < 5_000; i++) mem.run(`m${i}`, `u${i % 3}`);
      for (let i = 0; i < 5_000; i += 2) hist.run(`m${(i * 7) % 5_000}`); // every one also in memory, in another run
      for (let i = 0; i < 300; i++) hist.run(`gone${i % 100}`);
    })();
    db.close();
    const temps = () => readdirSync(tmpdir()).filter((n) => n.startsWith('mw-holds-')).length;
    const before = temps();
    const whole = (await holdsOf(file)).json;
    const chunks: Buffer[] = [];
    for await (const c of holdsStream(file, key, 777)) chunks.push(c);
    expect(gunzipSync(Buffer.concat(chunks)).toString('utf8')).toBe(whole);
    const want = sorted([...Array.from({ length: 5_000 }, (_, i) => `m${i}`), ...Array.from({ length: 100 }, (_, i) => `gone${i}`)].map((v) => idMac(key, v)));
    expect((JSON.parse(whole) as Holds).ids).toEqual(want);
    expect(temps()).toBe(before);
  });
});

describe('tablesHoldsWatch: the holds of a database\'s rows as a snapshot reads them', () => {
  /** COPY text of rows (id, user_id, subject): escapes, non-ASCII, NULLs, one person's rows together and apart. */
  function copyText(): { text: Buffer; ids: string[]; users: string[]; subjects: string[] } {
    const esc = (v: string | null) => (v === null ? '\\N' : v.replace(/\\/g, '\\\\').replace(/\t/g, '\\t').replace(/\n/g, '\\n').replace(/\r/g, '\\r'));
    const rows: [string | null, string | null, string | null][] = [];
    for (let i = 0; i < 3000; i++) rows.push([`m-${i}`, i % 10 < 6 ? 'alice' : `u${i % 7}`, 'subj']);
    rows.push(['tab\there', 'Zoë 🐝', 'back\\slash'], ['nl\nid', null, null], [null, 'bob', 'bob'], ['', '', ''], ['ü✓', 'u\tx', 'ü'], ['\\N', '\\N', 's'], ['x'.repeat(70_000), 'big', 'b']);
    const text = Buffer.from(rows.map((r) => `${esc(r[0])}\tfact\t${esc(r[2])}\t${esc(r[1])}\n`).join(''), 'utf8');
    const defined = (xs: (string | null)[]) => xs.filter((x): x is string => x !== null);
    return { text, ids: defined(rows.map((r) => r[0])), users: defined(rows.map((r) => r[1])), subjects: defined(rows.map((r) => r[2])) };
  }

  async function holdsFrom(make: (w: ReturnType<typeof tablesHoldsWatch>) => { push(p: Buffer): void; end(): void }, text: Buffer, size: number, runSize?: number): Promise<string> {
    const w = tablesHoldsWatch(key, runSize);
    try {
      const reader = make(w);
      for (let at = 0; at < text.length; at += size) reader.push(text.subarray(at, at + size));
      reader.end();
      const chunks: Buffer[] = [];
      for await (const c of w.holds()) chunks.push(c);
      return gunzipSync(Buffer.concat(chunks)).toString('utf8');
    } finally {
      w.close();
    }
  }

  it('from the rows\' bytes (no string made of a plain id) the same holds as from their values: every id and user, escapes and non-ASCII included, in memory or spilled', async () => {
    const { text, ids, users } = copyText();
    const at = [0, 3, 2]; // id, user_id, subject among the row's fields
    const byValues = await holdsFrom((w) => copyRowReader(at, w.watch.row), text, 65_536);
    expect(JSON.parse(byValues) as Holds).toEqual({ ids: sorted(ids.map((v) => idMac(key, v))), users: sorted(users.map((u) => userMac(key, u))) });
    for (const [size, runSize] of [[65_536, undefined], [7, undefined], [1000, 500]] as const) {
      const byBytes = await holdsFrom((w) => copyFieldReader(at, (buf, from, to) => w.watch.fields!(buf, from, to, copyFieldText)), text, size, runSize);
      expect(byBytes, `pieces of ${size} bytes, runs of ${runSize ?? 'all'}`).toBe(byValues);
    }
  });
});

describe('holdsContain: erase asks a holds file, streamed, whether it names an erased id or user', () => {
  /** The bytes in pieces of `size`, as a target's download hands them over. */
  async function* pieces(b: Buffer, size: number): AsyncIterable<Uint8Array> {
    for (let i = 0; i < b.length; i += size) yield b.subarray(i, i + size);
  }
  const ids = Array.from({ length: 3_000 }, (_, i) => idMac(key, `m${i}`)).sort();
  const users = ['ana', 'bo', 'cy'].map((u) => userMac(key, u)).sort();
  const gz = gzipSync(JSON.stringify({ ids, users }));

  it('finds an id or user wherever it falls, whatever the pieces; the other list does not count', async () => {
    for (const size of [5, 17, 18, 19, 4096, gz.length]) {
      const ask = (want: { ids: ReadonlySet<string>; user?: string }) => holdsContain(pieces(gz, size), want, 'holds');
      for (const i of [0, 1, 1_499, ids.length - 1]) expect(await ask({ ids: new Set([idMac(key, 'nobody'), ids[i]!]) })).toBe(true);
      for (const u of users) expect(await ask({ ids: new Set(), user: u })).toBe(true);
      expect(await ask({ ids: new Set([idMac(key, 'nobody')]), user: userMac(key, 'dee') })).toBe(false);
      // A user's hash among the ids (or an id's among the users) is not a match: each list is asked its own question.
      expect(await ask({ ids: new Set(users), user: ids[5] })).toBe(false);
    }
  });

  it('an empty holds file answers no; a truncated, foreign or corrupt one is an error naming it', async () => {
    expect(await holdsContain(pieces(gzipSync('{"ids":[],"users":[]}'), 3), { ids: new Set(ids) }, 'empty')).toBe(false);
    const json = JSON.stringify({ ids, users });
    const bad: [string, Buffer][] = [
      ['truncated', gzipSync(json.slice(0, json.length - 40))],
      ['cut inside the ids', gzipSync(json.slice(0, 5_000))],
      ['foreign', gzipSync('{"users":[],"ids":[]}')],
      ['not gzip', Buffer.from(json)],
      ['nothing', Buffer.alloc(0)],
      ['gzip cut short', gz.subarray(0, gz.length - 10)],
    ];
    for (const [name, b] of bad) {
      await expect(holdsContain(pieces(b, 100), { ids: new Set([idMac(key, 'nobody')]) }, `t:${name}`), name).rejects.toThrow(new RegExp(`t:${name}: unreadable holds.json.gz`));
    }
  });
});

describe('holds.json.gz: the ids read a page at a time', () => {
  it('every id of a store of many pages, in a primary key or a binary index; a case-blind index is not paged', async () => {
    // Ids equal but for case in pairs, one id before them: a page of an even size ends inside a pair.
    const ids = ['', ...Array.from({ length: 20_000 }, (_, i) => [`m${i}`, `M${i}`]).flat(), 'Ä', 'ä', 'z'.repeat(300)];
    for (const [name, schema] of [
      ['pk', `CREATE TABLE memory (id TEXT PRIMARY KEY, subject TEXT)`],
      ['nocase', `CREATE TABLE memory (id TEXT, subject TEXT); CREATE UNIQUE INDEX memory_id ON memory (id COLLATE NOCASE, subject)`],
      ['nocase-column', `CREATE TABLE memory (id TEXT COLLATE NOCASE, subject TEXT); CREATE INDEX memory_id ON memory (id)`],
    ] as const) {
      const file = join(dir, `pages-${name}.db`);
      const db = new Database(file);
      db.exec(schema);
      const ins = db.prepare(`INSERT INTO memory VALUES (?, ?)`);
      db.transaction(() => {
        for (const [i, id] of ids.entries()) {
          ins.run(id, `user${i % 3}`);
        }
        if (name === 'nocase') ins.run(null, 'user0');
      })();
      db.close();
      const { json } = await holdsOf(file);
      expect((JSON.parse(json) as Holds).ids, name).toEqual(sorted(ids.map((v) => idMac(key, v))));
    }
  });
});

describe('holds made from the rows as a snapshot streams them', () => {
  it('only for a layout whose copies name ids and people where the stream reads them (else from the artifact, every layout name)', () => {
    expect(holdsWatchCovers(LAYOUTS.warden.copyNames)).toBe(true);
    expect(holdsWatchCovers(LAYOUTS.mastra.copyNames)).toBe(false);
    expect(holdsWatchCovers(LAYOUTS.mem0.copyNames)).toBe(false);
    expect(holdsWatchCovers([...LAYOUTS.warden.copyNames, { table: 'memory_vectors', ids: [{ column: 'id' }] }])).toBe(false);
  });
});
