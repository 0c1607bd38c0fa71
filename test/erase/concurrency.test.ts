import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { makeStore, tempDir, type Row } from '../helpers/store.js';
import { startAgent } from '../helpers/agent.js';
import { loadConfig } from '../../src/config/config.js';
import { erase } from '../../src/erase/erase.js';
import { silentLogger } from '../../src/log/logger.js';

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
