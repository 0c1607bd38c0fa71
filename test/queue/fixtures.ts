import { afterAll, afterEach, beforeAll } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import type { Redis } from 'ioredis';
import { Queue } from 'bullmq';
import { createRedis } from '../../src/queue/connection.js';
import { deletePrefix, startTestRedis, uniquePrefix, type TestRedis } from '../helpers/redis.js';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { loadConfig, type Config } from '../../src/config/config.js';
import { openDatabase } from '../../src/store/sqlite.js';
import { initSchema } from '../../src/layouts/warden/schema.js';

/** Shared by the queue tests: temp stores, temp configs, spawned workers reading their JSON log lines. */

export const ROOT = resolve(import.meta.dirname, '../..');
export const CLI = join(ROOT, 'dist/src/cli.js');

export function assertBuilt(): void {
  if (!existsSync(join(ROOT, 'dist/src/commands/worker.js'))) throw new Error('dist/ is missing the worker: build first (npx tsc -p .)');
}

export function tempDir(name: string): string {
  return mkdtempSync(join(tmpdir(), `mw-${name}-`));
}

/** A store made by the real schema code, with `expired` rows past their expiry and `live` rows that stay. */
export function makeStore(path: string, rows: { expired?: number; live?: number } = {}): string {
  const db = openDatabase(path, { create: true });
  try {
    initSchema(db, path);
    const insert = db.prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`);
    db.transaction(() => {
      for (let i = 0; i < (rows.expired ?? 0); i++) insert.run(`x_${i}`, 'trip', `travelling this week (${i})`, 'message', '2026-01-01 00:00:00', '2026-01-01 00:00:00', '2026-01-08 00:00:00');
      for (let i = 0; i < (rows.live ?? 0); i++) insert.run(`l_${i}`, 'tools', `prefers pnpm (${i})`, 'message', '2026-01-01 00:00:00', '2026-01-01 00:00:00', null);
    })();
  } finally {
    db.close();
  }
  return path;
}

/**
 * The store's rows, read by the test beside the processes under test. SQLite answers a reader SQLITE_PROTOCOL when
 * the WAL's shared-memory locks stay contended through its own retries (writers in other processes, a loaded
 * machine): the test's own look is tried again then, a few times, not failed.
 */
export function countRows(path: string, where = '1'): number {
  for (let attempt = 1; ; attempt++) {
    try {
      const db = openDatabase(path, { readonly: true });
      try {
        return (db.prepare(`SELECT count(*) AS n FROM memory WHERE ${where}`).get() as { n: number }).n;
      } finally {
        db.close();
      }
    } catch (err) {
      if ((err as { code?: string }).code !== 'SQLITE_PROTOCOL' || attempt === 5) throw err;
    }
  }
}

export interface TestConfigInput {
  dir: string;
  redisUrl: string;
  prefix: string;
  stores: Record<string, string>;
  /** Merged over the test defaults below (all schedules off, http on a free port, fast retries). */
  worker?: Record<string, unknown>;
  prune?: Record<string, unknown>;
  name?: string;
}

/** Writes a config file (JSON is YAML) and returns its path. Every schedule is off unless the test turns it on. */
export function writeConfig(input: TestConfigInput): string {
  const off = { enabled: false };
  const worker = {
    host: 'solo', // one host, whatever this machine is called (fleet tests name their own)
    http: { port: 0 },
    concurrency: 1,
    attempts: 3,
    backoff: { type: 'fixed', delayMs: 50 },
    shutdownTimeoutMs: 20_000,
    ...input.worker,
    schedules: { snapshot: off, prune: off, integrity: off, digest: off, drift: off, ...(input.worker?.schedules as object | undefined) },
  };
  const config = {
    stateDb: join(input.dir, 'state.db'),
    log: { level: 'info' },
    redis: { url: input.redisUrl, prefix: input.prefix },
    worker,
    ...(input.prune ? { prune: input.prune } : {}),
    stores: Object.fromEntries(Object.entries(input.stores).map(([name, db]) => [name, { db }])),
  };
  const file = join(input.dir, `${input.name ?? 'config'}.yaml`);
  writeFileSync(file, JSON.stringify(config, null, 2));
  return file;
}

/**
 * A fleet of two hosts in `dir`: store b1 (`live` rows) on host b, a1 on host a, each machine's state db in its own
 * folder (`dir/a`, `dir/b`, through STATE_DIR). Returns b1's path, the config file and each machine's environment.
 */
export function writeTwoHostFleet(input: { dir: string; redisUrl: string; prefix: string; live?: number; worker?: Record<string, unknown> }) {
  const { dir } = input;
  for (const h of ['a', 'b']) mkdirSync(join(dir, h));
  const db = makeStore(join(dir, 'b', 'b1.db'), { live: input.live ?? 1 });
  const off = { enabled: false };
  const file = join(dir, 'fleet.yaml');
  writeFileSync(file, JSON.stringify({
    stateDb: '${STATE_DIR}/state.db',
    log: { level: 'info' },
    redis: { url: input.redisUrl, prefix: input.prefix },
    worker: { http: { port: 0 }, heartbeatMs: 200, ...input.worker, schedules: { prune: off, integrity: off, snapshot: off, digest: off, drift: off } },
    stores: { b1: { db, host: 'b' }, a1: { db: makeStore(join(dir, 'a', 'a1.db')), host: 'a' } },
  }));
  return { db, file, onA: { STATE_DIR: join(dir, 'a'), MEMORY_WARDEN_HOST: 'a' }, onB: { STATE_DIR: join(dir, 'b'), MEMORY_WARDEN_HOST: 'b' } };
}

export function loadTestConfig(input: TestConfigInput): Config {
  return loadConfig({ file: writeConfig(input) });
}

/** Poll until `fn` returns something truthy; fails with `what` after `timeoutMs`. Polls, never sleeps for time to pass. */
export async function until<T>(what: string, fn: () => T | Promise<T>, timeoutMs = 15_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

export interface LogLine {
  level: number;
  time: number;
  pid: number;
  msg: string;
  [key: string]: unknown;
}

export interface SpawnedWorker {
  proc: ChildProcess;
  lines: LogLine[];
  stderr: () => string;
  /** Resolves on the worker's `process.send('ready')`, as pm2's wait_ready sees it. */
  ready: Promise<void>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  waitFor(what: string, pred: (l: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>;
}

/** `node dist/src/cli.js worker --config FILE`, with an IPC channel for the ready message and JSON logs on stderr. */
export function spawnWorker(configPath: string, args: string[] = ['worker'], env: NodeJS.ProcessEnv = {}): SpawnedWorker {
  const proc = spawn(process.execPath, [CLI, ...args, '--config', configPath], {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: 'info', REDIS_URL: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  const lines: LogLine[] = [];
  let raw = '';
  let partial = '';
  proc.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    raw += chunk;
    partial += chunk;
    const parts = partial.split('\n');
    partial = parts.pop() ?? '';
    for (const p of parts) {
      try {
        lines.push(JSON.parse(p) as LogLine);
      } catch {
        // not a log line (e.g. the one-line fatal message)
      }
    }
  });
  proc.stdout!.resume();
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => proc.once('exit', (code, signal) => r({ code, signal })));
  const ready = new Promise<void>((res, rej) => {
    proc.on('message', (m) => m === 'ready' && res());
    exited.then(({ code, signal }) => rej(new Error(`worker exited (${code ?? signal}) before ready: ${raw.slice(-2000)}`)));
  });
  ready.catch(() => {});
  return {
    proc,
    lines,
    stderr: () => raw,
    ready,
    exited,
    waitFor: (what, pred, timeoutMs = 15_000) =>
      until(what, () => {
        if (proc.exitCode !== null && !lines.some(pred)) throw new Error(`worker exited before ${what}: ${raw.slice(-2000)}`);
        return lines.find(pred);
      }, timeoutMs),
  };
}

/**
 * Stops a worker process with SIGSTOP and returns once it is stopped: it lives and holds what it held (its run, its
 * locks) for as long as the test says, whatever either side's speed; SIGCONT resumes it. Controls a race a test
 * means to show one side of, instead of waiting for that side to win.
 */
export async function stopProcess(w: SpawnedWorker): Promise<void> {
  w.proc.kill('SIGSTOP');
  // /proc/PID/stat: "pid (comm) state …"; the name may hold parentheses, the state follows the last one.
  const stateOf = () => {
    const stat = readFileSync(`/proc/${w.proc.pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  };
  await until('the worker to stop', () => stateOf() === 'T');
}

/** SIGKILL whatever is still running (after a failed test), so no worker outlives its test file. */
export async function killAll(workers: SpawnedWorker[]): Promise<void> {
  for (const w of workers) if (w.proc.exitCode === null && w.proc.signalCode === null) w.proc.kill('SIGKILL');
  await Promise.all(workers.map((w) => w.exited));
}

/**
 * The real Redis and the worker processes of one describe block: every worker still running is killed, every queue
 * a test opened is closed and every prefix handed out is deleted after each test. Call inside `describe`.
 */
export function useWorkerProcesses(): { redis: () => TestRedis; workers: SpawnedWorker[]; prefix(name: string): string; queue(name: string, prefix: string): Queue } {
  let redis: TestRedis | undefined;
  let conn: Redis | undefined;
  const workers: SpawnedWorker[] = [];
  const queues: Queue[] = [];
  const prefixes: string[] = [];
  beforeAll(async () => {
    assertBuilt();
    redis = await startTestRedis();
    conn = createRedis(redis.url);
    await conn.connect();
  });
  afterEach(async () => {
    await killAll(workers.splice(0));
    for (const q of queues.splice(0)) await q.close();
    for (const p of prefixes.splice(0)) await deletePrefix(redis!.client, p);
  });
  afterAll(async () => {
    await conn?.quit();
    await redis?.stop();
  });
  return {
    redis: () => redis!,
    workers,
    prefix(name) {
      const p = uniquePrefix(name);
      prefixes.push(p);
      return p;
    },
    /** A BullMQ queue on the block's own connection, as a test adds jobs to it. */
    queue(name, prefix) {
      const q = new Queue(name, { connection: conn!, prefix });
      q.on('error', () => {});
      queues.push(q);
      return q;
    },
  };
}

/** The first key under `prefix` whose value holds `text` (hash, string, list, sorted set, stream), or null. */
export async function keyHolding(client: Redis, prefix: string, text: string): Promise<string | null> {
  for (const [k, dump] of await redisDump(client, prefix)) if (dump.includes(text)) return k;
  return null;
}

/** Every key under `prefix` with its value as text (hash, string, list, sorted set, stream; a set's members too). */
export async function redisDump(client: Redis, prefix: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const k of await client.keys(`${prefix}:*`)) {
    const type = await client.type(k);
    out.set(k, type === 'hash' ? JSON.stringify(await client.hgetall(k)) : type === 'string' ? String(await client.get(k))
      : type === 'list' ? JSON.stringify(await client.lrange(k, 0, -1)) : type === 'zset' ? JSON.stringify(await client.zrange(k, 0, -1))
      : type === 'set' ? JSON.stringify(await client.smembers(k))
      : type === 'stream' ? JSON.stringify(await client.xrange(k, '-', '+')) : '');
  }
  return out;
}
