/**
 * `check` of a PostgreSQL store with a `qdrant:` section compares its collections with the memory table as it does
 * beside a SQLite file: points whose row is gone, live rows without a point (in each collection, or in any with
 * `expectPoints: any`), payload text that differs from the fact, points naming no row. Proven side by side: the same
 * rows in a PostgreSQL schema (native server) and in a SQLite file, the same collections on the Qdrant-compatible
 * test server (or a real Qdrant under QDRANT_URL), checked by the CLI: the same findings and counts.
 */
import { writeFileSync } from 'node:fs';
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/pg.js';
import { qdrantTarget, type QdrantTarget } from '../helpers/qdrant-server.js';
import { assertBuilt, tempDir } from '../queue/fixtures.js';
import { makeStore } from '../helpers/store.js';
import { cliAsync } from '../helpers/cli.js';
import { toCanonical } from '../../src/time/instants.js';

const DAY = 86_400_000;
const VECTOR_CODES = ['orphan_points', 'missing_points', 'payload_mismatch', 'unmapped_points', 'unmappable_rows'];

let db: TestDatabase | undefined;
let q: QdrantTarget | undefined;
afterEach(async () => {
  await db?.drop();
  db = undefined;
  try {
    q?.assertConforms();
  } finally {
    await q?.close();
    q = undefined;
  }
});

interface Twin {
  config: string;
  /** The SQLite store's file. */
  file: string;
  env: Record<string, string>;
  colls: string[];
  check(store: 'fleet' | 'file'): Promise<{ code: number | null; report: any }>;
}

