import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { chmodSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { makeStore, tempDir } from '../helpers/store.js';
import { acquireMaintenanceLock, lockPathFor } from '../../src/store/lock.js';
import { openDatabase } from '../../src/store/sqlite.js';
import { openPrivateDb } from '../../src/store/private-file.js';
import { openStateDb } from '../../src/state/state.js';

/**
 * POSIX record locks belong to the process, and closing ANY descriptor of a file drops every lock the process
 * holds on it, SQLite's included ("How To Corrupt An SQLite Database File", 2.2). So while one connection of this
 * process holds a SQLite file, nothing else in the process may open and close that file itself. Each case here
 * holds a file through one connection, does what a second job of the same worker would do, and then asks another
 * process whether it can write the file: it must still be refused. (The maintenance lock was lost this way to
 * every other process as soon as a second job of the worker tried it on the same store.)
 */
const DRIVER = createRequire(import.meta.url).resolve('better-sqlite3');

/** A private file opened and closed again, as the state db and lock sidecars are. */
const openPrivate = (path: string) => openPrivateDb(path, { name: 'test file', fix: 'none', check: () => {} }).close();

/** Can another process take the write lock of `path` right now? */
function otherProcessCanWrite(path: string): boolean {
  const r = spawnSync(process.execPath, ['-e', `
    const db = new (require(${JSON.stringify(DRIVER)}))(process.argv[1], { timeout: 0 });
    try { db.exec('BEGIN IMMEDIATE'); db.exec('ROLLBACK'); console.log('wrote'); } catch (e) { console.log(e.code); }`, path], { encoding: 'utf8' });
  expect(r.stderr).toBe('');
  return r.stdout.trim() === 'wrote';
}

describe('no descriptor of our own closes under a connection\'s lock', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it('a second job trying the maintenance lock of a store this process holds leaves it held for every other process', () => {
    const store = makeStore(join(dir, 'm.db'));
    const first = acquireMaintenanceLock(store, { holder: 'prune' });
    try {
      expect(otherProcessCanWrite(lockPathFor(store))).toBe(false);
      expect(() => acquireMaintenanceLock(store, { holder: 'snapshot' })).toThrow(/another maintenance job is writing/);
      expect(() => acquireMaintenanceLock(store, { holder: 'erase' })).toThrow(/another maintenance job is writing/);
      expect(otherProcessCanWrite(lockPathFor(store))).toBe(false);
    } finally {
      first.release();
    }
    expect(otherProcessCanWrite(lockPathFor(store))).toBe(true);
  });

  it('opening a store this process is writing through another connection keeps that connection\'s lock', () => {
    const store = makeStore(join(dir, 'm.db'));
    const raw = new Database(store);
    raw.pragma('journal_mode = DELETE'); // a rollback journal: the lock is on the store file itself
    raw.exec('BEGIN IMMEDIATE');
    try {
      expect(otherProcessCanWrite(store)).toBe(false);
      for (const readonly of [false, true]) openDatabase(store, { readonly }).close();
      expect(otherProcessCanWrite(store)).toBe(false);
    } finally {
      raw.exec('ROLLBACK');
      raw.close();
    }
  });

  it('opening the state db again, and making sure of its mode, keeps a write another connection holds on it', () => {
    const path = join(dir, 'state', 'state.db');
    const writer = openStateDb(path);
    writer.pragma('journal_mode = DELETE'); // so its write lock is a lock on the file we would otherwise reopen
    writer.exec('BEGIN IMMEDIATE');
    try {
      expect(otherProcessCanWrite(path)).toBe(false);
      chmodSync(path, 0o644); // a mode to correct, as after a copy by hand
      openPrivate(path);
      expect(statSync(path).mode & 0o777).toBe(0o600);
      expect(otherProcessCanWrite(path)).toBe(false);
    } finally {
      writer.exec('ROLLBACK');
      writer.close();
    }
    expect(otherProcessCanWrite(path)).toBe(true);
  });

  it('a new private file is made 0600 whatever the umask, and a missing directory is a one-line error', () => {
    const path = join(dir, 'new.db');
    const umask = process.umask(0o277); // a umask that would leave it read-only to its owner
    try {
      openPrivate(path);
    } finally {
      process.umask(umask);
    }
    expect(statSync(path).mode & 0o777).toBe(0o600);
    openPrivate(path); // and again: an existing file is fine
    expect(() => openPrivate(join(dir, 'no', 'such', 'dir', 'x.db'))).toThrow(/^create .*x\.db: ENOENT$/);
  });
});
