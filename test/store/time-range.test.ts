import { afterAll, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cli } from '../helpers/cli.js';
import { ids, makeStore, tempDir, type Row } from '../helpers/store.js';

/**
 * Canonical timestamps hold the years 0000 to 9999. An instant past them used to be written as Date writes it
 * (`+010240-08 21T22:41`, no timestamp at all) into the agent's store by `review expire --in` and by
 * `repair timestamps`, and a prune at the far end of the range compared against such a text and found nothing.
 */
const { dir, cleanup } = tempDir('mw-range-');
afterAll(cleanup);
const env = { MEMORY_WARDEN_STATE: join(dir, 'state.db'), MEMORY_WARDEN_CONFIG: '' };
const sha = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');
let n = 0;
const store = (rows: Row[]) => makeStore(join(dir, `s${n++}.db`), rows);
const column = (db: string, col: string, id: string) => {
  const d = new Database(db, { readonly: true });
  try {
    return (d.prepare(`SELECT ${col} AS v FROM memory WHERE id = ?`).get(id) as { v: unknown }).v;
  } finally {
    d.close();
  }
};

describe('review expire --in', () => {
  it('an expiry past 9999-12-31 is refused in one line, and the store is not written', () => {
    for (const [now, inText] of [
      ['2026-12-01T00:00:00Z', '3000000d'],
      ['2026-12-01T00:00:00Z', '99999999999d'],
      ['2026-12-01T00:00:00Z', '600000w'],
      ['2026-12-01T00:00:00Z', '99999999999999999999999s'],
      ['9999-12-30T00:00:00Z', '2d'],
      ['9999-12-31T23:59:59Z', '1s'],
    ] as const) {
      const db = store([{ id: 'm1' }]);
      const before = sha(db);
      const r = cli(['review', 'expire', 'm1', '--in', inText, '--now', now, '--db', db], env);
      expect(r.code, `${now} ${inText}`).toBe(2);
      expect(r.stderr).toBe(`memory-warden: review expire: --in "${inText}" is too far: the expiry would fall after 9999-12-31\n`);
      expect(sha(db)).toBe(before);
      expect(column(db, 'expires_at', 'm1')).toBeNull();
    }
  });

  it('up to the last second is written as a timestamp', () => {
    const db = store([{ id: 'm1' }]);
    const r = cli(['review', 'expire', 'm1', '--in', '1d', '--now', '9999-12-30T23:59:59Z', '--db', db], env);
    expect(r.code, r.stderr).toBe(0);
    expect(column(db, 'expires_at', 'm1')).toBe('9999-12-31 23:59:59');
  });
});

describe('repair timestamps', () => {
  it('leaves for a person a text whose UTC instant is past the years 0000-9999, and rewrites the rest', () => {
    const db = store([
      { id: 'late', created_at: '9999-12-31T23:59:59-12:00', confirmed_at: '2026-01-01 00:00:00' },
      { id: 'early', created_at: '0000-01-01T00:00:00+14:00', confirmed_at: '2026-01-01 00:00:00' },
      { id: 'plain', created_at: '2026-01-01T00:00:00Z', confirmed_at: '2026-01-01 00:00:00' },
      { id: 'edge', created_at: '9999-12-31T23:59:59Z', confirmed_at: '2026-01-01 00:00:00' },
    ]);
    const r = cli(['repair', 'timestamps', '--db', db, '--json'], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json()).toMatchObject({ rewritten: 2, unparseable: 0, outOfRange: 2 });
    expect(column(db, 'created_at', 'late')).toBe('9999-12-31T23:59:59-12:00');
    expect(column(db, 'created_at', 'early')).toBe('0000-01-01T00:00:00+14:00');
    expect(column(db, 'created_at', 'plain')).toBe('2026-01-01 00:00:00');
    expect(column(db, 'created_at', 'edge')).toBe('9999-12-31 23:59:59');
    const human = cli(['repair', 'timestamps', '--db', db], env);
    expect(human.stdout).toContain('0 unparseable and 2 outside the years 0000-9999 left for a person');
  });
});

describe('prune at the ends of the range', () => {
  const rows: Row[] = [
    { id: 'old', expires_at: '2020-01-01 00:00:00' },
    { id: 'day-before', expires_at: '9999-12-30 00:00:00' },
    { id: 'offset', expires_at: '9999-12-30T23:00:00+14:00' },
    { id: 'after', expires_at: '9999-12-31 12:00:00' },
    { id: 'never' },
  ];

  it('at --now 9999-12-31 every row expired by then goes (the text bound no longer runs past the year 9999)', () => {
    const db = store(rows);
    const r = cli(['run', 'prune', '--now', '9999-12-31T00:00:00Z', '--json', '--db', db], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json()).toMatchObject({ deleted: 3, expired: 3 });
    expect(ids(db)).toEqual(['after', 'never']);
  });

  it('a superseded cutoff before the year 0000 (supersededAfterDays in the millions) prunes what expired, nothing else', () => {
    const db = store([...rows, { id: 'v1', superseded_by: 'never', created_at: '0001-01-01 00:00:00' }]);
    const config = join(dir, 'far.yaml');
    writeFileSync(config, `stateDb: ${join(dir, 'state.db')}\nprune:\n  supersededAfterDays: 4000000\n`);
    const r = cli(['run', 'prune', '--now', '2026-12-01T00:00:00Z', '--json', '--config', config, '--db', db], { ...env, MEMORY_WARDEN_CONFIG: '' });
    expect(r.code, r.stderr).toBe(0);
    expect(r.json()).toMatchObject({ deleted: 1, expired: 1, superseded: 0 });
    expect(ids(db)).toEqual(['after', 'day-before', 'never', 'offset', 'v1']);
  });

  it('at --now 0000-01-02 nothing is expired but what is before it', () => {
    const db = store([...rows, { id: 'ancient', expires_at: '0000-01-01 12:00:00' }]);
    const r = cli(['run', 'prune', '--now', '0000-01-02T00:00:00Z', '--json', '--db', db], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json()).toMatchObject({ deleted: 1, expired: 1 });
    expect(ids(db)).not.toContain('ancient');
  });
});
