import { afterAll, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { makeStore, tempDir, type Row } from '../helpers/store.js';
import { newRows, sqliteOrder } from '../../src/layouts/warden/new-rows.js';
import { openStore } from '../../src/layouts/open.js';
import { loadConfig } from '../../src/config/config.js';
import { toCanonical } from '../../src/time/instants.js';

const { dir, cleanup } = tempDir('mw-new-rows-');
afterAll(cleanup);
const NOW = Date.parse('2026-12-01T00:00:00Z');
const DAY = 86_400_000;

describe('the digest\'s new rows on SQLite: the newest chosen without SQLite sorting the day', () => {
  it('keeps exactly what ORDER BY julianday(created_at) DESC, id DESC keeps, whatever order the rows were written in', () => {
    // Rows written out of time order, many sharing a second (ties broken by id, in SQLite's byte order: U+E000
    // sorts before an emoji in UTF-8 and after it in UTF-16), some in other spellings of an instant, some old.
    let seed = 11;
    const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
    const odd = ['\ue000', '\u{1F600}', 'é', 'e', 'E', 'x'.repeat(50), '0', '10', '9'];
    const rows: Row[] = [];
    for (let i = 0; i < 3000; i++) {
      const t = NOW - Math.floor(rand() * 30) * 60_000 - (i % 3 === 0 ? 0 : Math.floor(rand() * 40) * 1000);
      const at = i % 11 === 0 ? new Date(t).toISOString() : i % 13 === 0 ? toCanonical(t).replace(' ', 'T') + '+00:00' : toCanonical(t);
      const id = i < odd.length ? odd[i]! : `r${Math.floor(rand() * 1e9)}-${i}`;
      rows.push({ id, created_at: i % 17 === 0 ? toCanonical(NOW - 5 * DAY) : at, fact: `fact ${i}` });
    }
    for (const [i, id] of odd.entries()) rows.push({ id: `${id}-twin`, created_at: rows[i]!.created_at!, fact: `fact ${i}` });
    // The newest second of the day, shared: the first rows kept are told apart by their ids alone.
    for (const [i, id] of ['\ue000', '\u{1F600}', 'z', 'Z'].entries()) rows.push({ id: `tie-${id}`, created_at: toCanonical(NOW - 1000), fact: `fact ${i * 4 + 1}` });
    const path = makeStore(join(dir, 'store.db'), rows);
    const flag = (row: { fact: unknown }) => (Number(String(row.fact).replace(/\D/g, '')) % 4 === 0 ? ['every fourth'] : []);
    const check = new Database(path, { readonly: true });
    check.function('warden_epoch', (v: unknown) => Date.parse(String(v)));
    const inOrder = check.prepare(`SELECT id, fact FROM memory WHERE julianday(created_at) >= julianday(?) AND julianday(created_at) < julianday(?)
      ORDER BY julianday(created_at) DESC, id DESC`).all(new Date(NOW - DAY).toISOString(), new Date(NOW).toISOString()) as { id: string; fact: string }[];
    check.close();
    const flagged = inOrder.filter((r) => flag(r).length > 0).map((r) => r.id);
    const rest = inOrder.filter((r) => flag(r).length === 0).map((r) => r.id);
    expect(inOrder.length).toBeGreaterThan(2500);
    const config = loadConfig({ overrides: { stateDb: join(dir, 'state.db'), stores: { t: { db: path } } } });
    // Read newest rowid first off the table, or in created_at order off an index on it (no sort either way).
    for (const index of [false, true]) {
      if (index) {
        const db = new Database(path);
        db.exec('CREATE INDEX memory_created ON memory(created_at)');
        db.close();
      }
      const store = openStore(config, 't', { readonly: true });
      try {
        for (const max of [0, 1, 2, 7, 200, 700, 5000]) {
          const got = newRows(store.db, { start: NOW - DAY, end: NOW }, max, flag);
          expect(got.total).toBe(inOrder.length);
          expect(got.flagged).toBe(flagged.length);
          expect(got.shown.map((r) => r.id), `maxRows ${max}, index ${index}`).toEqual([...flagged.slice(0, max), ...rest.slice(0, max)].slice(0, max));
          expect(got.more).toBe(inOrder.length - Math.min(max, inOrder.length));
        }
      } finally {
        store.close();
      }
    }
  });

  it('orders values as SQLite does: null, numbers, text by UTF-8 bytes, blobs', () => {
    const values: unknown[] = [Buffer.from([1]), '\u{1F600}', '\ue000', 'b', 'a', '', 2.5, 2, -1, null];
    const db = new Database(':memory:');
    const want = db.prepare(`SELECT v FROM (${values.map(() => 'SELECT ? AS v').join(' UNION ALL ')}) ORDER BY v`).pluck().all(...values);
    db.close();
    expect([...values].sort(sqliteOrder)).toEqual(want);
  });
});
