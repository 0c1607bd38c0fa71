import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { existsSync, readdirSync, statSync, writeFileSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir, makeStore } from '../helpers/store.js';
import { openStateDb, recordRunStart } from '../../src/state/state.js';
import { acquireMaintenanceLock } from '../../src/store/lock.js';
import { lockSnapshots } from '../../src/snapshot/layout.js';

const mode = (path: string) => statSync(path).mode & 0o777;

/** Everything memory-warden creates under the snapshot root and the state dir: 0600 files, 0700 folders. */
describe.each([0o022, 0o000, 0o002])('created files are private whatever the umask (%o)', (umask) => {
  let dir: string;
  let cleanup: () => void;
  let saved: number;
  beforeEach(() => {
    ({ dir, cleanup } = tempDir());
    saved = process.umask(umask);
  });
  afterEach(() => {
    process.umask(saved);
    cleanup();
  });

  it('the state db, its folder, WAL and shm', () => {
    const path = join(dir, 'state', 'nested', 'state.db');
    const db = openStateDb(path);
    recordRunStart(db, 'prune', 'agent', Date.now());
    expect(mode(join(dir, 'state', 'nested'))).toBe(0o700);
    for (const f of readdirSync(join(dir, 'state', 'nested'))) expect(mode(join(dir, 'state', 'nested', f)), f).toBe(0o600);
    expect(existsSync(`${path}-wal`)).toBe(true);
    db.close();
  });

  it('a state db an older version left 0644 is made private', () => {
    const path = join(dir, 'state.db');
    openStateDb(path).close();
    chmodSync(path, 0o644);
    openStateDb(path).close();
    expect(mode(path)).toBe(0o600);
  });

  it('the snapshot root lock file and its journal, and the store lock sidecar', () => {
    const root = join(dir, 'backups', 'agent');
    const lock = lockSnapshots(root, 'test');
    try {
      expect(mode(root)).toBe(0o700);
      const files = readdirSync(root);
      expect(files.some((f) => f.endsWith('-journal'))).toBe(true); // held: the journal is there too
      for (const f of files) expect(mode(join(root, f)), f).toBe(0o600);
    } finally {
      lock.release();
    }
    const store = makeStore(join(dir, 'm.db'));
    const storeLock = acquireMaintenanceLock(store);
    try {
      expect(mode(`${store}.warden-lock`)).toBe(0o600);
    } finally {
      storeLock.release();
    }
  });

  it('a path that cannot be created is one error naming it', () => {
    writeFileSync(join(dir, 'file'), 'x');
    expect(() => openStateDb(join(dir, 'file', 'state.db'))).toThrow(join(dir, 'file'));
  });
});
