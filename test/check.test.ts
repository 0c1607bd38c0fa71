import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { makeStore, tempDir } from './helpers/store.js';
import { cli } from './helpers/cli.js';

const NOW = '2026-11-29T12:00:00Z';

describe('check', () => {
  let dir: string;
  let cleanup: () => void;
  let env: Record<string, string>;
  beforeEach(() => {
    ({ dir, cleanup } = tempDir());
    env = { MEMORY_WARDEN_STATE: join(dir, 'state.db') };
  });
  afterEach(() => cleanup());

  const check = (db: string) => cli(['check', '--db', db, '--json', '--now', NOW], env);
  const problem = (report: any, code: string) => report.problems.find((p: any) => p.code === code);

  it('passes a healthy store with exit 0', () => {
    const db = makeStore(join(dir, 'm.db'), [{ id: 'a', created_at: '2026-11-01 00:00:00' }, { id: 'b', created_at: '2026-11-02 00:00:00' }]);
    const r = check(db);
    expect(r.code).toBe(0);
    expect(r.json()).toMatchObject({ ok: true, rows: 2, live: 2, integrity: 'ok', dangling: 0, reviewDue: 0, problems: [], journalMode: 'wal' });
  });

  it('finds every kind of problem, with ids, and exits 1', () => {
    const db = makeStore(join(dir, 'm.db'), [
      { id: 'dangling_1', superseded_by: 'deleted_long_ago', created_at: '2026-11-01 00:00:00' },
      { id: 'no_source', source: '  ', created_at: '2026-11-01 00:00:00' },
      { id: 'iso', created_at: '2026-11-01T00:00:00Z' },
      { id: 'offset', created_at: '2026-11-01 00:00:00', expires_at: '2026-12-01T00:00:00+02:00' },
      { id: 'junk', created_at: '2026-11-01 00:00:00', expires_at: 'when the sprint ends' },
      { id: 'feb30', created_at: '2026-02-30 00:00:00' },
      { id: 'old_1', created_at: '2026-01-01 00:00:00', confirmed_at: '2026-01-01 00:00:00' },
      { id: 'old_2', created_at: '2026-03-01 00:00:00', confirmed_at: '2026-08-01T00:00:00+00:00' },
      { id: 'expired', created_at: '2026-01-01 00:00:00', confirmed_at: '2026-01-01 00:00:00', expires_at: '2026-11-29T01:00:00Z' },
    ]);
    const raw = new Database(db);
    raw.pragma('journal_mode = DELETE');
    raw.close();
    const r = check(db);
    expect(r.code).toBe(1);
    const report = r.json();
    expect(report.ok).toBe(false);
    expect(report.rows).toBe(9);
    // live: everything but the dangling (superseded) row and the expired one; the unparseable expiry stays live.
    expect(report.live).toBe(7);
    expect(report.dangling).toBe(1);
    expect(problem(report, 'dangling').ids).toEqual(['dangling_1']);
    expect(problem(report, 'empty_source').ids).toEqual(['no_source']);
    expect(problem(report, 'noncanonical_time').ids.sort()).toEqual(['iso:created_at', 'iso:confirmed_at', 'offset:expires_at', 'old_2:confirmed_at', 'expired:expires_at'].sort());
    expect(problem(report, 'unparseable_time').ids.sort()).toEqual(['feb30:confirmed_at', 'feb30:created_at', 'junk:expires_at']);
    expect(problem(report, 'not_wal')).toBeDefined();
    expect(report.journalMode).toBe('delete');
    // old_2 was confirmed 2026-08-01: 120 days before now → due; the expired row is not live, so not due.
    expect(report.reviewDue).toBe(2);
    expect(report.notes.find((n: any) => n.code === 'review_due').ids).toEqual(['old_1', 'old_2']);
  });

  it('reports a corrupt file through integrity_check', () => {
    const db = makeStore(join(dir, 'm.db'), Array.from({ length: 50 }, (_, i) => ({ id: `r${i}`, subject: `s${i}`, fact: `f${i}` })));
    // An index whose entries no longer match its definition: queries still run, integrity_check must object.
    const raw = new Database(db);
    raw.exec('CREATE INDEX memory_fact ON memory(fact)');
    raw.unsafeMode(true);
    raw.pragma('writable_schema = ON');
    raw.prepare(`UPDATE sqlite_schema SET sql = 'CREATE INDEX memory_fact ON memory(subject)' WHERE name = 'memory_fact'`).run();
    raw.close();
    const r = check(db);
    expect(r.code).toBe(1);
    const report = r.json();
    expect(report.integrity).not.toBe('ok');
    expect(problem(report, 'integrity').message).toMatch(/memory_fact/);
  });

  it('health gap is rows minus live', () => {
    const db = makeStore(join(dir, 'm.db'), [{ id: 'a' }, { id: 'b', superseded_by: 'a' }, { id: 'c', expires_at: '2020-01-01 00:00:00' }]);
    const report = check(db).json();
    expect(report).toMatchObject({ rows: 3, live: 1, gap: 2 });
  });
});
