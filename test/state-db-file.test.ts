import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cli } from './helpers/cli.js';
import { ids, makeStore, tempDir } from './helpers/store.js';
import { closeSockets, fifoAt, isRoot, nullDeviceAt, socketAt } from './helpers/not-files.js';
import { openStateDb } from '../src/state/state.js';

const mode = (path: string) => statSync(path).mode & 0o7777;

/**
 * The state db is a regular file or a path where one is made. A device passed every check (an empty /dev/null
 * reads as a new database) and was then made 0600 as memory-warden's own; a FIFO would hold the open.
 */
describe('a state db that is not a file is refused before anything is done', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(async () => {
    await closeSockets();
    cleanup();
  });

  /** What a careless stateDb can name, each made in the temp folder (devices only as root: mknod needs it). */
  async function notFiles(): Promise<[string, string, RegExp][]> {
    mkdirSync(join(dir, 'folder'), { mode: 0o755 });
    const cases: [string, string, RegExp][] = [
      ['a FIFO', fifoAt(join(dir, 'fifo')), /a FIFO/],
      ['a socket', await socketAt(join(dir, 'sock')), /a socket/],
      ['a folder', join(dir, 'folder'), /a directory/],
    ];
    if (isRoot) {
      const nul = nullDeviceAt(join(dir, 'mynull'));
      const blk = join(dir, 'myblock');
      expect(spawnSync('mknod', ['-m', '644', blk, 'b', '7', '200']).status).toBe(0); // a loop device number, never opened
      symlinkSync(nul, join(dir, 'null-link'));
      cases.push(['a null device', nul, /a character device/], ['a block device', blk, /a block device/], ['a link to a null device', join(dir, 'null-link'), /a symbolic link/]);
    }
    return cases;
  }

  it('openStateDb: one error naming the file, its mode and contents unchanged, at once', async () => {
    for (const [what, path, kind] of await notFiles()) {
      const before = mode(path);
      // At once: refused for what it is, not after SQLite's busy timeout (whose error would say so instead).
      expect(() => openStateDb(path), what).toThrow(new RegExp(`^open state db ${path}: it is ${kind.source}, not a regular file; give stateDb a file of its own$`));
      expect(mode(path), what).toBe(before);
    }
  });

  it('the CLI, by MEMORY_WARDEN_STATE and by stateDb: exit 2, one line naming stateDb, the store not pruned', async () => {
    const store = makeStore(join(dir, 'm.db'), [{ id: 'old', expires_at: '2000-01-01 00:00:00' }, { id: 'live' }]);
    for (const [what, path, kind] of await notFiles()) {
      const before = mode(path);
      const byEnv = cli(['run', 'prune', '--db', store], { MEMORY_WARDEN_STATE: path });
      expect(byEnv.code, what).toBe(2);
      expect(byEnv.stderr, what).toMatch(new RegExp(`^memory-warden: stateDb \\S+ is ${kind.source}: memory-warden keeps its records in a regular file it makes itself; give stateDb a file path\\n$`));
      writeFileSync(join(dir, 'c.yaml'), `stateDb: ${path}\nstores:\n  a:\n    db: ./m.db\n`);
      const byConfig = cli(['run', 'prune', '--config', join(dir, 'c.yaml')]);
      expect(byConfig.code, what).toBe(2);
      expect(byConfig.stderr, what).toBe(byEnv.stderr.replace(/\S+(?= is )/, path));
      expect(mode(path), what).toBe(before);
    }
    expect(ids(store)).toEqual(['live', 'old']);
  });

  it('a state db of its own, missing or a regular file, still records', () => {
    const store = makeStore(join(dir, 'm.db'));
    expect(cli(['run', 'integrity', '--db', store], { MEMORY_WARDEN_STATE: join(dir, 'new', 'state.db') }).code).toBe(0);
    writeFileSync(join(dir, 'empty.db'), '');
    expect(cli(['run', 'integrity', '--db', store], { MEMORY_WARDEN_STATE: join(dir, 'empty.db') }).code).toBe(0);
    expect(statSync(join(dir, 'empty.db')).size).toBeGreaterThan(0);
  });
});
