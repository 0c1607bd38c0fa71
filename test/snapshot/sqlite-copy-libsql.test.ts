// A libsql store is copied while this process holds its own libsql connection to it (the worker, a test, a
// layout's job): the copy must not take the WAL away from under that connection. Two SQLite libraries in one process
// do not see each other's locks, so a copying connection of the other library, on close, believes it is the last
// one, checkpoints and deletes the WAL and its -shm while the libsql connection keeps writing to them.
import { afterEach, describe, expect, it } from 'vitest';
import { createRequire } from 'node:module';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { copySqlite } from '../../src/snapshot/sqlite-copy.js';
import { tempDir } from '../helpers/store.js';

type Conn = { exec(sql: string): void; prepare(sql: string): { run(...a: unknown[]): unknown; get(...a: unknown[]): Record<string, unknown> }; pragma(s: string): unknown; close(): void };
const Libsql = createRequire(import.meta.url)('libsql') as new (p: string, o?: object) => Conn;

describe('copying a libsql store this process has open', () => {
  let dir: string;
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('leaves the open connection its WAL: every write before, during and after the copy is in the store and the copy is whole', async () => {
    dir = tempDir().dir;
    const file = join(dir, 'mastra.db');
    const live = new Libsql(file);
    live.pragma('journal_mode = WAL');
    live.exec('CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)');
    const insert = live.prepare('INSERT INTO notes (body) VALUES (?)');
    for (let i = 0; i < 200; i++) insert.run(`before ${i} ${'x'.repeat(200)}`);
    expect(existsSync(`${file}-wal`)).toBe(true);

    for (let round = 0; round < 3; round++) {
      const copy = await copySqlite(file, join(dir, `copy-${round}.db`), 5000, 'libsql');
      expect(copy.integrity).toBe('ok');
      expect(copy.tables.notes).toBe(200 + round * 100);
      // The live connection goes on writing after the copy closed its own.
      for (let i = 0; i < 100; i++) insert.run(`after ${round} ${i} ${'y'.repeat(200)}`);
      expect(existsSync(`${file}-wal`), 'the WAL of the live connection is still there').toBe(true);
    }
    live.close();

    const reopened = new Libsql(file);
    try {
      expect((reopened.pragma('integrity_check') as { integrity_check: string }[]).map((r) => r.integrity_check)).toEqual(['ok']);
      expect(reopened.prepare('SELECT count(*) AS n FROM notes').get().n).toBe(500);
    } finally {
      reopened.close();
    }
  });
});
