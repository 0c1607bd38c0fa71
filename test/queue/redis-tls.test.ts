// Managed-Redis access: rediss:// with a CA file and an ACL user, against a real TLS-only redis-server; a wrong CA,
// user or password is one line naming the setting (exit 2), and the password shows up in no output, log or metric.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { connectRedis } from '../../src/queue/connection.js';
import { WardenError } from '../../src/core/errors.js';
import { cli } from '../helpers/cli.js';
import { makeTlsFiles, startTlsRedis, stopRedisProc, type RedisProc, type TlsFiles } from '../helpers/redis-servers.js';
import { assertBuilt, killAll, makeStore, spawnWorker, tempDir, type SpawnedWorker } from './fixtures.js';

const USER = 'warden';
const PASSWORD = `pw-${randomBytes(12).toString('hex')}`;

describe('Redis over TLS with an ACL user', { timeout: 120_000 }, () => {
  let tls: TlsFiles;
  let server: RedisProc;
  let dir: string;
  const workers: SpawnedWorker[] = [];

  beforeAll(async () => {
    assertBuilt();
    tls = makeTlsFiles();
    server = await startTlsRedis(tls, USER, PASSWORD);
    dir = tempDir('redis-tls');
    makeStore(join(dir, 'a.db'), { live: 2 });
  });
  afterEach(async () => killAll(workers.splice(0)));
  afterAll(async () => {
    if (server) await stopRedisProc(server);
    if (tls) rmSync(tls.dir, { recursive: true, force: true });
  });

  const redisConfig = (over: Record<string, unknown> = {}) => ({
    url: `rediss://127.0.0.1:${server.port}`,
    prefix: `mw-tls-${randomBytes(3).toString('hex')}`,
    username: USER,
    password: '${REDIS_PASSWORD}',
    tls: { caFile: tls.ca },
    ...over,
  });

  function writeConfig(redis: Record<string, unknown>, name = 'config'): string {
    const file = join(dir, `${name}.yaml`);
    const off = { enabled: false };
    writeFileSync(file, JSON.stringify({
      stateDb: join(dir, `${name}.state.db`),
      redis,
      worker: { host: 'solo', http: { port: 0 }, schedules: { snapshot: off, prune: { enabled: true, pattern: '0 3 * * *' }, integrity: off, digest: off, drift: off } },
      stores: { a: { db: join(dir, 'a.db') } },
    }));
    return file;
  }

  it('connects with the CA file, user and password (the password read from the environment)', async () => {
    const redis = await connectRedis({ url: `rediss://127.0.0.1:${server.port}`, username: USER, password: PASSWORD, tls: { caFile: tls.ca } });
    try {
      expect(await redis.acl('WHOAMI')).toBe(USER);
    } finally {
      await redis.quit();
    }
    const fleet = cli(['fleet', '--json', '--config', writeConfig(redisConfig())], { REDIS_PASSWORD: PASSWORD });
    expect(fleet.stderr).toBe('');
    expect(fleet.json().hosts.map((h: { host: string }) => h.host)).toEqual(['solo']);
  });

  it('runs the worker over TLS; its logs, /metrics and `config` never show the password', async () => {
    const file = writeConfig(redisConfig(), 'worker');
    const w = spawnWorker(file, ['worker'], { REDIS_PASSWORD: PASSWORD });
    workers.push(w);
    const ready = await w.waitFor('worker ready', (l) => l.msg === 'worker ready', 60_000);
    const http = await w.waitFor('http listening', (l) => l.msg.startsWith('http listening'));
    const metrics = await (await fetch(new URL('/metrics', String(http.url)))).text();
    expect(metrics).toContain('memory_warden');
    expect(metrics).not.toContain(PASSWORD);
    expect(String(ready.redis)).toContain(`rediss://127.0.0.1:${server.port}`);
    w.proc.kill('SIGTERM');
    await w.exited;
    expect(w.stderr()).not.toContain(PASSWORD);
    const shown = cli(['config', '--config', file], { REDIS_PASSWORD: PASSWORD });
    expect(shown.code).toBe(0);
    expect(shown.stdout).not.toContain(PASSWORD);
    expect(shown.stdout).toContain(tls.ca);
  });

  // Each refusal: exit 2, one line, the setting to change named, neither the right nor the tried password shown.
  const refusals: Array<[string, () => Record<string, unknown>, Record<string, string>, RegExp]> = [
    ['a CA that did not sign the server certificate', () => redisConfig({ tls: { caFile: tls.otherCa } }), { REDIS_PASSWORD: PASSWORD }, /^config redis\.tls\.caFile: .*SELF_SIGNED_CERT_IN_CHAIN|^config redis\.tls\.caFile: /],
    ['no CA file at all (system CAs)', () => redisConfig({ tls: undefined }), { REDIS_PASSWORD: PASSWORD }, /^config redis\.tls\.caFile \(not set/],
    ['a CA file that is not there', () => redisConfig({ tls: { caFile: join(dir, 'missing.pem') } }), { REDIS_PASSWORD: PASSWORD }, /^config redis\.tls\.caFile: cannot read .*missing\.pem \(ENOENT\)/],
    ['a wrong password', () => redisConfig(), { REDIS_PASSWORD: `${PASSWORD}-wrong` }, /^config redis\.username \/ redis\.password: .*refused them \(WRONGPASS\)/],
    ['a wrong user', () => redisConfig({ username: 'nobody' }), { REDIS_PASSWORD: PASSWORD }, /^config redis\.username \/ redis\.password: .*refused them \(WRONGPASS\)/],
    ['no user or password (the default user is off)', () => redisConfig({ username: undefined, password: undefined }), {}, /^config redis\.url \(its user and password\): .*refused them \((NOAUTH|WRONGPASS)\)/],
    ['the password in the URL, wrong', () => redisConfig({ url: `rediss://${USER}:\${REDIS_PASSWORD}@127.0.0.1:${server.port}`, username: undefined, password: undefined }), { REDIS_PASSWORD: `${PASSWORD}x` }, /^config redis\.url \(its user and password\): Redis at rediss:\/\/warden:\*\*\*@.*WRONGPASS/],
    // written in the file: refused before anything connects, as every secret written there is
    ['the password in the URL, written in the file', () => redisConfig({ url: `rediss://${USER}:${PASSWORD}@127.0.0.1:${server.port}`, username: undefined, password: undefined }), {}, /^config \S+refused\.yaml: redis\.url: a credential goes in the environment/],
  ];
  for (const [what, config, env, message] of refusals) {
    it(`refuses ${what}: exit 2, one line naming the setting`, () => {
      for (const command of [['fleet'], ['enqueue', 'prune', '--store', 'a']]) {
        const r = cli([...command, '--config', writeConfig(config(), 'refused')], env);
        expect(r.code, r.stderr).toBe(2);
        const lines = r.stderr.trim().split('\n');
        expect(lines, r.stderr).toHaveLength(1);
        expect(lines[0]!.replace(/^memory-warden: /, '').replace(/^error: /, '')).toMatch(message);
        expect(r.stderr + r.stdout).not.toContain(PASSWORD);
      }
    });
  }

  it('is a config error (not retried) when called from code', async () => {
    const err = await connectRedis({ url: `rediss://127.0.0.1:${server.port}`, username: USER, password: 'nope-nope', tls: { caFile: tls.ca } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WardenError);
    expect((err as WardenError).kind).toBe('config');
    expect((err as WardenError).message).not.toContain('nope-nope');
  });
});
