import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { peakGrowthKb } from '../helpers/memory.js';
import { makeStore, tempDir, type Row } from '../helpers/store.js';
import { prune } from '../../jobs/prune.js';
import { loadConfig } from '../../src/config/config.js';
import { silentLogger } from '../../src/log/logger.js';

describe('prune --dry-run on a store with many rows to delete', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  const NOW = Date.UTC(2026, 11, 1);
  // 300,000 expired rows, and for every tenth an older version the cascade takes with it.
  const EXPIRED = 300_000;
  const rows: Row[] = Array.from({ length: EXPIRED }, (_, i) => ({ id: `r${i}`, fact: 'f', expires_at: '2026-11-01 00:00:00' }));
  for (let i = 0; i < EXPIRED; i += 10) rows.push({ id: `old${i}`, fact: 'f', superseded_by: `r${i}`, created_at: '2026-11-20 00:00:00' });

  it('counts them without holding a row of them (only the ids it lists)', async () => {
    const ctx = (db: string) => ({
      config: loadConfig({ overrides: { stateDb: join(dir, 'state.db'), stores: { t: { db } } } }), log: silentLogger, now: () => NOW, signal: new AbortController().signal,
    });
    // A dry run on a small store first: the modules a prune loads are in memory before the peak is measured.
    await prune({ store: 't', dryRun: true }, ctx(makeStore(join(dir, 'small.db'), rows.slice(0, 10))));
    const db = makeStore(join(dir, 'm.db'), rows);
    const { value: result, grewKb } = await peakGrowthKb(() => prune({ store: 't', dryRun: true }, ctx(db)));
    expect([result.deleted, result.expired, result.superseded, result.cascaded]).toEqual([EXPIRED * 1.1, EXPIRED, 0, EXPIRED / 10]);
    expect(result.ids).toHaveLength(1000);
    // An object per row it would delete was some 100 MB here (the store's page cache is up to 16 MB of what remains).
    expect(grewKb).toBeLessThan(40 * 1024);
  });
});
