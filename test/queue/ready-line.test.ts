import { describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CLI, makeStore, spawnWorker, tempDir, useWorkerProcesses } from './fixtures.js';

/**
 * The worker's ready line says where it connected: the URL REDIS_URL gave, its password blanked, not the placeholder
 * `${REDIS_URL}`; `config` shows it the same way. A password with `@` in it (ioredis takes the last `@`) is blanked
 * whole. The test Redis has no password: the one in the URL is sent and ignored.
 */
describe('where the worker connected', { timeout: 60_000 }, () => {
  const { redis, workers, prefix: prefixFor } = useWorkerProcesses();

  it.each([
    ['no password', (hostPort: string) => `redis://${hostPort}`, (hostPort: string) => `redis://${hostPort}`, null],
    ['a password', (hostPort: string) => `redis://:Zq7SecretPass22@${hostPort}`, (hostPort: string) => `redis://:[redacted]@${hostPort}`, 'Zq7SecretPass22'],
    ['a password holding @', (hostPort: string) => `redis://:Pw@Zq7Secret22x@${hostPort}`, (hostPort: string) => `redis://:[redacted]@${hostPort}`, 'Zq7Secret22x'],
  ])('REDIS_URL with %s', async (_name, given, shown, secret) => {
    const hostPort = new URL(redis().url).host;
    const dir = tempDir('ready-line');
    const file = join(dir, 'config.yaml');
    // redis.url left to the default, `${REDIS_URL:-redis://127.0.0.1:6379}`, as the README's deployment does.
    writeFileSync(file, JSON.stringify({ stateDb: join(dir, 'state.db'), redis: { prefix: prefixFor('ready') }, worker: { host: 'solo', http: { enabled: false } }, stores: { agent: { db: makeStore(join(dir, 'a.db')) } } }));
    const w = spawnWorker(file, ['worker'], { REDIS_URL: given(hostPort) });
    workers.push(w);
    await w.ready;
    const ready = await w.waitFor('the ready line', (l) => l.msg === 'worker ready');
    expect(ready.redis).toBe(shown(hostPort));
    expect(w.stderr()).not.toContain('${REDIS_URL}');
    if (secret) expect(w.stderr()).not.toContain(secret);
    const printed = execFileSync(process.execPath, [CLI, 'config', '--config', file], { encoding: 'utf8', env: { ...process.env, LOG_LEVEL: 'silent', REDIS_URL: given(hostPort) } });
    expect((JSON.parse(printed) as { redis: { url: string } }).redis.url).toBe(shown(hostPort));
    if (secret) expect(printed).not.toContain(secret);
  });
});
