/**
 * `npm run bench:fleet`: a simulated fleet on the local Redis: `--hosts` hosts holding `--stores` stores between
 * them. Each host does what its worker does at start (upserts its stores' schedulers on its queue, the shared
 * queue's global ones, writes a heartbeat); then `memory-warden fleet --json` runs as a whole process. Prints the
 * schedulers upserted and how long that took, the Redis keys and bytes under the prefix, and fleet's time; for
 * several sizes, so growth per host and per store shows. Everything is under a fresh prefix, deleted after.
 * `--load`: then every host but `--silent` idles as its worker does for `--window` seconds, Redis commands counted
 * per store and second, and a fleet digest runs with the silent hosts' sections waited for `--host-timeout` s.
 *
 * `--cluster host:port[,…]`: on that Redis Cluster instead (redis.cluster.nodes), the prefix in a {hash tag}; keys
 * and bytes are read on every primary, and the commands each primary processed in the idle window are shown too.
 *
 *   npm run bench:fleet [-- --sizes 10x100,20x200,40x400 --runs 3]
 *   npm run bench:fleet -- --sizes 100x1000 --load [--silent 5 --window 60 --host-timeout 20]
 *   npm run bench:fleet -- --sizes 100x1000 --load --cluster 127.0.0.1:7000
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { loadConfig } from '../src/config/config.js';
import { connectRedis, type RedisTarget } from '../src/queue/connection.js';
import { JOBS } from '../jobs/index.js';
import { silentLogger } from '../src/log/logger.js';
import { planSchedulers, syncSchedulers } from '../src/queue/schedules.js';
import { openHostQueue, openQueue } from '../src/queue/queues.js';
import { writeHeartbeat } from '../src/queue/fleet.js';
import { storesOn } from '../src/queue/hosts.js';
import { clientErrors, runLoad, serversOf } from './fleet-load.js';

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
const CLUSTER = args.includes('--cluster')
  ? arg('cluster', '').split(',').map((n) => ({ host: n.slice(0, n.lastIndexOf(':')), port: Number(n.slice(n.lastIndexOf(':') + 1)) }))
  : undefined;
/** The `redis` config section of the simulated fleet (the prefix added per size). */
const TARGET: RedisTarget = CLUSTER ? { url: URL_, cluster: { nodes: CLUSTER } } : URL_;
const CLI = join(resolve(fileURLToPath(new URL('../..', import.meta.url))), 'dist/src/cli.js');

async function keysUnder(redis: Redis, prefix: string): Promise<{ keys: number; bytes: number; servers: number }> {
  let keys = 0;
  let bytes = 0;
  let servers = 0;
  for (const server of serversOf(redis)) {
    let cursor = '0';
    let here = 0;
    do {
      const [next, batch] = await server.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
      cursor = next;
      for (const k of batch) {
        here += 1;
        bytes += Number((await server.call('MEMORY', 'USAGE', k)) ?? 0);
      }
    } while (cursor !== '0');
    keys += here;
    if (here > 0) servers += 1;
  }
  return { keys, bytes, servers };
}

async function deleteUnder(redis: Redis, prefix: string): Promise<void> {
  for (const server of serversOf(redis)) {
    let cursor = '0';
    do {
      const [next, batch] = await server.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
      cursor = next;
      for (const k of batch) await server.del(k); // one by one: a cluster refuses a DEL across slots
    } while (cursor !== '0');
  }
}

