import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { makeStore, tempDir, type Row } from '../helpers/store.js';
import { loadConfig } from '../../src/config.js';
import { erase } from '../../src/erase.js';
import { silentLogger } from '../../src/logger.js';

const WRITER = fileURLToPath(new URL('../../dist/bench/agent-writer.js', import.meta.url));

interface WriterSummary { writes: number; errors: number; firstError: string | null }

const running = new Set<ReturnType<typeof spawn>>();
afterEach(() => {
  for (const writer of running) writer.kill('SIGKILL');
  running.clear();
});

/** The benchmark's agent-like writer in its own process, inserting a row every millisecond. */
async function startAgent(db: string): Promise<{ stop(): Promise<WriterSummary> }> {
  const writer = spawn(process.execPath, [WRITER, db, '1'], { stdio: ['ignore', 'pipe', 'inherit'] });
  running.add(writer);
  let out = '';
  writer.stdout.on('data', (d) => (out += d));
  await new Promise<void>((resolve) => writer.stdout.once('data', () => resolve()));
  return {
    async stop() {
      writer.kill('SIGTERM');
      await new Promise((resolve) => writer.once('exit', resolve));
      running.delete(writer);
      return JSON.parse(out.split('\n').filter(Boolean).at(-1)!) as WriterSummary;
    },
  };
}

describe('erase beside a writing agent', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  // The deletes checkpoint on erase's worker thread once another connection writes, and the VACUUM and its
  // checkpoint run there too: the agent keeps every write, and no byte of the erased text is left.
  it('erases every row of the person, keeps every write of the agent, and leaves no byte of the text', async () => {
    const rows: Row[] = Array.from({ length: 30_000 }, (_, i) => ({
      id: `r${i}`,
      subject: i % 10 === 3 ? 'alice' : `user${i % 7}`,
      fact: i % 10 === 3 ? `alice secret ${i} kept only here` : `fact ${i} `.repeat(6),
      superseded_by: i % 10 === 3 && i > 100 && i % 3 === 0 ? `r${i - 100}` : null,
    }));
    const db = makeStore(join(dir, 'm.db'), rows);
    const agent = await startAgent(db);
    const config = loadConfig({ overrides: { stateDb: join(dir, 's.db'), stores: { t: { db } } } });
    const r = await erase(config, 't', { user: 'alice' }, { now: () => Date.UTC(2026, 10, 29), log: silentLogger });
    const summary = await agent.stop();

    expect(r).toMatchObject({ memories: 3000, vacuumed: true, walTruncated: true });
    expect(summary.errors).toBe(0);
    expect(summary.writes).toBeGreaterThan(0);
    const d = new Database(db, { readonly: true });
    expect(d.prepare(`SELECT count(*) AS n FROM memory WHERE id LIKE 'agent_%'`).get()).toEqual({ n: summary.writes });
    expect(d.prepare(`SELECT count(*) AS n FROM memory WHERE subject = 'alice'`).get()).toEqual({ n: 0 });
    expect(d.prepare(`SELECT count(*) AS n FROM memory`).get()).toEqual({ n: 27_000 + summary.writes });
    d.close();
    const bytes = Buffer.concat([db, `${db}-wal`].filter(existsSync).map((p) => readFileSync(p)));
    expect(bytes.includes(Buffer.from('alice secret'))).toBe(false);
    expect(bytes.includes(Buffer.from('fact 29999'))).toBe(true);
  }, 120_000);
});
