import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { chmodSync, linkSync, mkdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cli } from './helpers/cli.js';
import { makeStore, tempDir } from './helpers/store.js';
import { openStateDb } from '../src/state/state.js';

/**
 * memory-warden's records never go into a store. A stateDb that was a store's own file (by the same path written
 * another way, a link, or mem0's vector file) had job_runs, digest_deliveries, erase_receipts … added to the agent's
 * data by the first command that recorded a run.
 */
describe('the state db is none of the stores\' files', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  const tables = (path: string) => {
    const db = new Database(path, { readonly: true });
    try {
      return (db.prepare(`SELECT name FROM sqlite_master ORDER BY name`).pluck().all() as string[]).join(',');
    } finally {
      db.close();
    }
  };

  const refused: [string, (d: string) => { stateDb: string; extra?: string }][] = [
    ['the same path', () => ({ stateDb: './m.db' })],
    ['the same file written another way', () => ({ stateDb: './sub/../m.db' })],
    ['a symbolic link to it', (d) => (symlinkSync(join(d, 'm.db'), join(d, 'link.db')), { stateDb: './link.db' })],
    ['a hard link to it', (d) => (linkSync(join(d, 'm.db'), join(d, 'hard.db')), { stateDb: './hard.db' })],
    ['a mem0 store\'s SQLite vector file', (d) => (makeStore(join(d, 'vec.db')), { stateDb: './vec.db', extra: mem0(d) })],
    ['a mem0 store\'s entity vector file, as the SDK names it', (d) => (makeStore(join(d, 'vec_entities.db')), { stateDb: './vec_entities.db', extra: mem0(d) })],
    ['a Mastra store\'s vector file (mastra.vectorDb)', (d) => (makeStore(join(d, 'mvec.db')), { stateDb: './mvec.db', extra: mastra(d) })],
  ];

  function mastra(d: string): string {
    return `  assistant:\n    db: ${join(d, 'mastra.db')}\n    layout: mastra\n    mastra:\n      vectorDb: ${join(d, 'mvec.db')}\n`;
  }

  function mem0(d: string): string {
    return `  assistant:\n    db: ${join(d, 'history.db')}\n    layout: mem0\n    mem0:\n      vectorStore: sqlite\n      vectorDb: ${join(d, 'vec.db')}\n`;
  }

  it.each(refused)('%s: refused, one line, exit 2, the store untouched', (_, make) => {
    makeStore(join(dir, 'm.db'), [{ id: 'm1' }]);
    mkdirSync(join(dir, 'sub'));
    const { stateDb, extra } = make(dir);
    writeFileSync(join(dir, 'c.yaml'), `stateDb: ${stateDb}\nstores:\n  a:\n    db: ./m.db\n${extra ?? ''}`);
    const target = join(dir, stateDb);
    const before = tables(target);
    const r = cli(['run', 'integrity', '--store', 'a', '--config', join(dir, 'c.yaml')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^memory-warden: stateDb \S+ is (the|a vector) file of store (a|assistant) \([^)]+\): memory-warden keeps its records apart from every store; give stateDb another file\n$/);
    expect(tables(target)).toBe(before);
    expect(before).not.toMatch(/job_runs/);
  });

  it('MEMORY_WARDEN_STATE naming the file given as --db, with no config: refused the same way', () => {
    makeStore(join(dir, 'm.db'), [{ id: 'm1' }]);
    const before = tables(join(dir, 'm.db'));
    for (const argv of [['check', '--db', join(dir, 'm.db')], ['run', 'prune', '--db', join(dir, 'm.db')]]) {
      const r = cli(argv, { MEMORY_WARDEN_STATE: join(dir, 'm.db') });
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/^memory-warden: stateDb .* is the file of store m /);
    }
    expect(tables(join(dir, 'm.db'))).toBe(before);
  });

  it('a state db of its own beside the store: the run is recorded there, not in the store', () => {
    makeStore(join(dir, 'm.db'), [{ id: 'm1' }]);
    const before = tables(join(dir, 'm.db'));
    writeFileSync(join(dir, 'c.yaml'), `stateDb: ./state.db\nstores:\n  a:\n    db: ./m.db\n`);
    const r = cli(['run', 'integrity', '--config', join(dir, 'c.yaml')]);
    expect(r.code).toBe(0);
    expect(tables(join(dir, 'm.db'))).toBe(before);
    expect(tables(join(dir, 'state.db'))).toMatch(/job_runs/);
  });

  it('a state db is never made inside a file that holds other tables, however it was named', () => {
    makeStore(join(dir, 'm.db'), [{ id: 'm1' }]);
    chmodSync(join(dir, 'm.db'), 0o644); // the agent's mode, which a state db's 0600 would take from its other readers
    const before = tables(join(dir, 'm.db'));
    expect(() => openStateDb(join(dir, 'm.db'))).toThrow(/open state db .*m\.db: the file holds tables memory-warden did not make \(.*memory.*\): it is not a state db; give stateDb a file of its own/);
    expect(tables(join(dir, 'm.db'))).toBe(before);
    expect(statSync(join(dir, 'm.db')).mode & 0o777).toBe(0o644);
    // The same with a user_version of the agent's own (mem0 and agents set one): the steps after it would have run.
    for (const version of [1, 3]) {
      const agent = new Database(join(dir, 'm.db'));
      agent.pragma(`user_version = ${version}`);
      agent.close();
      const tablesNow = tables(join(dir, 'm.db'));
      expect(() => openStateDb(join(dir, 'm.db'))).toThrow(/it is not a state db/);
      expect(tables(join(dir, 'm.db'))).toBe(tablesNow);
    }
    // An older build's state db (its first table, no version yet) is brought up to date.
    const old = new Database(join(dir, 'old.db'));
    old.exec(`CREATE TABLE job_runs (id INTEGER PRIMARY KEY, job TEXT NOT NULL, store TEXT, started_at TEXT NOT NULL, finished_at TEXT, outcome TEXT NOT NULL, result TEXT, error TEXT)`);
    old.close();
    openStateDb(join(dir, 'old.db')).close();
    expect(tables(join(dir, 'old.db'))).toMatch(/digest_deliveries/);
  });

  it('init never puts the memory table into the state db', () => {
    makeStore(join(dir, 'm.db'), [{ id: 'm1' }]);
    const home = join(dir, 'home');
    expect(cli(['run', 'integrity', '--db', join(dir, 'm.db')], { HOME: home }).code).toBe(0);
    const state = join(home, '.local/state/memory-warden/state.db');
    const before = tables(state);
    expect(before).toMatch(/job_runs/);
    for (const argv of [['init', '--db', state], ['init', '--db', state, '--create']]) {
      const r = cli(argv, { HOME: home });
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/state\.db is memory-warden's state db \(its job runs and receipts\), not a store; init makes a store in a file of its own\n$/);
    }
    expect(tables(state)).toBe(before);
  });
});
