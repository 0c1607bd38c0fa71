import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
import { chmodSync, linkSync, rmSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cli } from '../helpers/cli.js';
import { closeSockets, fifoAt, isRoot, nullDeviceAt, socketAt } from '../helpers/not-files.js';
import { ids, makeStore, tempDir } from '../helpers/store.js';
import { acquireMaintenanceLock, lockPathFor } from '../../src/store/lock.js';
import { ensurePrivateDir, lockSnapshots } from '../../src/snapshot/layout.js';
import { keepOwner } from '../../src/snapshot/stage.js';
import { eraseKey } from '../../src/erase/ledger.js';
import { openStateDb } from '../../src/state/state.js';
import { createLogger } from '../../src/log/logger.js';

const mode = (path: string) => statSync(path).mode & 0o7777;

/** Every entry under `dir`, links not followed: kind, mode, size and a hash of a regular file's bytes. */
function look(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (rel: string) => {
    for (const name of readdirSync(join(dir, rel))) {
      const path = join(dir, rel, name);
      const st = lstatSync(path);
      const what = st.isSymbolicLink() ? `link ${readlinkSync(path)}` : st.isFile() ? `file ${createHash('sha256').update(readFileSync(path)).digest('hex').slice(0, 12)}` : st.isDirectory() ? 'dir' : 'other';
      out[join(rel, name)] = `${what} ${(st.mode & 0o7777).toString(8)} ${st.isDirectory() ? '' : st.size}`;
      if (st.isDirectory()) walk(join(rel, name));
    }
  };
  walk('');
  return out;
}

const tablesOf = (path: string) => {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  try {
    return { tables: (db.prepare(`SELECT name FROM sqlite_schema ORDER BY name`).pluck().all() as string[]).join(','), journal: db.pragma('journal_mode', { simple: true }) };
  } finally {
    db.close();
  }
};

/**
 * memory-warden's own files are only ever regular files of their own. The store lock sidecar was followed through
 * a link: another database got a `holder` table, its journal mode switched WAL to DELETE and its mode 644 to 600; a
 * text file was made 600; an empty file was written over with a database; the store itself was made 600 with an
 * error about another maintenance job; a folder there was made 600.
 */
