import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CLI } from '../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../helpers/pg.js';
import { assertBuilt } from '../queue/fixtures.js';
import { chainedPgStore, fillPgStore, ids, initPgStore, pgStoreConfig } from './pg-fixture.js';

const AGENT = fileURLToPath(new URL('../../dist/bench/pg-agent.js', import.meta.url));
const PG_KILL_AT = fileURLToPath(new URL('../helpers/pg-kill-at.cjs', import.meta.url));

/**
 * A PostgreSQL store is one database every host reaches: prune runs beside agents writing over their own connections,
 * and two maintenance processes never prune the same schema at once (the advisory lock), a killed holder's lock
 * released by the server. Real processes on the native server; correctness only, no duration asserted.
 */
describe('PostgreSQL store beside agents and other workers', { timeout: 180_000 }, () => {
  let db: TestDatabase;
  const children: ChildProcess[] = [];
  beforeAll(() => assertBuilt());
  afterEach(async () => {
    for (const c of children.splice(0)) if (c.exitCode === null) c.kill('SIGKILL');
    await db?.drop();
  });

  function start(args: string[], env: Record<string, string>): { child: ChildProcess; out: Promise<string>; code: Promise<number> } {
    const child = spawn(process.execPath, args, { env: { ...process.env, ...env, LOG_LEVEL: 'silent' }, stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let out = '';
    let err = '';
    child.stdout!.setEncoding('utf8').on('data', (c: string) => (out += c));
    child.stderr!.setEncoding('utf8').on('data', (c: string) => (err += c));
    const code = new Promise<number>((resolve) => child.once('close', (c) => resolve(c ?? -1)));
    return { child, out: code.then(() => out + err), code };
  }

  it('prune beside four agents inserting and superseding: no agent error, nothing live deleted, everything due gone', async () => {
    db = await createTestDatabase('pg_agents');
    const { store, keep: kept } = await chainedPgStore(db, { batchSize: 100 }, { live: 500, expired: 8000, old: 2000 }, { chains: 40, depth: 25 });
    const agents = [1, 2, 3, 4].map((n) => start([AGENT, db.url, 'fleet', `agent${n}`, '1'], {}));
    // Each agent connected and writing before prune starts.
    await Promise.all(agents.map(({ child }) => new Promise((resolve) => child.stdout!.once('data', resolve))));
    const prune = start([CLI, 'run', 'prune', '--config', store.config, '--json'], store.env);
    expect(await prune.code, await prune.out).toBe(0);
    for (const a of agents) a.child.kill('SIGTERM');
    const reports = await Promise.all(agents.map(async (a) => JSON.parse((await a.out).trim().split('\n').at(-1)!) as { writes: number; errors: string[]; live: string[]; superseded: number }));
    for (const r of reports) {
      expect(r.errors).toEqual([]);
      expect(r.writes).toBeGreaterThan(0);
    }
    const left = new Set(await ids(db, 'fleet'));
    for (const id of [...kept, ...reports.flatMap((r) => r.live)]) expect(left.has(id), id).toBe(true);
    expect(await ids(db, 'fleet', `id LIKE 'exp-%' OR id LIKE 'old-%' OR id LIKE 'chx-%'`)).toEqual([]);
    // What the agents superseded stays until it is old enough: versions of recent facts are not pruned.
    expect(reports.reduce((n, r) => n + r.superseded, 0)).toBeGreaterThan(0);
    const liveNow = await ids(db, 'fleet', 'superseded_by IS NULL');
    expect(liveNow.length).toBe(kept.length + reports.reduce((n, r) => n + r.live.length, 0));
  });

  it('two processes never prune one schema at once: the second is refused while the first holds the advisory lock; kill -9 frees it', async () => {
    db = await createTestDatabase('pg_lock');
    const store = pgStoreConfig(db);
    await initPgStore(store);
    await fillPgStore(db, 'fleet', { live: 50, expired: 2_000 });
    const kept = await ids(db, 'fleet', `id LIKE 'live-%'`);
    // The first holds at its first call of the walk (its lock taken), for as long as the test needs
    // (test/helpers/pg-kill-at.cjs, `hold`): a second process meets it there however slowly either starts.
    const held = join(store.dir, 'held');
    const first = start([CLI, 'run', 'prune', '--config', store.config], { ...store.env, NODE_OPTIONS: `--require ${PG_KILL_AT}`,
      MW_PG_KILL_AT: JSON.stringify({ sql: 'CALL pg_temp\\.mw_prune_walk', nth: 1, when: 'hold', held }) });
    while (!existsSync(held) && first.child.exitCode === null) await new Promise((r) => setTimeout(r, 20));
    expect(existsSync(held), 'the first prune never reached its walk').toBe(true);
    const second = start([CLI, 'run', 'prune', '--config', store.config], store.env);
    expect(await second.code).toBe(2);
    const lines = (await second.out).split('\n').filter((l) => l.startsWith('memory-warden:'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('another maintenance job holds this store\'s lock (a PostgreSQL advisory lock');
    expect(first.child.exitCode).toBe(null);
    first.child.kill('SIGKILL');
    await first.code;
    const third = start([CLI, 'run', 'prune', '--config', store.config], store.env);
    expect(await third.code, await third.out).toBe(0);
    expect(await ids(db, 'fleet')).toEqual(kept);
  });
});
