import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import pg from 'pg';
import { createTestDatabase, startPgvectorServer } from '../helpers/pg.js';
import { needlePatterns, uncompressedStorageSql, vacuumTouched, verifyBytesGone, type ByteVerdict, type ReadVia } from '../../src/engines/postgres/bytes.js';

// Erase's byte guarantee on PostgreSQL (src/engines/postgres/bytes.ts), on the native server (PostgreSQL 15) and on
// PGlite (PostgreSQL 18): what DELETE, plain VACUUM and VACUUM FULL leave in the relation files, read back.
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function native(): Promise<pg.Client> {
  const db = await createTestDatabase('pgbytes');
  cleanups.push(() => db.drop());
  return db.client;
}

async function pglite(): Promise<pg.Client> {
  const server = await startPgvectorServer();
  cleanups.push(() => server.stop());
  const c = new pg.Client({ connectionString: server.url });
  await c.connect();
  cleanups.push(() => c.end());
  return c;
}

/**
 * VACUUM FULL keeps a deleted row that a snapshot older than its delete may still see, anywhere in the database
 * (autovacuum's ANALYZE of the table just filled, on a busy machine): the product's erase rewrites again while that
 * lasts (scrub.ts); these tests of one rewrite first wait until no other backend of the database holds such a snapshot.
 */
async function noOlderSnapshots(c: pg.ClientBase): Promise<void> {
  for (const until = Date.now() + 60_000; Date.now() < until; await new Promise((r) => setTimeout(r, 50))) {
    const { rows } = await c.query(`SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)`);
    if (rows.length === 0) return;
  }
}

const kinds = (v: ByteVerdict) => [...new Set(v.found.map((f) => f.kind))].sort();

/** A person's row written last (the newest tuple of its page), then deleted; the texts they are known by. */
async function plantAndDelete(c: pg.ClientBase, storage: 'external' | 'default', fact?: string): Promise<string[]> {
  const who = `Zelda Quistorp-${randomBytes(4).toString('hex')}`;
  const where = fact ?? `lives at ${randomBytes(6).toString('hex')} Lane`;
  await c.query(`CREATE SCHEMA s`);
  await c.query(`CREATE TABLE s.memory (id int PRIMARY KEY, subject text NOT NULL, fact text NOT NULL)`);
  if (storage === 'external') for (const sql of uncompressedStorageSql('s', 'memory', ['subject', 'fact'])) await c.query(sql);
  await c.query(`CREATE INDEX memory_subject ON s.memory (subject)`);
  await c.query(`INSERT INTO s.memory SELECT g, 'someone ' || g, 'filler fact ' || g FROM generate_series(1, 400) g`);
  await c.query(`INSERT INTO s.memory VALUES (401, $1, $2)`, [who, where]);
  await c.query(`DELETE FROM s.memory WHERE subject = $1`, [who]);
  return [who, where];
}

async function erasePath(c: pg.ClientBase, via: ReadVia) {
  const needles = await plantAndDelete(c, 'external');
  const check = () => verifyBytesGone(c, { schema: 's', tables: ['memory'], needles, via });
  const deleted = await check();
  await vacuumTouched(c, 's', ['memory'], 'plain');
  const plain = await check();
  await noOlderSnapshots(c);
  await vacuumTouched(c, 's', ['memory'], 'full');
  const full = await check();
  return { deleted, plain, full };
}

