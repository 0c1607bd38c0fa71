import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, constants, openSync } from 'node:fs';
import { join } from 'node:path';
import { CLI } from './helpers/cli.js';
import { ids, makeStore, tempDir } from './helpers/store.js';

/**
 * Output into a pipe whose reader has gone (`review list … | head -5`, `check … | head -3`, a pager quit early):
 * the command ends quietly, with its own exit code, and a deleting command still finishes its work. The pipe is a
 * FIFO whose only reader is closed before the command starts, so its first write meets EPIPE on every run (a real
 * `| head` closes at a moment that races with the writes).
 */
function closedPipe(dir: string, name: string): number {
  const fifo = join(dir, name);
  expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
  const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
  const writer = openSync(fifo, constants.O_WRONLY);
  closeSync(reader);
  return writer;
}

function runInto(args: string[], which: 'stdout' | 'stderr' | 'both', dir: string, env: Record<string, string> = {}) {
  const fd = closedPipe(dir, `pipe-${Math.random().toString(36).slice(2)}`);
  const open = 'pipe' as const;
  const stdio: ['ignore', number | 'pipe', number | 'pipe'] = ['ignore', which === 'stderr' ? open : fd, which === 'stdout' ? open : fd];
  const child = spawn(process.execPath, [CLI, ...args], { stdio, env: { ...process.env, LOG_LEVEL: 'info', MEMORY_WARDEN_CONFIG: '', ...env } });
  closeSync(fd);
  let stdout = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8').on('data', (c: string) => (stdout += c));
  child.stderr?.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  return new Promise<{ code: number | null; signal: string | null; stdout: string; stderr: string }>((resolve) =>
    child.once('close', (code, signal) => resolve({ code, signal, stdout, stderr })),
  );
}

describe('output into a closed pipe', () => {
  let dir: string;
  let cleanup: () => void;
  let db: string;
  beforeAll(() => {
    ({ dir, cleanup } = tempDir('mw-pipe-'));
    db = makeStore(join(dir, 'memory.db'), Array.from({ length: 300 }, (_, i) => ({ id: `m${i}`, confirmed_at: '2020-01-01 00:00:00' })));
  });
  afterAll(() => cleanup?.());

  const quiet = (text: string) => {
    expect(text).not.toMatch(/EPIPE|Unhandled|node:events|at .*\.c?js:\d+/);
  };

  it.each([
    ['review list', ['review', 'list'], 0],
    ['review list --json', ['review', 'list', '--json'], 0],
    ['check', ['check'], 0],
    ['check --json', ['check', '--json'], 0],
    ['--help', ['--help'], 0],
    ['config', ['config'], 0],
  ])('%s, stdout closed: no stack trace, its own exit code', async (_name, args, code) => {
    const withDb = args[0] === '--help' || args[0] === 'config' ? args : [...args, '--db', db];
    const r = await runInto(withDb, 'stdout', dir);
    quiet(r.stderr);
    expect(r.signal).toBeNull();
    expect(r.code).toBe(code);
  });

  it('logs and an error line into a closed stderr: the exit code of the error, nothing thrown', async () => {
    const r = await runInto(['check', '--db', join(dir, 'missing.db')], 'stderr', dir);
    quiet(r.stdout);
    expect(r.code).toBe(2);
    const logs = await runInto(['check', '--db', db], 'stderr', dir);
    expect(logs.code).toBe(0);
    expect(logs.stdout).toMatch(/healthy/);
  });

  it('both closed (`2>&1 | head -1`), a prune still deletes what it deletes', async () => {
    const store = makeStore(join(dir, 'prune.db'), [
      { id: 'gone', expires_at: '2000-01-01 00:00:00' },
      { id: 'kept' },
    ]);
    const r = await runInto(['run', 'prune', '--db', store], 'both', dir);
    expect(r.code).toBe(0);
    expect(ids(store)).toEqual(['kept']);
  });
});
