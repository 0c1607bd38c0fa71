import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { drift, type DriftResult } from '../../jobs/drift.js';
import { openStore } from '../../src/layouts/open.js';
import { openStateDb } from '../../src/state/state.js';
import { confirmMemory } from '../../src/drift/review.js';
import { pendingItems } from '../../src/drift/record.js';
import { DAY_MS } from '../../src/time/instants.js';
import type { Config } from '../../src/config/config.js';
import { configFor, daysAgo, insertRows, jobContext, liveIds, NOW, sandbox, withDb, withState, type Sandbox } from './helpers.js';

/**
 * Class 8 of issue 11: drift settles. Run after run (each past review.afterDays, so every live row is due again) a
 * contradiction already answered is not answered again, and a rule without expect keeps its baseline.
 */
describe('drift settles instead of repeating', () => {
  let box: Sandbox;
  let root: string;
  beforeEach(() => {
    box = sandbox();
    root = join(box.dir, 'configs');
    mkdirSync(root);
  });
  afterEach(() => box.cleanup());

  const setVersion = (v: string) => writeFileSync(join(root, 'app.json'), JSON.stringify({ database: { version: v } }));
  const dbRule = (extra: object = {}) => ({
    match: { source: '^file:(?<path>[^#]+)#db$', fact: 'Postgres' },
    use: 'file',
    with: { path: '${path}', select: '$.database.version', expect: '^15' },
    replacement: 'the database is Postgres ${value}',
    autoSupersede: true,
    ...extra,
  });
  const config = (rules: object[]): Config => configFor(box, { allow: { fileRoots: [root] }, rules });
  const runAt = (c: Config, day: number): Promise<DriftResult> => drift({ store: 'agent' }, jobContext(c, NOW + day * DAY_MS));
  const counts = () => ({
    rows: withDb(box.dbPath, (db) => (db.prepare('SELECT count(*) AS n FROM memory').get() as { n: number }).n),
    live: liveIds(box.dbPath).length,
    pending: withState(box.statePath, (s) => pendingItems(s, 'agent').length),
  });
  const liveFacts = () => withDb(box.dbPath, (db) => (db.prepare('SELECT fact FROM live_memory ORDER BY fact').all() as { fact: string }[]).map((r) => r.fact));

  it('autoSupersede whose replacement the expect never matches: one replacement, then settled, run after run', async () => {
    setVersion('16.2');
    insertRows(box.dbPath, [{ id: 'm_db', fact: 'the database is Postgres 15', source: 'file:app.json#db', confirmed_at: daysAgo(100) }]);
    const c = config([dbRule()]);
    const first = await runAt(c, 0);
    expect(first).toMatchObject({ contradicted: 1, superseded: 1 });
    const after = counts();
    expect(after).toEqual({ rows: 2, live: 1, pending: 0 });
    for (let i = 1; i <= 4; i++) {
      const r = await runAt(c, i * 100);
      expect(r).toMatchObject({ due: 1, confirmed: 1, contradicted: 0, superseded: 0, toPerson: 0 });
      expect(counts()).toEqual(after);
    }
    expect(liveFacts()).toEqual(['the database is Postgres 16.2']);
  });

  it('the same with a replacement source equal to the original one (no drift: prefix to tell)', async () => {
    setVersion('16.2');
    insertRows(box.dbPath, [{ id: 'm_db', fact: 'Postgres 15', source: 'file:app.json#db', confirmed_at: daysAgo(100) }]);
    const c = config([dbRule({ replacement: { fact: 'Postgres ${value}', source: '${source}' } })]);
    await runAt(c, 0);
    const after = counts();
    expect(after).toEqual({ rows: 2, live: 1, pending: 0 });
    for (let i = 1; i <= 3; i++) {
      expect(await runAt(c, i * 100)).toMatchObject({ confirmed: 1, superseded: 0, toPerson: 0 });
      expect(counts()).toEqual(after);
    }
    // a row written in the template's own words by the agent is still judged by expect
    insertRows(box.dbPath, [{ id: 'm_agent', fact: 'Postgres 15', source: 'file:app.json#db', confirmed_at: daysAgo(100, NOW + 400 * DAY_MS) }]);
    setVersion('15.4');
    const r = await runAt(c, 400);
    expect(r.verdicts.find((v) => v.id === 'm_agent')).toMatchObject({ verdict: 'confirmed' });
  });

  it('rows sharing a source get one replacement between them, not one twin each', async () => {
    setVersion('16.2');
    insertRows(box.dbPath, [
      { id: 'm_a', fact: 'the database is Postgres 15', source: 'file:app.json#db', confirmed_at: daysAgo(101) },
      { id: 'm_b', fact: 'the database is Postgres 15', source: 'file:app.json#db', confirmed_at: daysAgo(100) },
      { id: 'm_other', subject: 'staging', fact: 'the database is Postgres 15', source: 'file:app.json#db', confirmed_at: daysAgo(100) },
    ]);
    const c = config([dbRule()]);
    const first = await runAt(c, 0);
    expect(first).toMatchObject({ contradicted: 3, superseded: 3 });
    const by = Object.fromEntries(first.verdicts.map((v) => [v.id, v.supersededBy]));
    expect(by.m_a).toBe(by.m_b);
    expect(by.m_other).not.toBe(by.m_a); // another subject keeps its own row
    expect(counts()).toEqual({ rows: 5, live: 2, pending: 0 });
    await runAt(c, 100);
    expect(counts()).toEqual({ rows: 5, live: 2, pending: 0 });
  });

  it('an expect that matches: confirmed every run, nothing inserted', async () => {
    setVersion('15.4');
    insertRows(box.dbPath, [{ id: 'm_db', fact: 'the database is Postgres 15', source: 'file:app.json#db', confirmed_at: daysAgo(100) }]);
    const c = config([dbRule()]);
    for (let i = 0; i < 3; i++) {
      expect(await runAt(c, i * 100)).toMatchObject({ due: 1, confirmed: 1, superseded: 0 });
      expect(counts()).toEqual({ rows: 1, live: 1, pending: 0 });
    }
  });

  it('ping-pong: the replacement is re-checked, and follows the source back and forth without duplicates', async () => {
    setVersion('16.2');
    insertRows(box.dbPath, [{ id: 'm_db', fact: 'the database is Postgres 15', source: 'file:app.json#db', confirmed_at: daysAgo(100) }]);
    const c = config([dbRule()]);
    const steps: [string, string, number][] = [
      ['16.2', 'the database is Postgres 16.2', 2],
      ['16.2', 'the database is Postgres 16.2', 2],
      ['15.4', 'the database is Postgres 15.4', 3], // back: the replacement itself is contradicted, by the expect's old fact
      ['15.4', 'the database is Postgres 15.4', 3],
      ['17.0', 'the database is Postgres 17.0', 4],
      ['17.0', 'the database is Postgres 17.0', 4],
    ];
    let day = 0;
    for (const [version, fact, rows] of steps) {
      setVersion(version);
      await runAt(c, day);
      day += 100;
      expect(liveFacts(), version).toEqual([fact]);
      expect(counts(), version).toEqual({ rows, live: 1, pending: 0 });
    }
  });

  it('a replacement that ignores the value: when the old fact is back, a person decides, once', async () => {
    setVersion('16.2');
    insertRows(box.dbPath, [{ id: 'm_db', fact: 'the database is Postgres 15', source: 'file:app.json#db', confirmed_at: daysAgo(100) }]);
    const c = config([dbRule({ replacement: 'the database is no longer Postgres 15' })]);
    await runAt(c, 0);
    expect(await runAt(c, 100)).toMatchObject({ confirmed: 1, superseded: 0 });
    setVersion('15.1');
    expect(await runAt(c, 200)).toMatchObject({ contradicted: 1, superseded: 0, toPerson: 1 });
    expect(await runAt(c, 300)).toMatchObject({ due: 0 });
    expect(counts()).toEqual({ rows: 2, live: 1, pending: 1 });
  });

  it('a contradiction a person confirmed is not raised again for the same reading, and is for a new one', async () => {
    setVersion('16.2');
    insertRows(box.dbPath, [{ id: 'm_db', fact: 'the database is Postgres 15', source: 'file:app.json#db', confirmed_at: daysAgo(100) }]);
    const c = config([dbRule({ autoSupersede: false })]);
    expect(await runAt(c, 0)).toMatchObject({ contradicted: 1, toPerson: 1 });
    expect(await runAt(c, 100)).toMatchObject({ due: 0 }); // waiting for a person: not picked again
    const store = openStore(c, 'agent');
    const state = openStateDb(box.statePath);
    try {
      await confirmMemory(store, state, 'm_db', NOW + 101 * DAY_MS);
    } finally {
      store.close();
      state.close();
    }
    for (const day of [200, 300]) {
      const r = await runAt(c, day);
      expect(r).toMatchObject({ due: 1, confirmed: 1, contradicted: 0, toPerson: 0 });
      expect(counts()).toEqual({ rows: 1, live: 1, pending: 0 });
    }
    setVersion('17.0');
    expect(await runAt(c, 400)).toMatchObject({ contradicted: 1, toPerson: 1 });
  });

  describe('a rule without expect', () => {
    const watch = () => config([{ match: { source: '^watch:(?<path>.+)$' }, use: 'file', with: { path: '${path}' } }]);
    const verdictCount = () => withState(box.statePath, (s) => (s.prepare('SELECT count(*) AS n FROM drift_verdicts').get() as { n: number }).n);

    it('records the first reading as the baseline: not due again before review.afterDays, then compared with it', async () => {
      writeFileSync(join(root, 'notes.txt'), 'v1\n');
      insertRows(box.dbPath, [{ id: 'm_w', fact: 'notes say v1', source: 'watch:notes.txt', confirmed_at: daysAgo(100) }]);
      const c = watch();
      expect(await runAt(c, 0)).toMatchObject({ due: 1, confirmed: 1, unverifiable: 0 });
      for (const day of [1, 7, 30, 89]) expect((await runAt(c, day)).due, `day ${day}`).toBe(0);
      expect(verdictCount()).toBe(1);
      expect(await runAt(c, 100)).toMatchObject({ due: 1, confirmed: 1, changed: 0 }); // equal on rerun
      writeFileSync(join(root, 'notes.txt'), 'v2\n');
      expect(await runAt(c, 200)).toMatchObject({ changed: 1, toPerson: 1 }); // the baseline changed
      for (const day of [201, 300, 400]) expect((await runAt(c, day)).due).toBe(0);
      expect(verdictCount()).toBe(3);
      expect(counts()).toEqual({ rows: 1, live: 1, pending: 1 });
    });

    it('a source that fails the first time takes its baseline on the first run that reads it', async () => {
      insertRows(box.dbPath, [{ id: 'm_w', fact: 'notes say v1', source: 'watch:notes.txt', confirmed_at: daysAgo(100) }]);
      const c = watch();
      expect(await runAt(c, 0)).toMatchObject({ unverifiable: 1 });
      expect(await runAt(c, 1)).toMatchObject({ due: 1, unverifiable: 1 }); // tried again: nothing was read
      writeFileSync(join(root, 'notes.txt'), 'v1\n');
      expect(await runAt(c, 2)).toMatchObject({ due: 1, confirmed: 1 });
      expect((await runAt(c, 3)).due).toBe(0);
      rmSync(join(root, 'notes.txt'));
      writeFileSync(join(root, 'notes.txt'), 'v1\n');
      expect(await runAt(c, 100)).toMatchObject({ confirmed: 1, changed: 0 });
    });
  });
});