describe('bytes left by an erase in PostgreSQL relation files', () => {
  it.each(['server-file', 'pageinspect'] as const)('native PostgreSQL 15, read by %s: the deleted row is found after DELETE and plain VACUUM, gone after VACUUM FULL', async (via) => {
    const c = await native();
    if (via === 'pageinspect') await c.query('CREATE EXTENSION pageinspect');
    const { deleted, plain, full } = await erasePath(c, via);
    expect(deleted.verdict).toBe('found');
    expect(kinds(deleted)).toEqual(['heap', 'index']);
    expect(deleted.found.map((f) => f.needle).sort()).toEqual([0, 0, 1]); // the name in heap and index, the fact in heap
    expect(plain.verdict).toBe('found'); // compaction does not zero the space it frees
    expect(full.verdict).toBe('clean');
    expect(full.found).toEqual([]);
    expect(full.read.map((r) => [r.kind, r.via])).toEqual([['heap', via], ['toast', via], ['toast-index', via], ['index', via], ['index', via]]);
    expect(full.read.find((r) => r.kind === 'heap')!.bytes).toBeGreaterThan(0);
    const unseen = full.unseen.map((u) => u.what);
    expect(unseen).toEqual(expect.arrayContaining(['wal', 'dumps-and-backups', 'replication', 'freed-disk-blocks']));
    expect(full.unseen.find((u) => u.what === 'wal')!.facts!.segment).toMatch(/^[0-9A-F]{24}$/);
    expect(JSON.stringify(full)).not.toContain('Zelda'); // the verdict never carries a needle
  });

  it('native: a row in a later piece of a file of several pieces is found among 300,000 needles, and gone after VACUUM FULL', async () => {
    const c = await native();
    const who = `Zelda Quistorp-${randomBytes(4).toString('hex')}`;
    const where = `lives at ${randomBytes(6).toString('hex')} Lane`;
    await c.query(`CREATE SCHEMA s`);
    await c.query(`CREATE TABLE s.memory (id int PRIMARY KEY, subject text NOT NULL, fact text NOT NULL)`);
    for (const sql of uncompressedStorageSql('s', 'memory', ['subject', 'fact'])) await c.query(sql);
    await c.query(`CREATE INDEX memory_subject ON s.memory (subject)`);
    // About 3 MB of heap: the file is read in pieces of 128 blocks (1 MB), the person's row in the last of them.
    await c.query(`INSERT INTO s.memory SELECT g, 'someone ' || g, repeat('filler fact ' || g || ' ', 8) FROM generate_series(1, 20000) g`);
    await c.query(`INSERT INTO s.memory VALUES (20001, $1, $2)`, [who, where]);
    await c.query(`DELETE FROM s.memory WHERE subject = $1`, [who]);
    // An erase of 100,000 rows looks for 300,000 texts (each fact, source and id).
    const needles = [who, where, ...Array.from({ length: 300_000 }, (_, i) => `absent text ${String(i).padStart(7, '0')}`)];
    const deleted = await verifyBytesGone(c, { schema: 's', tables: ['memory'], needles });
    expect(deleted.verdict).toBe('found');
    expect(deleted.found.map((f) => f.needle).sort()).toEqual([0, 0, 1]);
    expect(deleted.found.find((f) => f.kind === 'heap' && f.needle === 1)!.offset).toBeGreaterThan(2 * 1024 * 1024);
    expect(deleted.read.find((r) => r.kind === 'heap')!.bytes).toBeGreaterThan(2 * 1024 * 1024);
    await noOlderSnapshots(c);
    await vacuumTouched(c, 's', ['memory'], 'full');
    const full = await verifyBytesGone(c, { schema: 's', tables: ['memory'], needles });
    expect(full.verdict).toBe('clean');
  });

  it('PGlite (PostgreSQL 18), read by pg_read_binary_file: the same three states', async () => {
    const c = await pglite();
    const { deleted, plain, full } = await erasePath(c, 'server-file');
    expect(deleted.verdict).toBe('found');
    expect(kinds(deleted)).toEqual(['heap', 'index']);
    expect(plain.verdict).toBe('found');
    expect(full.verdict).toBe('clean');
    expect(full.read.length).toBeGreaterThanOrEqual(4);
  });

  it('PGlite has no pageinspect: asked for it, every relation is reported unread and nothing is called clean', async () => {
    const c = await pglite();
    const needles = await plantAndDelete(c, 'external');
    const v = await verifyBytesGone(c, { schema: 's', tables: ['memory'], needles, via: 'pageinspect' });
    expect(v.verdict).toBe('unverified');
    expect(v.read).toEqual([]);
    expect(v.unseen.filter((u) => u.what === 'unreadable-relation').length).toBeGreaterThanOrEqual(4);
  });

  it('a long text: compressed it matches nothing and the verdict says unverified; stored EXTERNAL it is found in TOAST, and gone after VACUUM FULL', async () => {
    // Compressible (repeated), and longer than a TOAST chunk, with a distinct stretch in the middle.
    const long = `${'the same sentence again. '.repeat(200)}${randomBytes(300).toString('hex')}${'and more of it. '.repeat(200)}`;
    const c = await native();
    const [, fact] = await plantAndDelete(c, 'default', long);
    const compressed = await verifyBytesGone(c, { schema: 's', tables: ['memory'], needles: [fact!] });
    expect(compressed.found.filter((f) => f.kind === 'toast' || f.kind === 'heap')).toEqual([]); // pglz hid it
    expect(compressed.verdict).toBe('unverified');
    expect(compressed.unseen.filter((u) => u.what === 'compressed-column').map((u) => u.facts!.column)).toEqual(expect.arrayContaining(['subject', 'fact']));

    const c2 = await native();
    const [, fact2] = await plantAndDelete(c2, 'external', long);
    const before = await verifyBytesGone(c2, { schema: 's', tables: ['memory'], needles: [fact2!] });
    expect(before.verdict).toBe('found');
    expect(kinds(before)).toContain('toast');
    await noOlderSnapshots(c2);
    await vacuumTouched(c2, 's', ['memory']);
    const after = await verifyBytesGone(c2, { schema: 's', tables: ['memory'], needles: [fact2!] });
    expect(after.verdict).toBe('clean');
    expect(after.unseen.map((u) => u.what)).toContain('short-remnants');
  });

  it('long needles are looked for in overlapping pieces that a TOAST chunk always holds whole', () => {
    const p = needlePatterns(['short', 'y'.repeat(1000)]);
    expect(p[0]!.bytes.toString()).toBe('short');
    expect(p.filter((x) => x.needle === 1).every((x) => x.bytes.length === 128)).toBe(true);
    expect(p.filter((x) => x.needle === 1)).toHaveLength(8);
  });
});
