/**
 * The running part of `npm run bench:fleet -- --load`: every host's idle worker loop (its two BullMQ workers, its
 * task lanes, its heartbeat) counted command by command, then one fleet digest with some hosts silent.
 */
import { copyFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'bullmq';
import { Cluster, Redis } from 'ioredis';
import { connectRedis, type RedisTarget } from '../src/queue/connection.js';
import { SMTPServer } from 'smtp-server';
import { loadConfig, type Config } from '../src/config/config.js';
import { JOBS } from '../jobs/index.js';
import { silentLogger } from '../src/log/logger.js';

import { startTaskQueues, type TaskQueues } from '../src/queue/tasks.js';
import { readHeartbeats, writeHeartbeat } from '../src/queue/fleet.js';
import { hostQueueName, storesOn } from '../src/queue/hosts.js';
import { runJob } from '../src/job/runner.js';
import { openDatabase } from '../src/store/sqlite.js';
import { initSchema } from '../src/layouts/warden/schema.js';

/**
 * Every command any ioredis client in this process sends, counted while `counting` is on. A Cluster client sends
 * through one Redis client per node, so its commands (slot refreshes included) are counted here too, once.
 */
const counter = { on: false, commands: 0 };
const send = Redis.prototype.sendCommand;
Redis.prototype.sendCommand = function (this: Redis, ...args: Parameters<typeof send>) {
  if (counter.on) counter.commands += 1;
  return send.apply(this, args);
};

/** The servers that hold keys: the one Redis, or every primary of a cluster (SCAN reads one node only). */
export function serversOf(redis: Redis): Redis[] {
  return redis instanceof Cluster ? (redis as Cluster).nodes('master') : [redis];
}

/**
 * Errors the hosts' BullMQ workers report (a connection lost, a cluster client whose slot refresh timed out on a busy
 * machine): counted, not printed, and shown beside the figures.
 */
export const clientErrors = { count: 0, first: '' };
const noteError = (err: Error) => {
  clientErrors.count += 1;
  clientErrors.first ||= err.message.split('\n')[0]!;
};

interface Host {
  stop(): Promise<void>;
}

/** One host's worker as it idles: the shared and host queues, the task lanes, a heartbeat every worker.heartbeatMs. */
async function startHost(config: Config, target: RedisTarget, host: string): Promise<Host> {
  const redis = await connectRedis(target);
  const stop = new AbortController();
  const kinds = Object.values(JOBS).flatMap((j) => j.tasks?.(config) ?? []);
  const tasks: TaskQueues = await startTaskQueues(config, redis, kinds, silentLogger, stop.signal, host);
  const w = config.worker;
  const workers = [w.queue, hostQueueName(config, host)].map(
    (name) => new Worker(name, async () => undefined, { connection: redis, prefix: config.redis.prefix, concurrency: w.concurrency, lockDuration: w.lockDurationMs, stalledInterval: w.stalledIntervalMs, maxStalledCount: w.maxStalledCount }),
  );
  for (const x of workers) x.on('error', noteError);
  const startedAt = new Date().toISOString();
  const beat = () => writeHeartbeat(redis, config.redis.prefix, { host, version: 'bench', pid: process.pid, startedAt, lastSeen: new Date().toISOString(), stores: storesOn(config, host) });
  await beat();
  const timer = setInterval(() => void beat().catch(() => {}), w.heartbeatMs);
  return {
    async stop() {
      clearInterval(timer);
      stop.abort();
      await Promise.all(workers.map((x) => x.close()));
      await tasks.close();
      redis.disconnect();
    },
  };
}

/** Store files for every store of the config: one small store made by the schema code, copied (none is live). */
export function makeStoreFiles(config: Config, dir: string): void {
  mkdirSync(join(dir, 'stores'), { recursive: true });
  const seed = join(dir, 'seed.db');
  const db = openDatabase(seed, { create: true });
  initSchema(db, seed);
  const insert = db.prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at) VALUES (?, 'tools', ?, 'message', datetime('now', '-1 hour'), datetime('now', '-1 hour'))`);
  for (let i = 0; i < 20; i++) insert.run(`m_${i}`, `prefers pnpm (${i})`);
  db.close();
  for (const s of Object.values(config.stores)) copyFileSync(seed, s.db);
}

async function startSink(): Promise<{ port: number; close(): Promise<void> }> {
  const server = new SMTPServer({ authOptional: true, disabledCommands: ['STARTTLS', 'AUTH'], logger: false, onData: (stream, _s, cb) => stream.on('data', () => {}).on('end', () => cb()) });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.server.address() as { port: number }).port;
  return { port, close: () => new Promise<void>((r) => server.close(() => r())) };
}

export interface LoadFigures {
  commandsPerSecond: number;
  /** On a cluster: each primary's total_commands_processed per second in the window (every client's; a script's calls count). */
  processedPerServer?: number[];
  /** Client connections the Redis servers held at the end of the window (every client's, not only this fleet's). */
  clients: number;
  digestSeconds: number;
  digestStatus: string;
}

/**
 * All hosts but `silent` run their idle loop for `windowMs` while commands are counted; the silent ones wrote one
 * heartbeat long ago. Then a digest of every store runs from a host of its own ("ops") and is timed.
 */
export async function runLoad(file: string, target: RedisTarget, hosts: number, opts: { silent: number; windowMs: number; hostTimeoutSeconds: number; dir: string }): Promise<LoadFigures> {
  const sink = await startSink();
  const overrides = { smtp: { host: '127.0.0.1', port: sink.port, secure: false }, digest: { to: ['ops@example.org'], hostTimeoutSeconds: opts.hostTimeoutSeconds } };
  const base = loadConfig({ file, overrides });
  makeStoreFiles(base, opts.dir);
  const running: Host[] = [];
  const prefix = base.redis.prefix;
  const redis = await connectRedis(target);
  const servers = serversOf(redis);
  const stat = async (field: RegExp) => Promise.all(servers.map(async (s) => Number(field.exec(await s.info())?.[1] ?? NaN)));
  try {
    for (let h = opts.silent; h < hosts; h++) running.push(await startHost(loadConfig({ file, overrides: { ...overrides, worker: { host: `h${h}` } } }), target, `h${h}`));
    const old = new Date(Date.now() - 3_600_000).toISOString();
    for (let h = 0; h < opts.silent; h++) await writeHeartbeat(redis, prefix, { host: `h${h}`, version: 'bench', pid: 0, startedAt: old, lastSeen: old, stores: storesOn(base, `h${h}`) });
    const processed = /total_commands_processed:(\d+)/;
    const before = await stat(processed);
    counter.commands = 0;
    counter.on = true;
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, opts.windowMs));
    counter.on = false;
    const seconds = (performance.now() - t0) / 1000;
    const perSecond = counter.commands / seconds;
    const after = await stat(processed);
    const processedPerServer = typeof target === 'string' ? undefined : after.map((n, i) => (n - before[i]!) / seconds);
    const clients = (await stat(/connected_clients:(\d+)/)).reduce((a, b) => a + b, 0);

    const ops = loadConfig({ file, overrides: { ...overrides, worker: { host: 'ops' } } });
    const stop = new AbortController();
    const opsRedis = await connectRedis(target);
    const kinds = Object.values(JOBS).flatMap((j) => j.tasks?.(ops) ?? []);
    const lanes = await startTaskQueues(ops, opsRedis, kinds, silentLogger, stop.signal, 'ops');
    try {
      const fleet = { host: 'ops', redis: opsRedis, lastSeen: async (h: string) => (await readHeartbeats(opsRedis, prefix)).find((b) => b.host === h)?.lastSeen ?? null };
      const t = performance.now();
      const result = (await runJob('digest', {}, { jobs: JOBS, config: ops, log: silentLogger, signal: stop.signal, dispatch: lanes.dispatch, fleet })) as { deliveries: { status: string }[] };
      const digestSeconds = (performance.now() - t) / 1000;
      return { commandsPerSecond: perSecond, processedPerServer, clients, digestSeconds, digestStatus: result.deliveries.map((d) => d.status).join(',') };
    } finally {
      stop.abort();
      await lanes.close();
      opsRedis.disconnect();
    }
  } finally {
    for (const h of running) await h.stop();
    redis.disconnect();
    await sink.close();
  }
}
