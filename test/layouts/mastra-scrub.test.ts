import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from '../helpers/store.js';
import { openLibsql } from '../../src/store/libsql.js';
import { scrubPages, truncateWal } from '../../src/layouts/mastra/scrub.js';
import type { LibDb } from '../../src/layouts/mastra/files.js';

/**
 * The page scrub erase runs on a Mastra file (src/layouts/mastra/scrub.ts) zeroes every byte no live row, index entry
 * or structure uses, and changes nothing else. Files churned the way an agent churns them, with secure_delete off:
 * inserts, replaces, deletes and updates of short and long rows (overflow chains), in a rowid table with an index on
 * an expression, a WITHOUT ROWID table and a LibSQLVector table with its DiskANN index; each text written with a mark
 * that the live rows no longer carry. After the scrub: not one mark in the file, every row, index node and vector
 * the same, integrity_check ok, no page it could not place.
 */
let tmp: ReturnType<typeof tempDir>;
beforeEach(() => (tmp = tempDir('mw-mastra-scrub-')));
afterEach(() => tmp.cleanup());

type Conn = LibDb & ReturnType<typeof openLibsql>;

function churn(file: string, pageSize: number, seed: number): Conn {
  const db = openLibsql(file, { fileMustExist: false }) as unknown as Conn;
  db.pragma(`page_size = ${pageSize}`);
  db.pragma('journal_mode = WAL');
  db.exec(`CREATE TABLE t (id TEXT PRIMARY KEY, body TEXT, meta BLOB)`);
  db.exec(`CREATE INDEX t_body ON t (substr(body, 1, 300))`);
  db.exec(`CREATE TABLE v (id SERIAL PRIMARY KEY, vector_id TEXT UNIQUE NOT NULL, embedding F32_BLOB(4), metadata TEXT)`);
  db.exec(`CREATE INDEX v_idx ON v (libsql_vector_idx(embedding))`);
  db.exec(`CREATE TABLE w (k TEXT PRIMARY KEY, val TEXT) WITHOUT ROWID`);
  let x = seed;
  const rnd = (n: number) => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return x % n;
  };
  const text = (tag: string, n: number) => `${tag}:${'abcdefghij'.repeat(Math.ceil(n / 10)).slice(0, n)}`;
  for (let step = 0; step < 1200; step++) {
    const id = `id${rnd(300)}`;
    const size = [5, 50, 500, 3000, 9000, 70000][rnd(6)]!;
    const op = rnd(10);
    if (op < 5) db.prepare(`INSERT OR REPLACE INTO t VALUES (?, ?, randomblob(?))`).run(id, text(`GONE${id}x${step}`, size), rnd(40));
    else if (op < 7) db.prepare(`DELETE FROM t WHERE id = ?`).run(id);
    else if (op < 8) db.prepare(`INSERT OR REPLACE INTO w VALUES (?, ?)`).run(text(`GONEk${id}`, rnd(3) ? 20 : 1500), text(`GONEw${step}`, size));
    else if (op < 9) db.prepare(`INSERT OR REPLACE INTO v (vector_id, embedding, metadata) VALUES (?, vector32(?), ?)`).run(id, JSON.stringify([rnd(9), rnd(9), rnd(9), 1]), text(`GONEv${step}`, size));
    else db.prepare(`DELETE FROM v WHERE vector_id = ?`).run(id);
    if (rnd(20) === 0) db.prepare(`DELETE FROM w WHERE k IN (SELECT k FROM w LIMIT 3)`).run();
  }
  // What stays is rewritten without the mark: every mark left in the file is in space nothing uses.
  db.exec(`UPDATE t SET body = replace(body, 'GONE', 'KEPT')`);
  db.exec(`UPDATE v SET metadata = replace(metadata, 'GONE', 'KEPT')`);
  db.exec(`UPDATE w SET val = replace(val, 'GONE', 'KEPT')`);
  db.exec(`DELETE FROM w WHERE instr(k, 'GONE') > 0`);
  return db;
}

const everything = (db: Conn) => JSON.stringify([
  db.prepare('SELECT id, body, hex(meta) AS meta FROM t ORDER BY id').all(),
  db.prepare('SELECT id, vector_id, hex(embedding) AS e, metadata FROM v ORDER BY rowid').all(),
  db.prepare('SELECT k, val FROM w ORDER BY k').all(),
  db.prepare('SELECT index_key, hex(data) AS d FROM v_idx_shadow ORDER BY index_key').all(),
  db.prepare('SELECT name, hex(metadata) AS m FROM libsql_vector_meta_shadow').all(),
  db.prepare(`SELECT id FROM v ORDER BY vector_distance_cos(embedding, vector32('[1,1,1,1]')), rowid LIMIT 5`).all(),
]);

const marks = (file: string) => {
  const b = readFileSync(file);
  let n = 0;
  for (let at = b.indexOf('GONE'); at >= 0; at = b.indexOf('GONE', at + 1)) n++;
  return n;
};

describe('the page scrub', () => {
  it.each([[1024, 1], [4096, 2], [4096, 3], [65536, 4]])('pages of %i bytes (run %i): no mark left, nothing live changed', (pageSize, seed) => {
    const file = join(tmp.dir, 'churned.db');
    const db = churn(file, pageSize, seed);
    try {
      expect(db.pragma('page_size')).toMatchObject([{ page_size: pageSize }]);
      const before = everything(db);
      expect(truncateWal(db)).toBe(true);
      expect(marks(file)).toBeGreaterThan(10);
      db.pragma('secure_delete = ON');
      const scrubbed = scrubPages(db, file);
      expect(truncateWal(db)).toBe(true);
      expect(marks(file)).toBe(0);
      expect(scrubbed).toMatchObject({ unplaced: 0 });
      expect(scrubbed.zeroed).toBeGreaterThan(0);
      expect(db.pragma('integrity_check')).toEqual([{ integrity_check: 'ok' }]);
      expect(everything(db)).toBe(before);
      // A second scrub finds nothing left to zero.
      expect(scrubPages(db, file)).toMatchObject({ zeroed: 0, unplaced: 0 });
    } finally {
      db.close();
    }
  });

  it('a damaged page: the scrub changes nothing and fails, naming the file', () => {
    const file = join(tmp.dir, 'damaged.db');
    const db = churn(file, 4096, 5);
    try {
      truncateWal(db);
      // A leaf of t whose fragment count says one byte more than there is.
      const page = (db.prepare(`SELECT pageno FROM dbstat WHERE name = 't' AND pagetype = 'leaf' LIMIT 1`).get() as { pageno: number }).pageno;
      const data = Buffer.from((db.prepare('SELECT data FROM sqlite_dbpage WHERE pgno = ?').get(page) as { data: Buffer }).data);
      data[7] = data[7]! + 1;
      db.exec(`UPDATE sqlite_dbpage SET data = x'${data.toString('hex')}' WHERE pgno = ${page}`);
      truncateWal(db);
      const before = readFileSync(file);
      expect(() => scrubPages(db, file)).toThrow(/damaged\.db: quick_check after zeroing unused space: .*nothing was changed/);
      truncateWal(db);
      expect(readFileSync(file).equals(before)).toBe(true);
    } finally {
      db.close();
    }
  });
});
