import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import { cliAsync, type CliResult } from '../helpers/cli.js';
import { tempDir } from '../queue/fixtures.js';
import type { TestDatabase } from '../helpers/pg.js';

/** The environment variable the test configs take the store's URL from (never written in the file). */
export const URL_VAR = 'MW_TEST_PG_URL';

export interface PgStore {
  dir: string;
  config: string;
  env: Record<string, string>;
  schema: string;
  run(args: string[], timeoutMs?: number): Promise<CliResult>;
}

/** A config with one PostgreSQL store `fleet` in `schema` of the test database, its URL in the environment. */
export function pgStoreConfig(db: TestDatabase, opts: { schema?: string; postgres?: Record<string, unknown>; extra?: Record<string, unknown> } = {}): PgStore {
  const dir = tempDir('pg-store');
  const schema = opts.schema ?? 'fleet';
  const config = join(dir, 'config.yaml');
  writeFileSync(config, JSON.stringify({
    stateDb: join(dir, 'state.db'),
    snapshot: { root: join(dir, 'snapshots') },
    stores: { fleet: { engine: 'postgres', postgres: { url: `\${${URL_VAR}}`, schema, ...opts.postgres } } },
    ...opts.extra,
  }));
  const env = { [URL_VAR]: db.url };
  return { dir, config, env, schema, run: (args, timeoutMs) => cliAsync([...args, '--config', config], env, timeoutMs) };
}

/** `init --store fleet`, which must succeed. */
export async function initPgStore(store: PgStore): Promise<void> {
  const r = await store.run(['init', '--store', 'fleet']);
  expect(r.code, r.stderr).toBe(0);
}

/**
 * Rows as an agent writes them: `live` live rows, `expired` rows past their expiry, `old` rows superseded long ago
 * (each by a live row of its own), and `chains` supersede chains of `depth` versions each, written recently (no rule
 * takes an older version itself): with `expiredHead` the newest version has expired, so prune takes the whole chain,
 * its older versions by cascade; without, every version stays.
 */
export async function fillPgStore(db: TestDatabase, schema: string, rows: { live?: number; expired?: number; old?: number; chains?: number; depth?: number; expiredHead?: boolean; tag?: string }): Promise<void> {
  const s = `"${schema}"`;
  const tag = rows.tag ?? '';
  if (rows.live) {
    await db.client.query(`INSERT INTO ${s}.memory (id, subject, fact, source) SELECT 'live${tag}-' || g, 'user', 'likes tea ' || g, 'message' FROM generate_series(1, $1) g`, [rows.live]);
  }
  if (rows.expired) {
    await db.client.query(`INSERT INTO ${s}.memory (id, subject, fact, source, expires_at) SELECT 'exp${tag}-' || g, 'user', 'meeting ' || g, 'message', now() - interval '1 day' FROM generate_series(1, $1) g`, [rows.expired]);
  }
  if (rows.old) {
    await db.client.query(`INSERT INTO ${s}.memory (id, subject, fact, source) SELECT 'new${tag}-' || g, 'user', 'lives in Lyon ' || g, 'message' FROM generate_series(1, $1) g`, [rows.old]);
    await db.client.query(`INSERT INTO ${s}.memory (id, subject, fact, source, created_at, superseded_by) SELECT 'old${tag}-' || g, 'user', 'lives in Paris ' || g, 'message', now() - interval '400 days', 'new${tag}-' || g FROM generate_series(1, $1) g`, [rows.old]);
  }
  const depth = rows.depth ?? 1;
  if (rows.chains) {
    await db.client.query(
      `INSERT INTO ${s}.memory (id, subject, fact, source, expires_at)
       SELECT 'ch${tag}-' || c || '-' || d, 'user', 'address v' || d, 'message', CASE WHEN d = $2 AND $3 THEN now() - interval '1 day' END
       FROM generate_series(1, $1) c, generate_series(1, $2) d`, [rows.chains, depth, rows.expiredHead ?? false]);
    // Version d is superseded by version d + 1; the newest is the head.
    await db.client.query(`UPDATE ${s}.memory SET superseded_by = 'ch${tag}-' || split_part(id, '-', 2) || '-' || (split_part(id, '-', 3)::int + 1)
       WHERE id LIKE 'ch${tag}-%' AND split_part(id, '-', 3)::int < $1`, [depth]);
  }
}

/**
 * A store `fleet` initialized in `db` (its `postgres` options as given), filled with `rows` and then with expiring
 * chains (tag `x`): its config and the ids prune keeps (the live rows and the newer versions of what was superseded).
 */
export async function chainedPgStore(db: TestDatabase, postgres: Record<string, unknown>, rows: { live: number; expired: number; old: number }, chains: { chains: number; depth: number }): Promise<{ store: PgStore; keep: string[] }> {
  const store = pgStoreConfig(db, { postgres });
  await initPgStore(store);
  await fillPgStore(db, 'fleet', rows);
  await fillPgStore(db, 'fleet', { ...chains, expiredHead: true, tag: 'x' });
  return { store, keep: await ids(db, 'fleet', `id LIKE 'live-%' OR id LIKE 'new-%'`) };
}

export async function ids(db: TestDatabase, schema: string, where = 'true'): Promise<string[]> {
  return (await db.client.query<{ id: string }>(`SELECT id FROM "${schema}".memory WHERE ${where} ORDER BY id`)).rows.map((r) => r.id);
}
