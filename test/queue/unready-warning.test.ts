import { describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeStore, spawnWorker, tempDir, useWorkerProcesses } from './fixtures.js';

/**
 * A worker started with the digest scheduled and no way to send it says so when it starts, naming the setting and
 * how to turn the schedule off, instead of failing silently at 07:00 every day; it still starts and runs the rest.
 */
describe('a scheduled job that cannot run as configured', { timeout: 60_000 }, () => {
  const { workers, prefix } = useWorkerProcesses();

  const start = async (extra: Record<string, unknown>) => {
    const dir = tempDir('unready');
    const file = join(dir, 'config.yaml');
    writeFileSync(file, JSON.stringify({
      stateDb: join(dir, 'state.db'), redis: { url: 'redis://127.0.0.1:6379', prefix: prefix('unready') },
      stores: { agent: { db: makeStore(join(dir, 'a.db')) } }, ...extra,
      worker: { host: 'solo', http: { enabled: false }, ...(extra.worker as object | undefined) },
    }));
    const w = spawnWorker(file);
    workers.push(w);
    await w.ready;
    await w.waitFor('the ready line', (l) => l.msg === 'worker ready');
    return w.lines.filter((l) => l.level === 40 && l.job === 'digest').map((l) => String(l.msg));
  };

  it('no smtp: one warning naming smtp and the schedule to turn off', async () => {
    const warned = await start({});
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatch(/^digest is scheduled but cannot run as configured: smtp: not configured.*worker\.schedules\.digest\.enabled: false/);
  });

  it('smtp without recipients: the warning names digest.to', async () => {
    const warned = await start({ smtp: { host: '127.0.0.1', port: 2525 } });
    expect(warned).toHaveLength(1);
    expect(warned[0]).toContain('digest.to');
  });

  it('a digest that can be sent, or one not scheduled: no warning', async () => {
    expect(await start({ smtp: { host: '127.0.0.1', port: 2525 }, digest: { to: ['owner@example.org'] } })).toEqual([]);
    expect(await start({ worker: { schedules: { digest: { enabled: false } } } })).toEqual([]);
  });
});
