import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { tempDir } from './helpers/store.js';
import { cliAsync as cli } from './helpers/cli.js';
import { expectEveryPair, kindsFor, makeKind, type KindStore } from './helpers/store-kinds.js';

/**
 * `init --store NAME` over every store kind: on a store in use it is idempotent and changes no row, and in a SQLite
 * file whose tables an SDK makes (Layout.schemaOwner: mem0, Mastra) it adds nothing at all (memory-warden's `memory`
 * table, view and trigger belong in its own layout's stores only); `--create` there is refused, changing nothing, and
 * so is `init --db` of such a file (no config: the SDK's tables tell).
 */
const NOW = Date.UTC(2026, 10, 29, 12, 0, 0);

it('every (engine, layout) pair the config accepts has a store kind in this suite', () => {
  expectEveryPair('init');
});

// Each kind's servers (PGlite, Qdrant) answer the CLI in turn with the other files' work: a budget, not a figure.
describe.each(kindsFor('init'))('init --store of a %s store', { timeout: 300_000 }, (name) => {
  let tmp: ReturnType<typeof tempDir>;
  let kind: KindStore;
  let config: string;
  beforeEach(async () => {
    tmp = tempDir('mw-init-kinds-');
    kind = await makeKind(name, tmp.dir, { now: NOW });
    await kind.add({ text: 'Nora Quist keeps bees', user: 'nora', at: NOW - 86_400_000 });
    kind.settle();
    config = join(tmp.dir, 'memory-warden.json');
    writeFileSync(config, JSON.stringify({ stateDb: join(tmp.dir, 'state.db'), snapshot: { root: join(tmp.dir, 'backups') }, stores: { s: kind.fileStore } }));
  }, 300_000);
  afterEach(async () => {
    await kind.close();
    tmp.cleanup();
  }, 300_000);

  /**
   * What the store's SQLite file holds, read through SQLite: its schema and every table's rows (a PostgreSQL store has
   * none: its rows are compared by dump). Not the raw bytes: a test writer's connection checkpoints the WAL into the
   * file when it lets go, whenever that is.
   */
  const files = () => {
    if (kind.engine !== 'sqlite') return [];
    const db = new Database(String(kind.fileStore.db), { fileMustExist: true });
    try {
      const schema = db.prepare(`SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name`).all() as { type: string; name: string }[];
      const rows = schema.filter((o) => o.type === 'table').map((t) => {
        const all = db.prepare(`SELECT * FROM "${t.name.replace(/"/g, '""')}"`).raw().all();
        return `${t.name}:${createHash('sha256').update(JSON.stringify(all, (_k, v) => (Buffer.isBuffer(v) ? v.toString('hex') : typeof v === 'bigint' ? String(v) : v))).digest('hex')}`;
      });
      return [JSON.stringify(schema), ...rows];
    } finally {
      db.close();
    }
  };

  it('twice: the second finds the schema up to date; no row changes; an SDK\'s file gets nothing', async () => {
    const rows = await kind.dump();
    const before = files();
    const first = await cli(['init', '--config', config, '--store', 's', '--json'], kind.env, 180_000);
    expect(first.code, first.stderr).toBe(0);
    const bytes = files();
    const again = await cli(['init', '--config', config, '--store', 's', '--json'], kind.env, 180_000);
    expect(again.code, again.stderr).toBe(0);
    expect(again.json().created ?? again.json().createdTable, again.stdout).toSatisfy((c: unknown) => c === false || (Array.isArray(c) && c.length === 0));
    expect(files()).toEqual(bytes);
    if (kind.engine !== 'sqlite') expect(await kind.dump()).toBe(rows);
    if (kind.layout !== 'warden' && kind.engine === 'sqlite') {
      expect(bytes).toEqual(before);
      expect(first.json()).toMatchObject({ created: [], notes: [expect.stringMatching(/memory-warden adds nothing to its files/)] });
      const create = await cli(['init', '--config', config, '--store', 's', '--create'], kind.env, 180_000);
      expect(create.code).toBe(2);
      expect(create.stderr.trim().split('\n')).toEqual([expect.stringMatching(/^memory-warden: init --create: store s is of the \w+ layout/)]);
      expect(files()).toEqual(bytes);
      // `init --db` reads no config: it knows the SDK's file by its tables, and adds nothing to it either.
      const byPath = await cli(['init', '--db', String(kind.fileStore.db)], {}, 180_000);
      expect(byPath.code).toBe(2);
      expect(byPath.stderr.trim().split('\n')).toEqual([expect.stringMatching(new RegExp(`^memory-warden: init --db: .* holds the tables of .* \\(layout ${kind.layout}\\); .*layout: ${kind.layout}$`))]);
      expect(files()).toEqual(bytes);
    }
  });
});
