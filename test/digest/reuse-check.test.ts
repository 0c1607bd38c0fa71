import Database from 'better-sqlite3';
import { copyFileSync, linkSync, renameSync, rmSync } from 'node:fs';
import { basename, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/store.js';
import { NOW, HOUR, at, world, withState } from './fixtures.js';
import { previewDigest } from '../../src/digest/digest.js';
import { runJob } from '../../src/job/runner.js';
import { JOBS } from '../../jobs/index.js';
import { silentLogger } from '../../src/log/logger.js';
import { fileIdentity } from '../../src/store/file-identity.js';

/**
 * The digest shows the last integrity run's report when it checked the same file within 26 hours before the
 * digest's `now`, instead of reading every page again; anything else (older, later than now, another file under
 * the store's name or path, a result of another shape) is checked afresh.
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
    const other = join(tmp.dir, 'other.db');
    copyFileSync(w.storePath('agent'), other);
    const report = { ok: true, store: 'agent', path: w.storePath('agent'), file: fileIdentity(w.storePath('agent')), checkedAt: at(NOW - HOUR), rows: 99, live: 99, problems: [], notes: [] };
    for (const [outcome, result] of [
      // The same path text, another file: another working directory's relative path, a copy, a run from before
      // runs said which file they checked.
      ['ok', { ...report, file: fileIdentity(other) }],
      ['ok', { ...report, file: undefined }],
      ['ok', { ...report, file: `${report.file}0` }],
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

  it('the same file by another path is the same file; a file renamed over the store since the run is not', async () => {
    const w = world(tmp.dir, { agent: rows }, null);
    await runJob('integrity', { store: 'agent' }, { jobs: JOBS, config: w.config, log: silentLogger, now: () => NOW - 5 * HOUR });
    const path = w.storePath('agent');
    const db = new Database(path);
    db.prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at) VALUES ('c', 's', 'f', '', ?, ?)`).run(at(NOW - HOUR), at(NOW - HOUR));
    db.close();
    // Named through a link, or with a path that resolves to it: still the file the run checked.
    const linked = join(tmp.dir, 'linked.db');
    linkSync(path, linked);
    for (const other of [linked, join(path, '..', '.', basename(path))]) {
      const v = { ...w, config: { ...w.config, stores: { agent: { ...w.config.stores.agent!, db: other } } } };
      expect(await codes(v, NOW), other).toEqual({ rows: 2, codes: [] });
    }
    rmSync(linked);
    // A copy renamed over the store (as a restore does): the same path, another file, checked afresh.
    copyFileSync(path, `${path}.new`);
    renameSync(`${path}.new`, path);
    expect(await codes(w, NOW)).toEqual({ rows: 3, codes: ['empty_source'] });
  });
});
