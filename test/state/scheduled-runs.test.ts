import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { claimScheduledRun, openStateDb, recordRunEnd } from '../../src/state/state.js';
import type { Db } from '../../src/store/sqlite.js';
import { toCanonical } from '../../src/time/instants.js';
import { tempDir } from '../helpers/store.js';

/** claimScheduledRun on a real state db, with real processes standing for the workers that left rows behind. */
describe('claimScheduledRun', () => {
  let tmp: { dir: string; cleanup: () => void };
  let db: Db;
  const procs: ChildProcess[] = [];
  beforeEach(() => {
    tmp = tempDir('mw-claim-');
    db = openStateDb(join(tmp.dir, 'state.db'));
  });
  afterEach(async () => {
    db.close();
    for (const p of procs.splice(0)) if (p.exitCode === null && p.signalCode === null) {
      p.kill('SIGKILL');
      await new Promise((r) => p.once('exit', r));
    }
    tmp.cleanup();
  });

  /** A live process: it waits until it is killed. */
  const live = async () => {
    const p = spawn(process.execPath, ['-e', 'process.stdout.write("up"); setInterval(() => {}, 1000)'], { stdio: ['ignore', 'pipe', 'ignore'] });
    procs.push(p);
    await new Promise((r) => p.stdout!.once('data', r));
    return p;
  };
  /** A 'running' row of `pid`, started at `at`, as a worker's claim leaves it. */
  const runningRow = (run: string, pid: number, at: number) =>
    db.prepare(`INSERT INTO job_runs (job, store, started_at, outcome, scheduled_run, pid) VALUES ('prune', 'agent', ?, 'running', ?, ?)`).run(toCanonical(at), run, pid);

  it("finishes once: the second claim of a run finished 'ok' finds it, whatever failed before", () => {
    const first = claimScheduledRun(db, 'prune', 'agent', 'prune:agent:1', Date.now());
    if (!('runId' in first)) throw new Error('first claim refused');
    recordRunEnd(db, first.runId, Date.now(), 'failed', 'busy');
    const retry = claimScheduledRun(db, 'prune', 'agent', 'prune:agent:1', Date.now());
    if (!('runId' in retry)) throw new Error('a failed run blocked its retry');
    recordRunEnd(db, retry.runId, Date.now(), 'ok', { deleted: 1 });
    expect(claimScheduledRun(db, 'prune', 'agent', 'prune:agent:1', Date.now())).toMatchObject({ alreadyRan: { runId: retry.runId } });
    // another tick of the same scheduler is another run
    expect(claimScheduledRun(db, 'prune', 'agent', 'prune:agent:2', Date.now())).toHaveProperty('runId');
  });

  it('a run running in a live process is in progress; one of a killed process, or of a pid reused by a later process, is not', async () => {
    const other = await live();
    runningRow('prune:agent:1', other.pid!, Date.now());
    expect(claimScheduledRun(db, 'prune', 'agent', 'prune:agent:1', Date.now())).toEqual({ inProgress: { runId: 1, pid: other.pid } });

    other.kill('SIGKILL');
    await new Promise((r) => other.once('exit', r));
    expect(claimScheduledRun(db, 'prune', 'agent', 'prune:agent:1', Date.now())).toHaveProperty('runId');

    // The row's process died an hour ago and a process started since has its pid: not the same process.
    const later = await live();
    runningRow('prune:agent:3', later.pid!, Date.now() - 3_600_000);
    expect(claimScheduledRun(db, 'prune', 'agent', 'prune:agent:3', Date.now())).toHaveProperty('runId');
  });

  it('processes claiming one run together: exactly one starts it, the others find it in progress (the look and the INSERT are one transaction)', async () => {
    const state = fileURLToPath(new URL('../../dist/src/state/state.js', import.meta.url));
    const child = `
      const { claimScheduledRun, openStateDb } = await import(${JSON.stringify(state)});
      const db = openStateDb(process.argv[1]);
      process.stdout.write('ready\\n');
      process.stdin.once('data', () => {
        process.stdout.write(JSON.stringify(claimScheduledRun(db, 'prune', 'agent', 'prune:agent:7', Date.now())) + '\\n');
        process.stdin.once('end', () => process.exit(0)); // alive until every claim is in
      });`;
    const path = join(tmp.dir, 'state.db');
    const kids = Array.from({ length: 4 }, () => spawn(process.execPath, ['--input-type=module', '-e', child, path], { stdio: ['pipe', 'pipe', 'inherit'] }));
    procs.push(...kids);
    const out = kids.map((k) => {
      let text = '';
      k.stdout!.on('data', (d: Buffer) => (text += d.toString()));
      return (line: number) => new Promise<string>((resolve) => {
        const check = () => (text.split('\n').length > line + 1 ? resolve(text.split('\n')[line]!) : k.stdout!.once('data', check));
        check();
      });
    });
    await Promise.all(out.map((o) => o(0)));
    for (const k of kids) k.stdin!.write('go\n');
    const claims = (await Promise.all(out.map((o) => o(1)))).map((l) => JSON.parse(l) as Record<string, unknown>);
    for (const k of kids) k.stdin!.end();
    expect(claims.filter((c) => 'runId' in c)).toHaveLength(1);
    expect(claims.filter((c) => 'inProgress' in c)).toHaveLength(3);
    expect(db.prepare(`SELECT count(*) AS n FROM job_runs WHERE scheduled_run = 'prune:agent:7'`).get()).toEqual({ n: 1 });
  });
});
