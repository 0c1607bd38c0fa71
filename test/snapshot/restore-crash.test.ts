import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { JOBS } from '../../jobs/index.js';
import { spawn } from 'node:child_process';
import { chmodSync, chownSync, existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { runJob } from '../../src/job/runner.js';
import { silentLogger } from '../../src/log/logger.js';
import { openStore } from '../../src/layouts/open.js';
import { deleteWithCascade } from '../../src/layouts/warden/delete.js';
import { restoreSnapshot } from '../../src/snapshot/restore.js';
import { journalPath, type RestoreJournal } from '../../src/snapshot/journal.js';
import { startWorker } from '../../src/queue/worker.js';
import { finishPendingRestore } from '../../src/snapshot/resume.js';
import { finishInterruptedRestores } from '../../src/snapshot/restore.js';
import { validateConfig } from '../../src/config/config.js';
import type { SnapshotResult } from '../../src/snapshot/create.js';
import { CLI } from '../helpers/cli.js';
import { ids, insertRows, type Row } from '../helpers/store.js';
import { startFaultProxy, type FaultProxy } from '../helpers/qdrant-server.js';
import { qdrantFixture, type QdrantFixture } from '../helpers/qdrant-store.js';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from '../helpers/redis.js';

const T0 = Date.parse('2026-11-29T06:00:00Z');
const ROWS: Row[] = Array.from({ length: 12 }, (_, i) => ({ id: `m_${i}` }));
const ORIGINAL = ROWS.map((r) => r.id).sort();
const CHANGED = ['after', ...ORIGINAL.slice(6)].sort();

let fx: QdrantFixture;
let proxy: FaultProxy | undefined;
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
  await fx.close();
});

function start(args: string[]) {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...process.env, LOG_LEVEL: 'silent', MEMORY_WARDEN_STATE: join(fx.dir, 'state.db') },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }>((resolve) =>
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr })),
  );
  return { child, done };
}
const cli = async (args: string[]) => start(args).done;

/** Two collections, a snapshot of ORIGINAL, then both stores changed to CHANGED. */
async function snapshotThenChange(): Promise<SnapshotResult> {
  fx = await qdrantFixture(ROWS, { collections: 2 });
  await fx.seedPoints(ROWS);
  const s = (await runJob('snapshot', { store: 'agent' }, { jobs: JOBS, config: fx.config(), log: silentLogger, now: () => T0, record: false })) as SnapshotResult;
  const store = openStore(fx.config(), 'agent');
  try {
    await deleteWithCascade(store.db, ORIGINAL.slice(0, 6), { vectors: store.vectors });
    insertRows(store.db, [{ id: 'after' }]);
  } finally {
    store.close();
  }
  await fx.seedPoints([{ id: 'after' }]);
  return s;
}

async function state(): Promise<{ rows: string[]; points: string[][] }> {
  return { rows: ids(fx.dbPath).sort(), points: await Promise.all(fx.collections.map((c) => fx.pointRows(c))) };
}
const both = (rows: string[]) => ({ rows, points: [rows, rows] });
const staging = () => readdirSync(dirname(fx.dbPath)).filter((n) => n.startsWith(`.${basename(fx.dbPath)}.restore-`));
const journal = (): RestoreJournal => JSON.parse(readFileSync(journalPath(fx.dbPath), 'utf8')) as RestoreJournal;
async function serverSnapshots(): Promise<string[]> {
  return (await Promise.all(fx.collections.map((c) => fx.q.snapshotNames(c)))).flat();
}

/** Start `restore` in a child, wait until the test server holds `collection`'s upload, then kill -9 the child. */
async function killDuringRecovery(dir: string, collection: string, config = fx.configFile()): Promise<{ release(): void }> {
  const hold = fx.q.server!.holdNextRecovery(collection);
  const run = start(['restore', dir, '--config', config, '--store', 'agent', '--now', '2026-11-29T07:00:00Z']);
  const early = run.done.then((r) => {
    throw new Error(`restore exited before the recovery was held: ${r.code} ${r.stderr}`);
  });
  await Promise.race([hold.reached, early]);
  run.child.kill('SIGKILL');
  expect((await run.done).signal).toBe('SIGKILL');
  return hold;
}

