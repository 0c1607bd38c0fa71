import { afterEach, describe, expect, it } from 'vitest';
import { JOBS } from '../../jobs/index.js';
import { spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { runJob } from '../../src/job/runner.js';
import { silentLogger } from '../../src/log/logger.js';
import { verifySnapshot } from '../../src/snapshot/restore.js';
import type { SnapshotResult } from '../../src/snapshot/create.js';
import { CLI } from '../helpers/cli.js';
import { ids, type Row } from '../helpers/store.js';
import { startFaultProxy, type FaultProxy } from '../helpers/qdrant-server.js';
import { qdrantFixture, type QdrantFixture } from '../helpers/qdrant-store.js';

const T0 = Date.parse('2026-11-29T06:00:00Z');
const ROWS: Row[] = Array.from({ length: 8 }, (_, i) => ({ id: `m_${i}` }));

let fx: QdrantFixture;
let proxy: FaultProxy | undefined;
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
  await fx.close();
});

/** The built CLI in a child process, asynchronously: the Qdrant test server lives in this process. */
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

const snap = (at: number, url?: string) =>
  runJob('snapshot', { store: 'agent' }, { jobs: JOBS, config: fx.config(url ? { url } : {}), log: silentLogger, now: () => at, record: false }) as Promise<SnapshotResult>;
const backups = () => join(fx.dir, 'backups', 'agent');
const published = () => readdirSync(backups()).filter((n) => !n.startsWith('.')).sort();

describe('kill -9 during a snapshot', () => {
  it('leaves no folder that looks complete, keeps the older snapshot, and the next run cleans up', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const first = await snap(T0);
    proxy = await startFaultProxy(fx.q.url);
    proxy.fail({ method: 'GET', path: /\/snapshots\/[^/]+$/, mode: 'stall' });
    const stalled = proxy.nextFault();
    const run = start(['run', 'snapshot', '--config', fx.configFile({ url: proxy.url }), '--store', 'agent', '--now', '2026-11-29T07:00:00Z']);
    const early = run.done.then((r) => {
      throw new Error(`snapshot exited before the download stalled: ${r.code} ${r.stderr}`);
    });
    await Promise.race([stalled, early]);
    run.child.kill('SIGKILL');
    const end = await run.done;
    expect(end.signal).toBe('SIGKILL');

    expect(published()).toEqual([first.name]);
    const partial = readdirSync(backups()).filter((n) => n.startsWith('.partial-'));
    expect(partial).toHaveLength(1);
    expect(existsSync(join(backups(), partial[0]!, 'manifest.json'))).toBe(false);
    await verifySnapshot(first.dir);
    expect(await fx.q.snapshotNames(fx.collections[0]!)).toHaveLength(1); // the killed run's server-side copy

    proxy.clear();
    const next = await snap(T0 + 7_200_000);
    expect(published()).toEqual([first.name, next.name]);
    expect(next.removedPartials).toEqual(partial);
    expect(readdirSync(backups()).filter((n) => n.startsWith('.partial-'))).toEqual([]);
    expect(await fx.q.snapshotNames(fx.collections[0]!)).toEqual([]);
  });
});

describe('the CLI', { timeout: 90_000 }, () => {
  it('run snapshot, snapshots list, restore --dry-run and restore', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const config = fx.configFile();
    const made = await cli(['run', 'snapshot', '--config', config, '--store', 'agent', '--now', '2026-11-29T06:00:00Z', '--json']);
    expect(made.code, made.stderr).toBe(0);
    const dir = JSON.parse(made.stdout).dir as string;
    expect(dir).toBe(join(backups(), '2026-11-29T060000Z'));

    const list = await cli(['snapshots', 'list', '--config', config, '--store', 'agent', '--verify', '--json']);
    expect(list.code, list.stderr).toBe(0);
    expect(JSON.parse(list.stdout).snapshots).toMatchObject([{ name: '2026-11-29T060000Z', verified: 'ok', rows: 8, reason: 'scheduled' }]);
    const human = await cli(['snapshots', 'list', '--config', config, '--store', 'agent']);
    expect(human.stdout).toContain('2026-11-29T060000Z  scheduled  rows 8');

    const dry = await cli(['restore', dir, '--config', config, '--store', 'agent', '--dry-run']);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(/would replace/);

    await fx.q.upsert(fx.collections[0]!, [{ id: 999, payload: { memory_id: 'ghost' } }]);
    const done = await cli(['restore', dir, '--config', config, '--store', 'agent', '--now', '2026-11-29T07:00:00Z', '--json']);
    expect(done.code, done.stderr).toBe(0);
    expect(JSON.parse(done.stdout).undo).toMatch(/2026-11-29T070000Z-pre-restore$/);
    expect(await fx.pointRows()).toEqual(ROWS.map((r) => r.id));
    expect(ids(fx.dbPath)).toEqual(ROWS.map((r) => r.id));

    // The undo it prints names the store as the restore was told to (its --config too): pasted, it runs.
    const text = await cli(['restore', dir, '--config', config, '--store', 'agent', '--now', '2026-11-29T08:00:00Z']);
    expect(text.code, text.stderr).toBe(0);
    const undo = /^ {2}to undo: (memory-warden restore .+)$/m.exec(text.stdout)?.[1];
    expect(undo).toBe(`memory-warden restore ${join(backups(), '2026-11-29T080000Z-pre-restore')} --config ${config} --store agent`);
    // In bash, as a person pastes it; asynchronously: the Qdrant test server answers from this process.
    const shell = spawn('bash', ['--norc', '--noprofile', '-c', `memory-warden() { "${process.execPath}" "${CLI}" "$@"; }\n${undo} --dry-run`], {
      cwd: fx.dir, env: { ...process.env, LOG_LEVEL: 'silent', MEMORY_WARDEN_CONFIG: '', MEMORY_WARDEN_STATE: join(fx.dir, 'state.db') },
    });
    let out = '';
    let err = '';
    shell.stdout.on('data', (d) => (out += d));
    shell.stderr.on('data', (d) => (err += d));
    const pasted = await new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => shell.on('close', (status) => resolve({ status, stdout: out, stderr: err })));
    expect(pasted.status, pasted.stderr).toBe(0);
    expect(pasted.stdout).toMatch(/^agent: dry run of restore from .*2026-11-29T080000Z-pre-restore$/m);

    const bad = await cli(['restore', join(backups(), 'nope'), '--config', config, '--store', 'agent']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/manifest/);
  });

  it('check finds orphans (exit 1) and repair orphans deletes them', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints([...ROWS, { id: 'deleted_row' }]);
    const config = fx.configFile();
    const check = await cli(['check', '--config', config, '--store', 'agent', '--json']);
    expect(check.code, check.stderr).toBe(1);
    expect(JSON.parse(check.stdout).problems.map((f: { code: string }) => f.code)).toContain('orphan_points');

    const dry = await cli(['repair', 'orphans', '--config', config, '--store', 'agent', '--dry-run', '--json']);
    expect(JSON.parse(dry.stdout)).toMatchObject({ deleted: 1, dryRun: true });
    const fixed = await cli(['repair', 'orphans', '--config', config, '--store', 'agent']);
    expect(fixed.code, fixed.stderr).toBe(0);
    expect(fixed.stdout).toMatch(/deleted 1 orphan point/);
    expect(await fx.pointRows()).toEqual(ROWS.map((r) => r.id));
    expect((await cli(['check', '--config', config, '--store', 'agent'])).code).toBe(0);
  });
});
