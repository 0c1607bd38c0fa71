import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startTestRedis, deletePrefix, uniquePrefix, type TestRedis } from '../helpers/redis.js';
import { countRows, makeStore, tempDir, until, writeConfig } from '../queue/fixtures.js';

/**
 * ecosystem.config.cjs under the real pm2 (the npm registry's, a dev dependency here; docs/worker.md has users
 * install it globally), started as docs/worker.md says: `pm2 start ecosystem.config.cjs` in the built folder, the
 * config file from MEMORY_WARDEN_CONFIG. pm2 waits for the worker's ready message, the worker runs a job, and
 * `pm2 stop` lets it stop cleanly. pm2's daemon, logs and state live in a PM2_HOME of the test's own.
 */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PM2 = join(ROOT, 'node_modules/pm2/bin/pm2');

describe('ecosystem.config.cjs under pm2', () => {
  let dir: string;
  let redis: TestRedis;
  let prefix: string;
  let env: NodeJS.ProcessEnv;
  const pm2 = (...args: string[]) => spawnSync(process.execPath, [PM2, ...args], { cwd: ROOT, encoding: 'utf8', env, timeout: 90_000 });
  const app = () => (JSON.parse(pm2('jlist').stdout) as { name: string; pid: number; pm2_env: { status: string; env: Record<string, string>; restart_time: number } }[]).find((a) => a.name === 'memory-warden');

  beforeAll(async () => {
    dir = tempDir('pm2');
    redis = await startTestRedis();
    prefix = uniquePrefix('pm2');
  });
  afterAll(async () => {
    if (env) pm2('kill'); // the daemon of this PM2_HOME, and any process it still runs
    if (redis) {
      await deletePrefix(redis.client, prefix);
      await redis.stop();
    }
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the config file is MEMORY_WARDEN_CONFIG, else /etc/memory-warden/config.yaml', () => {
    const read = (extra: Record<string, string>) => {
      const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'MEMORY_WARDEN_CONFIG'));
      const r = spawnSync(process.execPath, ['-p', `JSON.stringify(require(${JSON.stringify(join(ROOT, 'ecosystem.config.cjs'))}).apps[0].env)`], { encoding: 'utf8', env: { ...clean, ...extra } });
      expect(r.status, r.stderr).toBe(0);
      return (JSON.parse(r.stdout) as Record<string, string>).MEMORY_WARDEN_CONFIG;
    };
    expect(read({})).toBe('/etc/memory-warden/config.yaml');
    expect(read({ MEMORY_WARDEN_CONFIG: '/srv/warden/config.yaml' })).toBe('/srv/warden/config.yaml');
  });

  it('pm2 start ecosystem.config.cjs: ready, runs a job, and stops cleanly', async () => {
    if (!existsSync(join(ROOT, 'dist/src/cli.js'))) throw new Error('build first: npm run build');
    const store = makeStore(join(dir, 'agent.db'), { expired: 3, live: 2 });
    const config = writeConfig({ dir, redisUrl: redis.url, prefix, stores: { agent: store }, worker: { host: 'pm2' } });
    env = { ...process.env, PM2_HOME: join(dir, 'pm2'), MEMORY_WARDEN_CONFIG: config, REDIS_URL: redis.url, LOG_LEVEL: 'info' };

    const started = pm2('start', 'ecosystem.config.cjs');
    expect(started.status, `${started.stdout}${started.stderr}`).toBe(0);
    const running = app()!;
    expect(running.pm2_env.status).toBe('online');
    expect(running.pm2_env.env.MEMORY_WARDEN_CONFIG).toBe(config);
    expect(running.pm2_env.restart_time).toBe(0);

    const enq = spawnSync(process.execPath, [join(ROOT, 'dist/src/cli.js'), 'enqueue', 'prune', '--store', 'agent', '--config', config, '--json'], { encoding: 'utf8', env, timeout: 60_000 });
    expect(enq.status, enq.stderr).toBe(0);
    expect(countRows(store, 'expires_at IS NOT NULL')).toBe(0);

    const stopped = pm2('stop', 'memory-warden');
    expect(stopped.status, `${stopped.stdout}${stopped.stderr}`).toBe(0);
    await until('pm2 to see it stopped', () => app()?.pm2_env.status === 'stopped');
    // pm2 writes the worker's stderr (its JSON log lines) to logs/memory-warden-error[-N].log
    const logs = readdirSync(join(dir, 'pm2/logs')).filter((f) => /^memory-warden-error(-\d+)?\.log$/.test(f));
    expect(logs).toHaveLength(1);
    const log = readFileSync(join(dir, 'pm2/logs', logs[0]!), 'utf8');
    const lines = log.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { msg: string; pid: number; drained?: boolean });
    expect(lines.find((l) => l.msg === 'worker ready')?.pid).toBe(running.pid);
    expect(lines.find((l) => l.msg === 'worker stopped')).toMatchObject({ pid: running.pid, drained: true });
  });
});
