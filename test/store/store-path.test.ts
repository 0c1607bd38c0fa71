import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cli } from '../helpers/cli.js';
import { tempDir } from '../helpers/store.js';

/**
 * A folder (or a FIFO, a device) given as a store's file: one line naming where it was given, `stores.agent.db` in
 * the config file or `--db`, exit 2, and nothing written into it, for every command that works on a store.
 */
describe('a store file that is no file', () => {
  let dir: string;
  let cleanup: () => void;
  beforeAll(() => ({ dir, cleanup } = tempDir('mw-store-path-')));
  afterAll(() => cleanup?.());

  const COMMANDS: string[][] = [
    ['check'], ['run', 'prune'], ['run', 'integrity'], ['run', 'snapshot'], ['run', 'drift'], ['review', 'list'],
    ['repair', 'dangling'], ['repair', 'timestamps'], ['erase', '--user', 'u1'], ['snapshots', 'list'],
  ];

  it.each([
    ['a folder', (p: string) => mkdirSync(p), 'a directory'],
    ['a FIFO', (p: string) => expect(spawnSync('mkfifo', [p]).status).toBe(0), 'a FIFO'],
  ])('%s in the config: every store command names stores.agent.db', (name, make, kind) => {
    const where = join(dir, name.replace(/\W+/g, '-'));
    mkdirSync(where);
    const db = join(where, 'memory.db');
    make(db);
    const config = join(where, 'warden.yaml');
    writeFileSync(config, JSON.stringify({ stateDb: join(where, 'state.db'), snapshot: { root: join(where, 'snapshots') }, stores: { agent: { db } } }));
    for (const args of COMMANDS) {
      const r = cli([...args, '--config', config, '--store', 'agent'], { MEMORY_WARDEN_CONFIG: '' });
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr.trimEnd().split('\n'), args.join(' ')).toHaveLength(1);
      expect(r.stderr, args.join(' ')).toContain(`memory-warden: config ${config}: stores.agent.db: ${db} is ${kind}, not a SQLite file (give the store's file)\n`);
    }
    if (kind === 'a directory') expect(readdirSync(db)).toEqual([]);
  });

  it('given as --db: names --db, init --create too', () => {
    const db = join(dir, 'folder.db');
    mkdirSync(db);
    for (const args of [['check'], ['run', 'prune'], ['review', 'list'], ['init', '--create']]) {
      const r = cli([...args, '--db', db], { MEMORY_WARDEN_CONFIG: '', MEMORY_WARDEN_STATE: join(dir, 'state.db') });
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toContain(`memory-warden: --db: ${db} is a directory, not a SQLite file`);
    }
    expect(readdirSync(db)).toEqual([]);
  });
});
