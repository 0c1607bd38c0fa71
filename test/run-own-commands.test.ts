import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { ids, makeStore, tempDir } from './helpers/store.js';
import { cli } from './helpers/cli.js';

/**
 * `run erase` and `run restore` are listed in `run --help`: they are the erase and restore commands, with what they
 * take (a person, ids or a subject; a snapshot folder), not a bare `run NAME` that can only fail on its payload.
 */
let tmp: { dir: string; cleanup: () => void };
beforeEach(() => {
  tmp = tempDir('mw-run-own-');
});
afterEach(() => tmp.cleanup());

describe('run erase and run restore', () => {
  it('run --help lists them, and each one\'s help shows what it takes', () => {
    const help = cli(['run', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^\s+erase \[options\]/m);
    expect(help.stdout).toMatch(/^\s+restore \[options\] <dir>/m);
    const erase = cli(['run', 'erase', '--help']);
    for (const option of ['--user <id>', '--subject <text>', '--ids <id...>', '--dry-run', '--snapshots', '--timeout <seconds>']) expect(erase.stdout).toContain(option);
    const restore = cli(['run', 'restore', '--help']);
    for (const option of ['--force', '--dry-run', '--target <name>', '--timeout <seconds>']) expect(restore.stdout).toContain(option);
  });

  it('run erase --db X erases as erase does; without a selector it says which options it takes', () => {
    const db = makeStore(join(tmp.dir, 'memory.db'), [
      { id: 'a1', subject: 'alice', fact: 'Alice takes insulin daily' },
      { id: 'b1', subject: 'bob', fact: 'Bob prefers pnpm' },
    ]);
    const env = { MEMORY_WARDEN_STATE: join(tmp.dir, 'state.db') };
    const bare = cli(['run', 'erase', '--db', db], env);
    expect(bare.code).toBe(2);
    expect(bare.stderr.trim()).toBe('memory-warden: erase: give exactly one of --user ID, --subject TEXT, --ids ID...');
    const run = cli(['run', 'erase', '--db', db, '--subject', 'insulin', '--json'], env);
    expect(run.code, run.stderr).toBe(0);
    expect(run.json()).toMatchObject({ memories: 1, dryRun: false });
    expect(ids(db)).toEqual(['b1']);
  });

  it('run restore takes the folder it restores from, as restore does', () => {
    const db = makeStore(join(tmp.dir, 'memory.db'), [{ id: 'a1' }]);
    const bare = cli(['run', 'restore', '--db', db]);
    expect(bare.code).toBe(2);
    expect(bare.stderr).toMatch(/missing required argument 'dir'/);
    const missing = cli(['run', 'restore', join(tmp.dir, 'no-such-snapshot'), '--db', db, '--dry-run'], { MEMORY_WARDEN_STATE: join(tmp.dir, 'state.db') });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('no-such-snapshot');
    expect(ids(db)).toEqual(['a1']);
  });

  it('enqueue erase and enqueue restore point to the commands that take what those jobs need', () => {
    for (const job of ['erase', 'restore']) {
      const r = cli(['enqueue', job, '--store', 'x']);
      expect(r.code).toBe(2);
      expect(r.stderr.trim()).toBe(`memory-warden: enqueue ${job}: use memory-warden ${job} --store NAME …, which takes what it needs and runs it on the store's host`);
    }
  });
});
