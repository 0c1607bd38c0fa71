/**
 * `npm run bench:fleet`: a simulated fleet on the local Redis: `--hosts` hosts holding `--stores` stores between
 * them. Each host does what its worker does at start (upserts its stores' schedulers on its queue, the shared
 * queue's global ones, writes a heartbeat); then `memory-warden fleet --json` runs as a whole process. Prints the
 * schedulers upserted and how long that took, the Redis keys and bytes under the prefix, and fleet's time; for
 * several sizes, so growth per host and per store shows. Everything is under a fresh prefix, deleted after.
 * `--load`: then every host but `--silent` idles as its worker does for `--window` seconds, Redis commands counted
 * per store and second, and a fleet digest runs with the silent hosts' sections waited for `--host-timeout` s.
 *
 *   npm run bench:fleet [-- --sizes 10x100,20x200,40x400 --runs 3]
 *   npm run bench:fleet -- --sizes 100x1000 --load [--silent 5 --window 60 --host-timeout 20]
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { loadConfig } from '../src/config/config.js';
import { JOBS } from '../jobs/index.js';
import { silentLogger } from '../src/log/logger.js';
import { planSchedulers, syncSchedulers } from '../src/queue/schedules.js';
import { openHostQueue, openQueue } from '../src/queue/queues.js';
import { writeHeartbeat } from '../src/queue/fleet.js';
import { storesOn } from '../src/queue/hosts.js';
import { runLoad } from './fleet-load.js';

const args = process.argv.slice(2);
const arg = (name: string, fallback: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1]! : fallback;
};
const SIZES = arg('sizes', '10x100,20x200,40x400').split(',').map((s) => s.split('x').map(Number) as [number, number]);
const RUNS = Number(arg('runs', '3'));
const LOAD = args.includes('--load');
const SILENT = Number(arg('silent', '5'));
const WINDOW_S = Number(arg('window', '60'));
const HOST_TIMEOUT_S = Number(arg('host-timeout', '20'));
const URL_ = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
const CLI = join(resolve(fileURLToPath(new URL('../..', import.meta.url))), 'dist/src/cli.js');

async function keysUnder(redis: Redis, prefix: string): Promise<{ keys: number; bytes: number }> {
  let cursor = '0';
  let keys = 0;
  let bytes = 0;
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
    cursor = next;
    for (const k of batch) {
      keys += 1;
      bytes += Number((await redis.call('MEMORY', 'USAGE', k)) ?? 0);
    }
  } while (cursor !== '0');
  return { keys, bytes };
}

async function deleteUnder(redis: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
    cursor = next;
    if (batch.length > 0) await redis.del(...batch);
  } while (cursor !== '0');
}

async function one(hosts: number, stores: number): Promise<string> {
  const prefix = `mw-bench-fleet-${process.pid}-${hosts}x${stores}`;
  const dir = mkdtempSync(join(tmpdir(), 'mw-bench-fleet-'));
  const storeConf = Object.fromEntries(Array.from({ length: stores }, (_, i) => [`s${i}`, { db: join(dir, 'stores', `s${i}.db`), host: `h${i % hosts}` }]));
  const file = join(dir, 'fleet.yaml');
  writeFileSync(file, JSON.stringify({ stateDb: join(dir, 'state.db'), redis: { url: URL_, prefix }, stores: storeConf }));
  const redis = new Redis(URL_, { maxRetriesPerRequest: null });
  try {
    const t0 = performance.now();
    let upserted = 0;
    for (let h = 0; h < hosts; h++) {
      const config = loadConfig({ file, overrides: { worker: { host: `h${h}` } } });
      const planned = planSchedulers(config, JOBS);
      const shared = openQueue(config, redis);
      const own = openHostQueue(config, redis, `h${h}`);
      upserted += (await syncSchedulers(shared, config, planned, silentLogger, null)).upserted.length;
      upserted += (await syncSchedulers(own, config, planned, silentLogger, `h${h}`)).upserted.length;
      await writeHeartbeat(redis, prefix, { host: `h${h}`, version: 'bench', pid: 0, startedAt: new Date().toISOString(), lastSeen: new Date().toISOString(), stores: storesOn(config, `h${h}`) });
      await shared.close();
      await own.close();
    }
    const startMs = performance.now() - t0;
    const { keys, bytes } = await keysUnder(redis, prefix);
    const times: number[] = [];
    for (let r = 0; r < RUNS; r++) {
      const t = performance.now();
      const p = spawnSync(process.execPath, [CLI, 'fleet', '--json', '--config', file], { encoding: 'utf8', env: { ...process.env, LOG_LEVEL: 'silent', MEMORY_WARDEN_HOST: 'ops' } });
      times.push(performance.now() - t);
      if (p.status !== 0 && p.status !== 1) throw new Error(`fleet exited ${p.status}: ${p.stderr}`);
    }
    const median = [...times].sort((a, b) => a - b)[Math.floor(times.length / 2)]!;
    const row = `| ${hosts} | ${stores} | ${upserted} | ${(startMs / 1000).toFixed(2)} s | ${keys} (${(keys / stores).toFixed(1)}/store) | ${(bytes / 1024).toFixed(0)} KiB (${(bytes / stores / 1024).toFixed(1)} KiB/store) | ${(median / 1000).toFixed(2)} s |`;
    if (!LOAD) return row;
    const load = await runLoad(file, URL_, hosts, { silent: SILENT, windowMs: WINDOW_S * 1000, hostTimeoutSeconds: HOST_TIMEOUT_S, dir });
    const after = await keysUnder(redis, prefix);
    return `${row}\nidle fleet (${hosts - SILENT} hosts running, ${WINDOW_S} s): ${load.commandsPerSecond.toFixed(0)} Redis commands per second, ` +
      `${(load.commandsPerSecond / (hosts - SILENT)).toFixed(2)} per running host, ${(load.commandsPerSecond / stores).toFixed(3)} per store; ` +
      `after the digest ${after.keys} keys, ${(after.bytes / 1024).toFixed(0)} KiB (${(after.bytes / stores / 1024).toFixed(1)} KiB/store); ` +
      `fleet digest with ${SILENT} silent hosts (host-timeout ${HOST_TIMEOUT_S} s): ${load.digestSeconds.toFixed(1)} s, ${load.digestStatus}`;
  } finally {
    await deleteUnder(redis, prefix);
    redis.disconnect();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  console.log(`fleet on ${URL_.replace(/\/\/[^@]*@/, '//***@')}, node ${process.version}, ${RUNS} fleet runs each (median)`);
  console.log('| hosts | stores | schedulers upserted | all hosts\' start-up sync | Redis keys | Redis memory | `fleet --json` |');
  console.log('|---|---|---|---|---|---|---|');
  for (const [hosts, stores] of SIZES) console.log(await one(hosts, stores));
}

main().catch((err) => {
  console.error(`bench:fleet: ${(err as Error).message}`);
  process.exit(1);
});