/** 30 live rows and 2 expired ones, in the PostgreSQL store `fleet` and the SQLite store `file`; both with the same collections. */
async function twin(opts: { expectPoints?: 'every' | 'any' } = {}): Promise<Twin> {
  db = await createTestDatabase('pg_q_check');
  q = await qdrantTarget();
  const dir = tempDir('pg-q-check');
  const colls = [q.name('check_a'), q.name('check_b')];
  for (const c of colls) await q.createCollection(c);
  const ids = Array.from({ length: 30 }, (_, i) => `live-${String(i + 1).padStart(2, '0')}`);
  const qdrant = { url: q.url, ...(q.apiKey ? { apiKey: '${QDRANT_API_KEY}' } : {}), collections: colls, textKey: 'text', ...(opts.expectPoints ? { expectPoints: opts.expectPoints } : {}) };
  const config = join(dir, 'config.json');
  const sqlite = makeStore(join(dir, 'agent.db'), [
    ...ids.map((id) => ({ id, fact: `likes tea ${id}` })),
    ...['exp-1', 'exp-2'].map((id) => ({ id, fact: `meeting ${id}`, expires_at: toCanonical(Date.now() - DAY) })),
  ]);
  writeFileSync(config, JSON.stringify({
    stateDb: join(dir, 'state.db'),
    snapshot: { root: join(dir, 'snapshots') },
    stores: {
      fleet: { engine: 'postgres', postgres: { url: '${MW_TEST_PG_URL}', schema: 'fleet' }, qdrant },
      file: { db: sqlite, qdrant },
    },
  }));
  const env = { MW_TEST_PG_URL: db.url, ...(q.apiKey ? { QDRANT_API_KEY: q.apiKey } : {}) };
  const init = await cliAsync(['init', '--store', 'fleet', '--config', config], env);
  expect(init.code, init.stderr).toBe(0);
  await db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source) SELECT i, 'user', 'likes tea ' || i, 'message:1' FROM unnest($1::text[]) i`, [ids]);
  await db.client.query(`INSERT INTO fleet.memory (id, subject, fact, source, expires_at) SELECT i, 'user', 'meeting ' || i, 'message:1', now() - interval '1 day' FROM unnest($1::text[]) i`, [['exp-1', 'exp-2']]);
  // A point for every row (the expired ones too: their rows are still there), the row named in the payload.
  let point = 0;
  for (const c of colls) {
    await q.upsert(c, [...ids.map((id) => ({ id: ++point, payload: { memory_id: id, text: `likes tea ${id}` } })),
      ...['exp-1', 'exp-2'].map((id) => ({ id: ++point, payload: { memory_id: id, text: `meeting ${id}` } }))]);
  }
  return {
    config, file: sqlite, env, colls,
    async check(store) {
      const r = await cliAsync(['check', '--store', store, '--json', '--config', config], env);
      let report: any;
      try {
        report = JSON.parse(r.stdout);
      } catch {
        throw new Error(`check --store ${store}: exit ${r.code}: ${r.stderr}`);
      }
      return { code: r.code, report };
    },
  };
}

interface VectorFinding {
  code: string;
  severity: string;
  count?: number;
  ids: string[];
}

/** The vector findings of a report, ids sorted: what both engines must say alike. */
const vectorFindings = (report: any): VectorFinding[] => [...report.problems, ...report.notes]
  .filter((f: { code: string }) => VECTOR_CODES.includes(f.code))
  .map((f: { code: string; severity: string; count?: number; ids?: string[] }) => ({ code: f.code, severity: f.severity, count: f.count, ids: [...(f.ids ?? [])].sort() }))
  .sort((a: { code: string }, b: { code: string }) => a.code.localeCompare(b.code));

describe('check of a PostgreSQL store with Qdrant beside it', { timeout: 180_000 }, () => {
  beforeAll(() => assertBuilt());

  it('in step: exit 0, the counts per collection; out of step: the findings and counts check makes beside a SQLite file', async () => {
    const t = await twin();
    const clean = await t.check('fleet');
    expect(clean.code, JSON.stringify(clean.report.problems)).toBe(0);
    expect(clean.report.vectors).toEqual({
      liveRows: 30, unmappableRows: 0,
      collections: t.colls.map((collection) => ({ collection, points: 32, orphanPoints: 0, missingPoints: 0, payloadMismatch: 0, unmappedPoints: 0 })),
    });
    expect(vectorFindings(clean.report)).toEqual([]);
    expect((await t.check('file')).report.vectors).toEqual(clean.report.vectors);

    // Out of step, both stores alike: rows deleted by someone else (their points stay), a point missing from one
    // collection, from both, a payload that no longer says the fact, a point naming no row.
    const [a, b] = t.colls as [string, string];
    await db!.client.query(`DELETE FROM fleet.memory WHERE id IN ('live-01', 'live-02')`);
    const f = new Database(t.file);
    f.prepare(`DELETE FROM memory WHERE id IN ('live-01', 'live-02')`).run();
    f.close();
    const points = async (c: string) => (await q!.points(c)).map((p) => ({ id: p.id, row: String(p.payload.memory_id) }));
    const idOf = async (c: string, row: string) => (await points(c)).find((p) => p.row === row)!.id;
    const del = async (c: string, row: string) => {
      const res = await fetch(`${q!.url}/collections/${c}/points/delete?wait=true`, {
        method: 'POST', headers: { 'content-type': 'application/json', ...(q!.apiKey ? { 'api-key': q!.apiKey } : {}) },
        body: JSON.stringify({ points: [await idOf(c, row)] }),
      });
      expect(res.ok).toBe(true);
    };
    await del(b, 'live-03');
    await del(a, 'live-04');
    await del(b, 'live-04');
    await q!.upsert(a, [{ id: await idOf(a, 'live-05'), payload: { memory_id: 'live-05', text: 'likes coffee' } }]);
    await q!.upsert(b, [{ id: 9001, payload: { text: 'nobody' } }]);

    const pg = await t.check('fleet');
    const sqlite = await t.check('file');
    expect(pg.code).toBe(1);
    expect(sqlite.code).toBe(1);
    expect(vectorFindings(pg.report)).toEqual(vectorFindings(sqlite.report));
    expect(pg.report.vectors).toEqual(sqlite.report.vectors);
    const byCode: Record<string, VectorFinding> = Object.fromEntries(vectorFindings(pg.report).map((x) => [x.code, x]));
    expect(byCode.orphan_points).toMatchObject({ severity: 'error', count: 4 });
    expect(byCode.missing_points).toMatchObject({ severity: 'warning', count: 2, ids: ['live-03', 'live-04'] });
    expect(byCode.payload_mismatch).toMatchObject({ count: 1 });
    expect(byCode.payload_mismatch!.ids[0]).toContain('(row live-05)');
    expect(byCode.unmapped_points).toMatchObject({ count: 1, ids: [`${b}:9001`] });
    expect(pg.report.vectors.collections).toEqual([
      { collection: a, points: 31, orphanPoints: 2, missingPoints: 1, payloadMismatch: 1, unmappedPoints: 0 },
      { collection: b, points: 31, orphanPoints: 2, missingPoints: 2, payloadMismatch: 0, unmappedPoints: 1 },
    ]);
    expect(pg.report.problems.map((x: { code: string }) => x.code)).toContain('orphan_points');

    // run integrity makes the same comparison (the worker's check).
    const integrity = await cliAsync(['run', 'integrity', '--store', 'fleet', '--json', '--config', t.config], t.env);
    expect(integrity.code).toBe(1);
    expect(integrity.stdout).toContain('orphan_points');
  });

  it('expectPoints: any (collections partition the rows): a row is missing only when no collection has it', async () => {
    const t = await twin({ expectPoints: 'any' });
    const [a, b] = t.colls as [string, string];
    const all = await q!.points(b);
    const drop = async (c: string, rows: string[]) => {
      const ids = (await q!.points(c)).filter((p) => rows.includes(String(p.payload.memory_id))).map((p) => p.id);
      const res = await fetch(`${q!.url}/collections/${c}/points/delete?wait=true`, {
        method: 'POST', headers: { 'content-type': 'application/json', ...(q!.apiKey ? { 'api-key': q!.apiKey } : {}) },
        body: JSON.stringify({ points: ids }),
      });
      expect(res.ok).toBe(true);
    };
    expect(all).toHaveLength(32);
    await drop(b, ['live-10', 'live-11']);
    await drop(a, ['live-11']);
    const pg = await t.check('fleet');
    const sqlite = await t.check('file');
    expect(vectorFindings(pg.report)).toEqual(vectorFindings(sqlite.report));
    expect(vectorFindings(pg.report)).toEqual([{ code: 'missing_points', severity: 'warning', count: 1, ids: ['live-11'] }]);
    expect(pg.code).toBe(sqlite.code); // a missing point is a problem for check on both (exit 1)
    expect(pg.code).toBe(1);
  });
});
