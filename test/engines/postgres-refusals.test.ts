import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Command } from 'commander';
import { buildProgram } from '../../src/program.js';
import { createTestDatabase, type TestDatabase } from '../helpers/pg.js';
import { assertBuilt } from '../queue/fixtures.js';
import { fillPgStore, ids, initPgStore, pgStoreConfig, type PgStore } from './pg-fixture.js';

/**
 * Every command that takes a store, on a PostgreSQL store: those that run on one (init, check, the prune, integrity,
 * digest, drift, snapshot and erase jobs, the digest, review and serve commands, restore, the snapshots commands,
 * erase, the repairs and enqueue) do; any other would be refused in one place, exit 2, one line naming the store and
 * saying the command does not support PostgreSQL stores yet, with the database untouched (none is, today). A command
 * added later fails the last test until it is in one of the tables.
 */
const REFUSED: Record<string, string[]> = {};
// Each tested on a PostgreSQL store where it is written about: postgres-warden, postgres-review, postgres-snapshot-cli,
// postgres-erase, postgres-repair (the repairs and enqueue).
const RUNS = ['init', 'check', 'run integrity', 'run prune', 'run digest', 'run drift', 'digest', 'review list', 'review confirm', 'review supersede', 'review expire', 'review delete', 'serve',
  'run snapshot', 'run restore', 'restore', 'snapshots list', 'snapshots verify', 'snapshots push', 'run erase', 'erase', 'erase receipts',
  'repair dangling', 'repair timestamps', 'repair orphans', 'enqueue'];

function commands(cmd: Command, path: string[] = []): { cmd: Command; path: string }[] {
  return cmd.commands.flatMap((c) => [{ cmd: c, path: [...path, c.name()].join(' ') }, ...commands(c, [...path, c.name()])]);
}
const takesStore = (cmd: Command) => {
  const has = (long: string) => cmd.options.some((o) => o.long === long);
  return has('--store') || has('--link') || (has('--db') && has('--config'));
};

describe('commands on a PostgreSQL store', { timeout: 300_000 }, () => {
  let db: TestDatabase;
  let store: PgStore;
  let before: string[];
  beforeAll(async () => {
    assertBuilt();
    db = await createTestDatabase('pg_refuse');
    store = pgStoreConfig(db, { extra: { snapshot: { targets: [{ name: 'nas', type: 'local', path: '/tmp/mw-pg-refuse-nas' }] }, review: { secretEnv: 'MW_PG_REVIEW_SECRET' } } });
    store.env.MW_PG_REVIEW_SECRET = 'x'.repeat(40);
    await initPgStore(store);
    await fillPgStore(db, 'fleet', { live: 3, expired: 2 });
    before = await ids(db, 'fleet');
  });
  afterAll(async () => {
    await db?.drop();
  });

  it.each(Object.entries(REFUSED))('%s: exit 2, one line naming the store, the database untouched', async (name, argv) => {
    const words = name.split(' ').filter((w) => !w.startsWith('--'));
    const r = await store.run([...words, ...argv, '--store', 'fleet']);
    const lines = r.stderr.split('\n').filter((l) => l.startsWith('memory-warden:'));
    expect(r.code, r.stderr).toBe(2);
    expect(lines, r.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(/store fleet is a PostgreSQL store, and .* does not support PostgreSQL stores yet/);
    expect(r.stdout).toBe('');
    expect(await ids(db, 'fleet')).toEqual(before);
  });

  it('every command that takes a store either runs on a PostgreSQL store or is in the table above', () => {
    const taking = commands(buildProgram()).filter((c) => takesStore(c.cmd)).map((c) => c.path).sort();
    const tabled = [...new Set([...RUNS, ...Object.keys(REFUSED)].map((n) => n.split(' ').filter((w) => !w.startsWith('--')).join(' ')))].sort();
    expect(taking).toEqual(tabled);
  });
});
