import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { acquireMaintenanceLock } from '../../src/store/lock.js';
import { tempDir, makeStore } from '../helpers/store.js';

const LOCK_MODULE = fileURLToPath(new URL('../../dist/src/store/lock.js', import.meta.url));

describe('maintenance lock', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it('admits one writer at a time and is free again after release', () => {
    const db = makeStore(join(dir, 'm.db'));
    const first = acquireMaintenanceLock(db);
    expect(() => acquireMaintenanceLock(db)).toThrow(/another maintenance job is writing/);
    first.release();
    acquireMaintenanceLock(db).release();
  });

  it('is dropped when its holder is killed with SIGKILL', async () => {
    const db = makeStore(join(dir, 'm.db'));
    const child = spawn(process.execPath, ['--input-type=module', '-e', `
      const { acquireMaintenanceLock } = await import(${JSON.stringify(LOCK_MODULE)});
      globalThis.lock = acquireMaintenanceLock(${JSON.stringify(db)}, { holder: 'test' });
      process.stdout.write('held\\n');
      setInterval(() => {}, 1000);`], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
    expect(() => acquireMaintenanceLock(db)).toThrow(/another maintenance job/);
    child.kill('SIGKILL');
    await new Promise((resolve) => child.once('exit', resolve));
    const lock = acquireMaintenanceLock(db);
    lock.release();
  });
});
