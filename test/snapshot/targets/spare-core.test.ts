import { spawn, type ChildProcess } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { afterAll, describe, expect, it } from 'vitest';
import { cpuTicks, hashThreadPolicy, idleCoresBetween, spareCore } from '../../../src/snapshot/targets/hash-worker.js';

/**
 * Whether an upload hashes on a second thread is decided by the cores idle now (the machine's idle time since the
 * command started, from /proc/stat), not by the load average of the last minute, which a machine that just became
 * busy (or quiet) still shows as it was.
 */

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a spare core to hash on', () => {
  const spinners: ChildProcess[] = [];
  afterAll(() => {
    for (const p of spinners) p.kill('SIGKILL');
    hashThreadPolicy('auto');
  });

  it('reads the machine\'s idle time from /proc/stat', () => {
    const a = cpuTicks();
    expect(a).toBeDefined();
    expect(a!.all).toBeGreaterThan(a!.idle);
  });

  it('idle cores between two readings: the idle share of the time, times the cores', () => {
    expect(idleCoresBetween({ idle: 100, all: 1000 }, { idle: 150, all: 1100 }, 2)).toBe(1);
    expect(idleCoresBetween({ idle: 100, all: 1000 }, { idle: 100, all: 1100 }, 2)).toBe(0);
    expect(idleCoresBetween({ idle: 100, all: 1000 }, { idle: 200, all: 1100 }, 4)).toBe(4);
    // Not known: a reading missing, or no time between them.
    expect(idleCoresBetween(undefined, { idle: 1, all: 2 }, 2)).toBeUndefined();
    expect(idleCoresBetween({ idle: 1, all: 2 }, { idle: 1, all: 2 }, 2)).toBeUndefined();
  });

  it('with every core busy the moment it decides, no second thread, whatever the last minute was', async () => {
    hashThreadPolicy('auto');
    for (let i = 0; i < availableParallelism(); i++) {
      const p = spawn(process.execPath, ['-e', 'process.stdout.write("on\\n"); for (;;) {}'], { stdio: ['ignore', 'pipe', 'ignore'] });
      spinners.push(p);
      await new Promise<void>((r) => p.stdout!.once('data', () => r()));
    }
    await sleep(150);
    spareCore(); // a reading taken with the cores busy
    await sleep(300);
    expect(spareCore()).toBe(false);
    for (const p of spinners.splice(0)) p.kill('SIGKILL');
  });
});
