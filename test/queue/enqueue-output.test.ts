import { describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { CLI, makeStore, spawnWorker, tempDir, useWorkerProcesses, writeConfig } from './fixtures.js';

const exec = promisify(execFile);

/** `enqueue <job>` prints what the job did for a person, and one JSON object only with --json (a real worker). */
describe('what enqueue prints', { timeout: 60_000 }, () => {
  const { redis, workers, prefix } = useWorkerProcesses();

  it('lines for a person without --json, the result as one JSON object with it', async () => {
    const dir = tempDir('enqueue-output');
    const file = writeConfig({ dir, redisUrl: redis().url, prefix: prefix('enqueue-output'), stores: { agent: makeStore(join(dir, 'agent.db'), { expired: 2, live: 1 }) } });
    const w = spawnWorker(file);
    workers.push(w);
    await w.ready;
    const run = (args: string[]) => exec(process.execPath, [CLI, 'enqueue', ...args, '--config', file], { env: { ...process.env, LOG_LEVEL: 'silent', REDIS_URL: '' } });
    const text = await run(['prune', '--store', 'agent']);
    expect(text.stdout).toMatch(/^prune agent: done\nagent: deleted 2 row\(s\) as of /);
    expect(() => JSON.parse(text.stdout)).toThrow();
    expect(text.stdout).not.toMatch(/^\s*[{}]/m);
    const check = await run(['integrity', '--store', 'agent']);
    expect(check.stdout).toMatch(/^integrity agent: done\nagent \(.*agent\.db\): healthy$/m);
    const json = await run(['integrity', '--store', 'agent', '--json']);
    expect(JSON.parse(json.stdout)).toMatchObject({ ok: true, rows: 1 });
  });
});
