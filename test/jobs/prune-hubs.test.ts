// Prune beside a writing agent, where one row is superseded by thousands: its older versions go in transactions of
// their own before it (one transaction for the whole cascade held the write lock for as long as the cascade took),
// each taking only what the row's cascade would take at that moment.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { makeStore, tempDir, type Row } from '../helpers/store.js';
import { startAgent } from '../helpers/agent.js';
import { prune } from '../../jobs/prune.js';
import { loadConfig } from '../../src/config/config.js';
import { silentLogger } from '../../src/log/logger.js';

const NOW = Date.UTC(2026, 10, 29, 12);
const EXPIRED = '2026-11-01 00:00:00';
const RECENT = '2026-11-20 00:00:00';

/** `parent` and `count` rows superseded by it, written recently (no rule selects them on their own). */
const versions = (parent: string, count: number): Row[] =>
  Array.from({ length: count }, (_, i) => ({ id: `${parent}_v${i}`, superseded_by: parent, created_at: RECENT, fact: `version ${i} of ${parent}` }));

describe('prune beside a writer, a row thousands of others are superseded by', { timeout: 120_000 }, () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  const run = (db: string) => prune({ store: 't', dryRun: false }, {
    config: loadConfig({ overrides: { stateDb: join(dir, 's.db'), stores: { t: { db } } } }),
    log: silentLogger, now: () => NOW, signal: new AbortController().signal,
  });

  it('goes in pieces, its older versions first, each piece what its cascade would take; one the agent renews midway keeps the rest', async () => {
    const rows: Row[] = [
      { id: 'hub', expires_at: EXPIRED, created_at: RECENT },
      ...versions('hub', 3000),
      // One of its older versions is itself superseded by 200: they go with it, as its cascade.
      ...versions('hub_v7', 200),
      { id: 'renewed', expires_at: EXPIRED, created_at: RECENT },
      ...versions('renewed', 3000),
      { id: 'live', created_at: RECENT },
      ...versions('live', 500),
      ...Array.from({ length: 4000 }, (_, i): Row => ({ id: `r${i}`, expires_at: i % 2 ? EXPIRED : null, created_at: RECENT })),
    ];
    const db = makeStore(join(dir, 'm.db'), rows);
    const agent = await startAgent(db);
    const look = new Database(db, { timeout: 5000 });
    const left = look.prepare('SELECT (SELECT count(*) FROM memory WHERE id = ?) AS self, (SELECT count(*) FROM memory WHERE superseded_by = ?) AS below');
    // Watched between the prune's transactions: whether a hub was ever seen with some of its older versions gone and
    // others not (one transaction for the whole cascade never shows that), and the renewed one is renewed then.
    let hubInPieces = false;
    let renewedAt: number | null = null;
    const watch = setInterval(() => {
      const hub = left.get('hub', 'hub') as { self: number; below: number };
      if (hub.self === 1 && hub.below > 0 && hub.below < 3000) hubInPieces = true;
      const renewed = left.get('renewed', 'renewed') as { self: number; below: number };
      if (renewedAt === null && renewed.self === 1 && renewed.below > 0 && renewed.below < 3000) {
        look.prepare(`UPDATE memory SET expires_at = NULL WHERE id = 'renewed'`).run();
        renewedAt = renewed.below;
      }
    }, 1);
    let result;
    try {
      result = await run(db);
    } finally {
      clearInterval(watch);
    }
    const summary = await agent.stop();
    expect(summary.errors).toBe(0);

    expect(hubInPieces).toBe(true);
    expect(renewedAt).not.toBeNull();
    const count = (sql: string) => look.prepare(`SELECT count(*) FROM memory WHERE ${sql}`).pluck().get() as number;
    // The hub went with everything its cascade takes.
    expect(count(`id = 'hub' OR id LIKE 'hub\\_v%' ESCAPE '\\'`)).toBe(0);
    // The renewed one stayed, with the older versions not yet deleted when it was renewed: no more went after.
    expect(count(`id = 'renewed'`)).toBe(1);
    const renewedLeft = count(`superseded_by = 'renewed'`);
    expect(renewedLeft).toBeGreaterThan(0);
    expect(renewedLeft).toBeLessThanOrEqual(renewedAt!);
    // Nothing else was touched: the live row and its versions, the unexpired rows, the agent's rows.
    expect(count(`id = 'live' OR superseded_by = 'live'`)).toBe(501);
    expect(count(`id GLOB 'r[0-9]*' AND expires_at IS NULL`)).toBe(2000);
    expect(count(`id GLOB 'r[0-9]*' AND expires_at IS NOT NULL`)).toBe(0);
    expect(count(`id LIKE 'agent\\_%' ESCAPE '\\'`)).toBe(summary.writes);
    // What it says it deleted is what went, counted by rule: the expired hub and rows, the rest by cascade.
    const gone = 1 + 3000 + 200 + (3000 - renewedLeft) + 2000;
    expect(result.deleted).toBe(gone);
    expect([result.expired, result.superseded, result.cascaded]).toEqual([1 + 2000, 0, gone - 2001]);
    look.close();
  });
});