async function one(hosts: number, stores: number): Promise<string> {
  // On a cluster every key of the fleet must be in one slot: the prefix is a hash tag.
  const prefix = CLUSTER ? `{mw-bench-fleet-${process.pid}-${hosts}x${stores}}` : `mw-bench-fleet-${process.pid}-${hosts}x${stores}`;
  const dir = mkdtempSync(join(tmpdir(), 'mw-bench-fleet-'));
  const storeConf = Object.fromEntries(Array.from({ length: stores }, (_, i) => [`s${i}`, { db: join(dir, 'stores', `s${i}.db`), host: `h${i % hosts}` }]));
  const file = join(dir, 'fleet.yaml');
  const redisSection = typeof TARGET === 'string' ? { url: TARGET } : TARGET;
  writeFileSync(file, JSON.stringify({ stateDb: join(dir, 'state.db'), redis: { ...redisSection, prefix }, stores: storeConf }));
  const redis = await connectRedis(TARGET);
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
    const { keys, bytes, servers } = await keysUnder(redis, prefix);
    const times: number[] = [];
    for (let r = 0; r < RUNS; r++) {
      const t = performance.now();
      const p = spawnSync(process.execPath, [CLI, 'fleet', '--json', '--config', file], { encoding: 'utf8', env: { ...process.env, LOG_LEVEL: 'silent', MEMORY_WARDEN_HOST: 'ops' } });
      times.push(performance.now() - t);
      if (p.status !== 0 && p.status !== 1) throw new Error(`fleet exited ${p.status}: ${p.stderr}`);
    }
    const median = [...times].sort((a, b) => a - b)[Math.floor(times.length / 2)]!;
    const on = CLUSTER ? ` (on ${servers} of ${serversOf(redis).length} primaries)` : '';
    const row = `| ${hosts} | ${stores} | ${upserted} | ${(startMs / 1000).toFixed(2)} s | ${keys} (${(keys / stores).toFixed(1)}/store)${on} | ${(bytes / 1024).toFixed(0)} KiB (${(bytes / stores / 1024).toFixed(1)} KiB/store) | ${(median / 1000).toFixed(2)} s |`;
    if (!LOAD) return row;
    const load = await runLoad(file, TARGET, hosts, { silent: SILENT, windowMs: WINDOW_S * 1000, hostTimeoutSeconds: HOST_TIMEOUT_S, dir });
    const after = await keysUnder(redis, prefix);
    const perServer = load.processedPerServer ? `; each primary's own count per second (commands inside scripts included, every client's): ${load.processedPerServer.map((n) => n.toFixed(0)).join(', ')}` : '';
    return `${row}\nidle fleet (${hosts - SILENT} hosts running, ${WINDOW_S} s): ${load.commandsPerSecond.toFixed(0)} Redis commands per second, ` +
      `${(load.commandsPerSecond / (hosts - SILENT)).toFixed(2)} per running host, ${(load.commandsPerSecond / stores).toFixed(3)} per store${perServer}; ` +
      `${load.clients} client connections; ` +
      `${clientErrors.count} errors reported by the hosts' workers${clientErrors.first ? ` (first: ${clientErrors.first})` : ''}; ` +
      `after the digest ${after.keys} keys${CLUSTER ? ` on ${after.servers} primaries` : ''}, ${(after.bytes / 1024).toFixed(0)} KiB (${(after.bytes / stores / 1024).toFixed(1)} KiB/store); ` +
      `fleet digest with ${SILENT} silent hosts (host-timeout ${HOST_TIMEOUT_S} s): ${load.digestSeconds.toFixed(1)} s, ${load.digestStatus}`;
  } finally {
    await deleteUnder(redis, prefix);
    redis.disconnect();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const where = CLUSTER ? `Redis Cluster via ${CLUSTER.map((n) => `${n.host}:${n.port}`).join(',')}` : URL_.replace(/\/\/[^@]*@/, '//***@');
  console.log(`fleet on ${where}, node ${process.version}, ${RUNS} fleet runs each (median)`);
  console.log('| hosts | stores | schedulers upserted | all hosts\' start-up sync | Redis keys | Redis memory | `fleet --json` |');
  console.log('|---|---|---|---|---|---|---|');
  for (const [hosts, stores] of SIZES) console.log(await one(hosts, stores));
}

// Exits once printed: on a loaded machine a cluster client whose slot refresh timed out may still be retrying.
main().then(() => process.exit(0), (err) => {
  console.error(`bench:fleet: ${(err as Error).message}`);
  process.exit(1);
});
