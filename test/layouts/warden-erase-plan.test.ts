import { afterAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { makeStore, tempDir, ids as rowIds, type Row } from '../helpers/store.js';
import { validateConfig } from '../../src/config/config.js';
import { openStore } from '../../src/layouts/open.js';
import { layoutOf } from '../../src/layouts/registry.js';
import { silentLogger } from '../../src/log/logger.js';

const { dir, cleanup } = tempDir('mw-erase-plan-');
afterAll(cleanup);
const opts = { now: () => Date.UTC(2026, 11, 1), log: silentLogger };

describe("the warden erase's plan: the rows the deletes will take, before any is deleted", () => {
  it('names exactly the rows the deletes take with their cascade: chains several versions deep, a chain from one selected row to another, a loop, more rows than one batch asks about', async () => {
    const rows: Row[] = [];
    // More of the person's rows than one batch of ids (4,096), so that versions of the last ones are found in a later batch.
    for (let i = 0; i < 4200; i++) rows.push({ id: `a${i}`, subject: 'alice', source: i % 2 ? 'message:1' : `file:alice-${i}.md` });
    // Older versions of a4199, four deep, under other subjects and sources: the cascade takes them all.
    for (let d = 1; d <= 4; d++) rows.push({ id: `v${d}`, subject: `old-${d}`, source: `tool:v${d}`, superseded_by: d === 1 ? 'a4199' : `v${d - 1}` });
    // A selected row that is an older version of another selected row: taken once.
    rows.push({ id: 'a-old', subject: 'alice', superseded_by: 'a7' });
    // A loop through a selected row: a9 superseded by l1, l1 by a9.
    rows.push({ id: 'l1', subject: 'loop', source: 'tool:loop', superseded_by: 'a9' });
    // Someone else's rows, one an older version of nobody selected: they stay.
    rows.push({ id: 'b1', subject: 'bob' }, { id: 'b0', subject: 'bob', superseded_by: 'b1' });
    const db = makeStore(join(dir, 'store.db'), rows);
    const { default: Database } = await import('better-sqlite3');
    const raw = new Database(db);
    raw.pragma('foreign_keys = OFF');
    raw.prepare(`UPDATE memory SET superseded_by = 'l1' WHERE id = 'a9'`).run();
    raw.close();

    const config = validateConfig({ stateDb: join(dir, 'state.db'), stores: { agent: { db } } });
    const store = openStore(config, 'agent');
    try {
      const run = (dryRun: boolean) => layoutOf(store).erase(store, { ...opts, selector: { user: 'alice' }, dryRun });
      const planned = await run(true);
      const expected = [...rows.filter((r) => r.subject !== 'bob').map((r) => r.id)].sort();
      expect([...planned.ids].sort()).toEqual(expected);
      expect(planned.ids.length).toBe(expected.length); // each row once
      expect(planned.counts).toMatchObject({ rows: expected.length, cascaded: 5 }); // v1–v4 and l1
      const erased = await run(false);
      expect([...erased.ids].sort()).toEqual(expected);
      expect(erased.counts).toMatchObject({ rows: expected.length, cascaded: 5 });
      expect([...planned.fields!.values].sort()).toEqual([...erased.fields!.values].sort());
      expect(rowIds(db)).toEqual(['b0', 'b1']);
    } finally {
      store.close();
    }
  });
});