describe('the lock sidecar is a regular file of its own, never followed', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(async () => {
    await closeSockets();
    cleanup();
  });

  /** Each way a sidecar can be something else, made beside the store `<d>/a/s.db` (an 0644 agent store). */
  function sidecars(): [string, (d: string) => void][] {
    const sidecar = (d: string) => join(d, 'a', 's.db.warden-lock');
    const other = (d: string) => {
      const path = makeStore(join(d, 'other.db'), [{ id: 'o1' }]);
      const db = new Database(path);
      db.pragma('journal_mode = WAL');
      db.close();
      chmodSync(path, 0o644);
      return path;
    };
    const cases: [string, (d: string) => void][] = [
      ['a link to a text file', (d) => (writeFileSync(join(d, 'victim.txt'), 'hello\n', { mode: 0o644 }), symlinkSync('../victim.txt', sidecar(d)))],
      ['a link to another database', (d) => (other(d), symlinkSync('../other.db', sidecar(d)))],
      ['a link to an empty file', (d) => (writeFileSync(join(d, 'empty.txt'), '', { mode: 0o664 }), symlinkSync('../empty.txt', sidecar(d)))],
      ['a link to the store itself', (d) => symlinkSync('s.db', sidecar(d))],
      ['a link to nothing', (d) => symlinkSync('../made-through-the-link', sidecar(d))],
      ['a link loop', (d) => (symlinkSync('loop2', join(d, 'a', 'loop1')), symlinkSync('loop1', join(d, 'a', 'loop2')), symlinkSync('loop1', sidecar(d)))],
      ['a link to a folder', (d) => (mkdirSync(join(d, 'folder'), { mode: 0o755 }), symlinkSync('../folder', sidecar(d)))],
      ['a folder', (d) => mkdirSync(sidecar(d), { mode: 0o755 })],
      ['a FIFO', (d) => fifoAt(sidecar(d))],
      ['a hard link to the store', (d) => linkSync(join(d, 'a', 's.db'), sidecar(d))],
      ['a hard link to another database', (d) => linkSync(other(d), sidecar(d))],
      ['a text file', (d) => writeFileSync(sidecar(d), 'notes\n', { mode: 0o644 })],
      ['a copy of a store', (d) => (makeStore(sidecar(d), [{ id: 'c1' }]), chmodSync(sidecar(d), 0o644))],
    ];
    if (isRoot) cases.push(['a null device', (d) => nullDeviceAt(sidecar(d))]);
    return cases;
  }

  function setUp(make: (d: string) => void): string {
    mkdirSync(join(dir, 'a'));
    const store = makeStore(join(dir, 'a', 's.db'), [{ id: 'old', expires_at: '2000-01-01 00:00:00' }, { id: 'live' }]);
    chmodSync(store, 0o644);
    make(dir);
    return store;
  }

  it('acquireMaintenanceLock: one error naming the sidecar, at once, nothing changed', async () => {
    for (const [what, make] of sidecars()) {
      const store = setUp(make);
      const before = look(dir);
      // Refused for what it is, before any wait: not taken for a lock another job holds (that error says so).
      expect(() => acquireMaintenanceLock(store, { holder: 'test' }), what).toThrow(
        new RegExp(`^lock sidecar ${lockPathFor(store)}: [^\\n]+; memory-warden makes this file itself: move it away$`),
      );
      expect(look(dir), what).toEqual(before);
      cleanup();
      ({ dir, cleanup } = tempDir());
    }
  });

  it('the CLI (init, prune): exit 2, one line naming the sidecar, the store and the other files unchanged', async () => {
    for (const [what, make] of sidecars()) {
      const store = setUp(make);
      const stateDb = join(dir, 'state', 'state.db');
      openStateDb(stateDb).close();
      const before = look(dir);
      for (const argv of [['init', '--db', store], ['run', 'prune', '--db', store]]) {
        const r = cli(argv, { MEMORY_WARDEN_STATE: stateDb });
        expect(r.code, `${what}: ${argv[0]}`).toBe(2);
        expect(r.stderr, `${what}: ${argv[0]}`).toMatch(/^memory-warden: (prune s: )?lock sidecar \S+s\.db\.warden-lock: [^\n]+; memory-warden makes this file itself: move it away\n$/);
        expect(r.stderr).not.toMatch(/another maintenance job/);
      }
      const notState = (files: Record<string, string>) => Object.fromEntries(Object.entries(files).filter(([k]) => !k.startsWith('state'))); // the failed runs are recorded there
      expect(notState(look(dir)), what).toEqual(notState(before));
      expect(ids(store)).toEqual(['live', 'old']);
      cleanup();
      ({ dir, cleanup } = tempDir());
    }
  });

  it('another database behind a link keeps its tables, journal mode and mode', () => {
    const store = setUp(() => undefined);
    const other = makeStore(join(dir, 'other.db'));
    new Database(other).pragma('journal_mode = WAL');
    chmodSync(other, 0o644);
    const before = tablesOf(other);
    symlinkSync('../other.db', lockPathFor(store));
    expect(() => acquireMaintenanceLock(store)).toThrow(/it is a symbolic link, not a regular file/);
    expect(tablesOf(other)).toEqual(before);
    expect(before.journal).toBe('wal');
    expect(mode(other)).toBe(0o644);
  });

  it('a sidecar of its own is still taken: new, empty, or an older build\'s 0644 one, made 0600', () => {
    const store = setUp(() => undefined);
    const sidecar = lockPathFor(store);
    acquireMaintenanceLock(store).release();
    expect(mode(sidecar)).toBe(0o600);
    chmodSync(sidecar, 0o644);
    acquireMaintenanceLock(store).release();
    expect(mode(sidecar)).toBe(0o600);
    writeFileSync(sidecar, '', { mode: 0o644 }); // a run killed before SQLite wrote anything in it
    chmodSync(sidecar, 0o644);
    const lock = acquireMaintenanceLock(store, { holder: 'test' });
    expect(() => acquireMaintenanceLock(store)).toThrow(/another maintenance job is writing/);
    lock.release();
    expect(mode(sidecar)).toBe(0o600);
    expect(tablesOf(sidecar).tables).toBe('holder');
  });

  it('a socket at the sidecar path is refused too', async () => {
    const store = setUp(() => undefined);
    await socketAt(lockPathFor(store));
    expect(() => acquireMaintenanceLock(store)).toThrow(/it is a socket, not a regular file/);
  });
});

describe('the state db is a regular file of its own, never followed', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it('a link (to a state db, to nothing) or a second name: refused, naming it, nothing changed', () => {
    const real = join(dir, 'real', 'state.db');
    openStateDb(real).close();
    chmodSync(real, 0o644);
    symlinkSync(real, join(dir, 'link.db'));
    symlinkSync(join(dir, 'nowhere', 'state.db'), join(dir, 'dangling.db'));
    linkSync(real, join(dir, 'second-name.db'));
    const before = look(dir);
    expect(() => openStateDb(join(dir, 'link.db'))).toThrow(/^open state db \S+link\.db: it is a symbolic link, not a regular file; give stateDb a file of its own$/);
    expect(() => openStateDb(join(dir, 'dangling.db'))).toThrow(/^open state db \S+dangling\.db: it is a symbolic link/);
    expect(() => openStateDb(join(dir, 'second-name.db'))).toThrow(/^open state db \S+second-name\.db: it is a file with 2 names \(a hard link\), not one of its own; give stateDb a file of its own$/);
    expect(look(dir)).toEqual(before);
  });

  it('the CLI with a linked MEMORY_WARDEN_STATE: exit 2 before the job runs', () => {
    const store = makeStore(join(dir, 'm.db'), [{ id: 'old', expires_at: '2000-01-01 00:00:00' }]);
    writeFileSync(join(dir, 'notes.txt'), 'keep\n', { mode: 0o644 });
    symlinkSync(join(dir, 'notes.txt'), join(dir, 'state.db'));
    const r = cli(['run', 'prune', '--db', store], { MEMORY_WARDEN_STATE: join(dir, 'state.db') });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^memory-warden: stateDb \S+ is a symbolic link: [^\n]+\n$/);
    expect(mode(join(dir, 'notes.txt'))).toBe(0o644);
    expect(ids(store)).toEqual(['old']);
  });
});

