import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/store.js';
import { NOW, HOUR, at, world, withState } from './fixtures.js';
import { previewDigest } from '../../src/digest/digest.js';
import { runJob } from '../../src/runner.js';
import { JOBS } from '../../jobs/index.js';
import { silentLogger } from '../../src/logger.js';

/**
 * The digest shows the last integrity run's report when it checked the same file within 26 hours before the
 * digest's `now`, instead of reading every page again; anything else (older, later than now, another file under
 * the store's name, a result of another shape) is checked afresh.
 */
let tmp: { dir: string; cleanup: () => void };
beforeEach(() => (tmp = tempDir('mw-digest-reuse-')));
afterEach(() => tmp.cleanup());

const codes = async (w: ReturnType<typeof world>, now: number) => {
  const { model } = await previewDigest(w.config, { now, log: silentLogger });
  const m = model.stores[0]!.maintenance;
  return { rows: m.rows, codes: m.problems.map((f) => f.code) };
};

describe('digest and the last integrity run', () => {
  const rows = [{ id: 'a', created_at: at(NOW - 2 * HOUR) }, { id: 'b', created_at: at(NOW - 3 * HOUR) }];

  it('a recent run of the same file is shown; an old one, or one from after now, is not', async () => {
    const w = world(tmp.dir, { agent: rows }, null);
    await runJob('integrity', { store: 'agent' }, { jobs: JOBS, config: w.config, log: silentLogger, now: () => NOW - 5 * HOUR });
    // Since then the agent wrote a row without a source (a problem) that the run did not see.
    const db = new Database(w.storePath('agent'));
    db.prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at) VALUES ('c', 's', 'f', '', ?, ?)`).run(at(NOW - HOUR), at(NOW - HOUR));
    db.close();
    expect(await codes(w, NOW)).toEqual({ rows: 2, codes: [] });
    expect(await codes(w, NOW + 21 * HOUR)).toEqual({ rows: 2, codes: [] });
    // Older than 26 hours, or checked after the digest's now: the store is checked again.
    expect(await codes(w, NOW + 22 * HOUR)).toEqual({ rows: 3, codes: ['empty_source'] });
    expect(await codes(w, NOW - 6 * HOUR)).toEqual({ rows: 3, codes: ['empty_source'] });
  });

  it('a run of another file under the same name, a failed run, or a result of another shape is not used', async () => {
    const w = world(tmp.dir, { agent: [...rows, { id: 'c', source: '  ' }] }, null);
    const record = (outcome: string, result: unknown) => withState(w.config, (s) =>
      s.prepare(`INSERT INTO job_runs (job, store, started_at, finished_at, outcome, result) VALUES ('integrity', 'agent', ?, ?, ?, ?)`)
        .run(at(NOW - HOUR), at(NOW - HOUR), outcome, JSON.stringify(result)));
    const report = { ok: true, store: 'agent', path: w.storePath('agent'), checkedAt: at(NOW - HOUR), rows: 99, live: 99, problems: [], notes: [] };
    for (const [outcome, result] of [
      ['ok', { ...report, path: `${w.storePath('agent')}.old` }],
      ['failed', report],
      ['ok', { rows: 99, live: 99 }],
      ['ok', { ...report, problems: 'none' }],
      ['ok', { ...report, checkedAt: 'yesterday' }],
    ] as const) {
      record(outcome, result);
      expect(await codes(w, NOW), JSON.stringify(result)).toEqual({ rows: 3, codes: ['empty_source'] });
    }
    record('ok', report);
    expect(await codes(w, NOW)).toEqual({ rows: 99, codes: [] });
  });
});