/** What every finished restore leaves: the snapshot's rows and points, no journal, no staging copy, no upload. */
async function expectRestored(rows: string[]): Promise<void> {
  expect(await state()).toEqual(both(rows));
  expect(existsSync(journalPath(fx.dbPath))).toBe(false);
  expect(staging()).toEqual([]);
  expect(await serverSnapshots()).toEqual([]);
}

describe('kill -9 during restore', { timeout: 120_000 }, () => {
  it('during a slow collection recovery: check reports it (no orphan advice), writers are refused, the next restore finishes it', async () => {
    const s = await snapshotThenChange();
    chmodSync(fx.dbPath, 0o640);
    const config = fx.configFile();
    const hold = await killDuringRecovery(s.dir, fx.collections[0]!, config);
    expect(journal()).toMatchObject({ from: s.dir, direction: 'forward', recovered: [], sqliteDone: false });
    expect(staging()).toHaveLength(1); // the killed run's copy of the snapshot's store
    hold.release(); // Qdrant finishes the recovery its client no longer waits for: one collection is the snapshot's
    await expect.poll(() => fx.pointRows(fx.collections[0])).toEqual(ORIGINAL);

    const check = await cli(['check', '--config', config, '--store', 'agent', '--json']);
    expect(check.code, check.stderr).toBe(1);
    const report = JSON.parse(check.stdout) as { problems: { code: string; message: string }[] };
    // The command that finishes it names the store as the interrupted restore was told it: with its config file.
    expect(report.problems[0]).toMatchObject({ code: 'restore_pending', message: expect.stringContaining(`memory-warden restore ${s.dir} --config ${config} --store agent`) });
    const finish = /`memory-warden (restore [^`]+)`/.exec(report.problems[0]!.message)![1]!.split(' ');
    expect(report.problems.map((p) => p.code)).not.toContain('orphan_points');

    const prune = await cli(['run', 'prune', '--config', config, '--store', 'agent']);
    expect(prune.code).not.toBe(0);
    expect(prune.stderr).toMatch(/restore .* was interrupted/);
    const repair = await cli(['repair', 'orphans', '--config', config, '--store', 'agent']);
    expect(repair.code).not.toBe(0);
    expect(repair.stderr).toMatch(/restore .* was interrupted/);

    const again = await cli([...finish, '--now', '2026-11-29T07:05:00Z']); // run as printed
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toMatch(/finishing the restore/);
    expect(again.stdout).toMatch(/removed 1 staging copy/);
    await expectRestored(ORIGINAL);
    expect(statSync(fx.dbPath).mode & 0o777).toBe(0o640);
    expect((await cli(['check', '--config', config, '--store', 'agent'])).code).toBe(0);
  });

  it('after the last upload was applied but before the answer (stalled): the next restore of another snapshot finishes this one first', async () => {
    const s = await snapshotThenChange();
    proxy = await startFaultProxy(fx.q.url);
    proxy.fail({ method: 'POST', path: new RegExp(`/collections/${fx.collections[1]}/snapshots/upload$`), mode: 'stall' });
    const stalled = proxy.nextFault();
    const run = start(['restore', s.dir, '--config', fx.configFile({ url: proxy.url }), '--store', 'agent', '--now', '2026-11-29T07:00:00Z']);
    await stalled;
    run.child.kill('SIGKILL');
    await run.done;
    expect(journal().recovered).toEqual([fx.collections[0]]);
    const undo = journal().undo!;
    expect(ids(fx.dbPath).sort()).toEqual(CHANGED); // SQLite not swapped yet

    // Asking for the pre-restore snapshot: the interrupted restore is finished first, then this one is done.
    const r = await cli(['restore', undo, '--config', fx.configFile(), '--store', 'agent', '--now', '2026-11-29T07:10:00Z']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/finishing the restore/);
    await expectRestored(CHANGED);
  });

  it('the snapshot folder gone after the crash: rolls back to the pre-restore snapshot; with that gone too, refuses and changes nothing', async () => {
    const s = await snapshotThenChange();
    const hold = await killDuringRecovery(s.dir, fx.collections[1]!);
    hold.release();
    const undo = journal().undo!;
    expect(journal().recovered).toEqual([fx.collections[0]]);
    rmSync(s.dir, { recursive: true });

    const copy = join(undo, 'store.db');
    const bytes = readFileSync(copy);
    writeFileSync(copy, 'not the copy any more'); // the pre-restore snapshot no longer verifies either
    const config = fx.config();
    await expect(finishPendingRestore(config, 'agent', { now: () => T0, log: silentLogger })).rejects.toThrow(/neither finishing nor rolling back is possible: nothing was changed/);
    expect(journal().recovered).toEqual([fx.collections[0]]);
    expect(ids(fx.dbPath).sort()).toEqual(CHANGED);
    expect(await fx.pointRows(fx.collections[0])).toEqual(ORIGINAL);

    writeFileSync(copy, bytes);
    const r = await cli(['restore', undo, '--config', fx.configFile(), '--store', 'agent']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/rolling back the restore/);
    await expectRestored(CHANGED);
  });

  it('a worker start finishes it, rolling back when the snapshot no longer verifies', async () => {
    redis = redis ?? (await startTestRedis());
    const s = await snapshotThenChange();
    const hold = await killDuringRecovery(s.dir, fx.collections[1]!);
    hold.release();
    await expect.poll(() => fx.pointRows(fx.collections[1])).toEqual(ORIGINAL);
    const m = join(s.dir, 'store.db');
    writeFileSync(m, Buffer.concat([readFileSync(m), Buffer.from('x')])); // the snapshot no longer verifies

    const prefix = uniquePrefix('restore');
    prefixes.push(prefix);
    const config = validateConfig({ ...fx.raw(), redis: { url: redis.url, prefix } });
    const w = await startWorker({ jobs: JOBS, config, log: silentLogger, now: () => T0 + 7_200_000 });
    try {
      await expectRestored(CHANGED);
    } finally {
      await w.shutdown('test');
    }
  });

  it('killed between the store file swap and its journal entry: the swap is done again from the snapshot, stale copies removed', async () => {
    const s = await snapshotThenChange();
    chownSync(fx.dbPath, 4321, 4322);
    chmodSync(fx.dbPath, 0o640);
    const config = fx.config();
    await restoreSnapshot(config, 'agent', s.dir, { now: () => T0 + 3_600_000, log: silentLogger });
    await expectRestored(ORIGINAL);
    const st = statSync(fx.dbPath);
    expect([st.mode & 0o777, st.uid, st.gid]).toEqual([0o640, 4321, 4322]);

    // The state a kill -9 right after the rename leaves: every step done, the journal not told of the last.
    const j: RestoreJournal = {
      format: 'memory-warden-restore/1', store: 'agent', from: s.dir, undo: null, direction: 'forward', recovered: [...fx.collections],
      sqliteDone: false, file: { mode: 0o640, uid: 4321, gid: 4322 }, pid: 999999, startedAt: new Date(T0).toISOString(),
    };
    writeFileSync(journalPath(fx.dbPath), JSON.stringify(j), { mode: 0o600 });
    writeFileSync(join(dirname(fx.dbPath), `.${basename(fx.dbPath)}.restore-999999`), 'half a copy');
    const r = await restoreSnapshot(config, 'agent', s.dir, { now: () => T0 + 7_200_000, log: silentLogger });
    expect(r.steps.join('\n')).toMatch(/finishing the restore/);
    await expectRestored(ORIGINAL);
    const after = statSync(fx.dbPath);
    expect([after.mode & 0o777, after.uid, after.gid]).toEqual([0o640, 4321, 4322]);

    // Killed while taking the pre-restore snapshot: a staging copy and no journal; the worker start removes it.
    writeFileSync(join(dirname(fx.dbPath), `.${basename(fx.dbPath)}.restore-999998`), 'a whole copy of the store');
    await finishInterruptedRestores(config, silentLogger, () => T0);
    expect(staging()).toEqual([]);
    expect(ids(fx.dbPath).sort()).toEqual(ORIGINAL);
  });
});

let redis: TestRedis | undefined;
const prefixes: string[] = [];
afterAll(async () => {
  if (!redis) return;
  for (const p of prefixes) await deletePrefix(redis.client, p);
  await redis.stop();
});
