import { describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { CLI, makeStore, spawnWorker, tempDir, useWorkerProcesses, writeConfig } from './fixtures.js';

const exec = promisify(execFile);

interface Row { id: string; next: string | null; nextFrom: string | null; inRedis: boolean; inConfig: boolean }

/**
 * `schedule` before any worker has started: each scheduler's next run, computed from the config as BullMQ will
 * compute it, not "not in Redis yet"; once a worker has started, Redis says the same instant.
 */
describe('schedule before the first worker', { timeout: 60_000 }, () => {
  const { redis, workers, prefix } = useWorkerProcesses();

  it('prints the next runs from the config, the ones the worker then puts in Redis', async () => {
    const dir = tempDir('schedule-first');
    const file = writeConfig({
      dir, redisUrl: redis().url, prefix: prefix('schedule-first'), stores: { agent: makeStore(join(dir, 'agent.db')) },
      worker: { schedules: { prune: { enabled: true, pattern: '30 2 * * *' }, integrity: { enabled: true, pattern: '0 9 * * 1', tz: 'Asia/Tokyo' } } },
    });
    const schedule = async (json: boolean) => (await exec(process.execPath, [CLI, 'schedule', '--config', file, ...(json ? ['--json'] : [])], { env: { ...process.env, LOG_LEVEL: 'silent', REDIS_URL: '' } })).stdout;
    const before = (JSON.parse(await schedule(true)) as { schedulers: Row[] }).schedulers;
    const now = Date.now();
    // 02:30 UTC: today's if still ahead, else tomorrow's.
    const today = new Date(now);
    let prune = Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate(), 2, 30);
    if (prune <= now) prune += 86_400_000;
    const p = before.find((r) => r.id.includes('prune'))!;
    expect(p).toMatchObject({ inConfig: true, inRedis: false, nextFrom: 'config' });
    expect(Date.parse(p.next!)).toBe(prune);
    // Mondays 09:00 in Tokyo: 00:00 UTC on a Monday, within the coming week.
    const i = before.find((r) => r.id.includes('integrity'))!;
    const t = new Date(i.next!);
    expect([t.getUTCDay(), t.getUTCHours(), t.getUTCMinutes()]).toEqual([1, 0, 0]);
    expect(t.getTime() - now).toBeGreaterThan(0);
    expect(t.getTime() - now).toBeLessThanOrEqual(7 * 86_400_000);
    const text = await schedule(false);
    expect(text).not.toContain('not in Redis yet');
    expect(text).toContain(`next ${p.next} (from the config`);

    const w = spawnWorker(file);
    workers.push(w);
    await w.ready;
    const after = (JSON.parse(await schedule(true)) as { schedulers: Row[] }).schedulers;
    for (const r of before) expect(after.find((a) => a.id === r.id)).toMatchObject({ inRedis: true, nextFrom: 'redis', next: r.next });
  });
});