describe('private folders and files are changed through a descriptor, never through a link', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it('a snapshot folder that is a link (to a folder, a file, nothing) is refused, its target unchanged', () => {
    mkdirSync(join(dir, 'elsewhere'), { mode: 0o755 });
    chmodSync(join(dir, 'elsewhere'), 0o755);
    writeFileSync(join(dir, 'file'), 'x', { mode: 0o644 });
    mkdirSync(join(dir, 'backups'));
    for (const [name, to] of [['agent', '../elsewhere'], ['file', '../file'], ['gone', '../gone']] as const) symlinkSync(to, join(dir, 'backups', name));
    const before = look(dir);
    expect(() => lockSnapshots(join(dir, 'backups', 'agent'), 'test')).toThrow(/backups\/agent: it is a symbolic link, not a folder of its own; memory-warden makes this folder private \(0700\) and never follows a link there: move it away$/);
    expect(() => ensurePrivateDir(join(dir, 'backups', 'file'))).toThrow(/backups\/file: it is a symbolic link, not a folder of its own/);
    expect(() => ensurePrivateDir(join(dir, 'backups', 'gone'))).toThrow(/backups\/gone/);
    expect(look(dir)).toEqual(before);
    ensurePrivateDir(join(dir, 'elsewhere')); // the folder itself is made private
    expect(mode(join(dir, 'elsewhere'))).toBe(0o700);
  });

  it('run snapshot with the store\'s snapshot folder a link: exit 2, nothing written where it points', () => {
    makeStore(join(dir, 's.db'), [{ id: 'm1' }]);
    mkdirSync(join(dir, 'other'), { mode: 0o755 });
    chmodSync(join(dir, 'other'), 0o755);
    mkdirSync(join(dir, 'backups'));
    symlinkSync('../other', join(dir, 'backups', 'a'));
    writeFileSync(join(dir, 'c.yaml'), `stateDb: ./state.db\nsnapshot:\n  root: ./backups\nstores:\n  a:\n    db: ./s.db\n`);
    const r = cli(['run', 'snapshot', '--config', join(dir, 'c.yaml')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^memory-warden: snapshot a: \S+backups\/a: it is a symbolic link, not a folder of its own[^\n]+\n$/);
    expect(readdirSync(join(dir, 'other'))).toEqual([]);
    expect(mode(join(dir, 'other'))).toBe(0o755);
  });

  it('a restore\'s staged copy is given the store\'s mode through its descriptor: a link there is refused', () => {
    writeFileSync(join(dir, 'victim'), 'x', { mode: 0o600 });
    symlinkSync(join(dir, 'victim'), join(dir, 'staged'));
    expect(() => keepOwner(join(dir, 'staged'), { mode: 0o666, uid: 0, gid: 0 }, createLogger({ level: 'silent' }))).toThrow(/staged copy \S+staged: ELOOP/);
    expect(mode(join(dir, 'victim'))).toBe(0o600);
  });
});

/** memory-warden's own files beside the store and the state db are read only as regular files: nothing waits on a FIFO. */
describe('own files that are read: at once, whatever is put there', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it('a restore journal that is a FIFO or a link to /dev/zero: check and prune exit 2 at once, naming it', () => {
    const store = makeStore(join(dir, 's.db'), [{ id: 'old', expires_at: '2000-01-01 00:00:00' }]);
    const journal = `${store}.warden-restore.json`;
    for (const make of [() => fifoAt(journal), () => symlinkSync('/dev/zero', journal)]) {
      make();
      for (const argv of [['check', '--db', store], ['run', 'prune', '--db', store]]) {
        const r = cli(argv, { MEMORY_WARDEN_STATE: join(dir, 'state.db') });
        expect(r.code, argv.join(' ')).toBe(2);
        expect(r.stderr, argv.join(' ')).toMatch(/^memory-warden: [^\n]*read restore journal \S+s\.db\.warden-restore\.json: not a regular file; [^\n]+\n$/);
      }
      rmSync(journal);
    }
    expect(ids(store)).toEqual(['old']);
  }, 30_000);

  it('an erase key that is a FIFO is refused at once', () => {
    const stateDb = join(dir, 'state.db');
    fifoAt(join(dir, 'erase.key'));
    expect(() => eraseKey({ stateDb })).toThrow(/^erase key: cannot read \S+erase\.key \(not a regular file\)$/);
  });
});
