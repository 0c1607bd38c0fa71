import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { makeStore, tempDir, type Row } from '../helpers/store.js';
import { prune } from '../../jobs/prune.js';
import { loadConfig } from '../../src/config.js';
import { silentLogger } from '../../src/logger.js';

const WRITER = fileURLToPath(new URL('../../dist/bench/agent-writer.js', import.meta.url));

describe('prune beside a writing agent', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it('never makes the agent see database is locked, and keeps what the agent wrote', async () => {
    const rows: Row[] = [];
    for (let i = 0; i < 40_000; i++) {
      rows.push({ id: `r${i}`, expires_at: i % 4 === 0 ? null : '2026-01-01 00:00:00', fact: `fact ${i} `.repeat(8) });
    }
    const db = makeStore(join(dir, 'm.db'), rows);
    const writer = spawn(process.execPath, [WRITER, db, '1'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    writer.stdout.on('data', (d) => (out += d));
    await new Promise<void>((resolve) => writer.stdout.once('data', () => resolve()));

    const config = loadConfig({ overrides: { stateDb: join(dir, 's.db'), stores: { t: { db } }, prune: { batchSize: 500 } } });
    const result = await prune({ store: 't', dryRun: false }, { config, log: silentLogger, now: () => Date.UTC(2026, 10, 29), signal: new AbortController().signal });

    writer.kill('SIGTERM');
    await new Promise((resolve) => writer.once('exit', resolve));
    const summary = JSON.parse(out.split('\n').filter(Boolean).at(-1)!);
    expect(result.deleted).toBe(30_000);
    expect(summary.errors).toBe(0);
    expect(summary.firstError).toBeNull();
    expect(summary.writes).toBeGreaterThan(0);
    const d = new Database(db, { readonly: true });
    expect(d.prepare(`SELECT count(*) AS n FROM memory WHERE id LIKE 'agent_%'`).get()).toEqual({ n: summary.writes });
    d.close();
  });
});
