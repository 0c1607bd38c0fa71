import { describe, expect, it } from 'vitest';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { loadConfig } from '../../src/config/config.js';
import { ROOT } from './fixtures.js';

const require = createRequire(import.meta.url);

describe('ecosystem.config.cjs (pm2)', () => {
  const { apps } = require(join(ROOT, 'ecosystem.config.cjs')) as { apps: Record<string, unknown>[] };
  const app = apps[0]!;

  it('runs the compiled worker and waits for its ready message', () => {
    expect(app).toMatchObject({ script: 'dist/src/cli.js', args: 'worker', wait_ready: true, exec_mode: 'fork' });
    expect(app.listen_timeout).toBeGreaterThan(0);
  });

  it('gives a running job longer to finish than the worker allows itself before pm2 kills it', () => {
    const { shutdownTimeoutMs } = loadConfig({ env: {} }).worker;
    expect(app.kill_timeout).toBeGreaterThan(shutdownTimeoutMs);
  });
});
