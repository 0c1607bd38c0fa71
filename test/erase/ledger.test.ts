import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { deletedFor, eraseKey, recordDeletions, userHmac } from '../../src/erase-ledger.js';
import { openStateDb } from '../../src/state.js';
import { tempDir } from '../helpers/store.js';

let tmp: { dir: string; cleanup: () => void };
beforeEach(() => {
  tmp = tempDir('mw-ledger-');
});
afterEach(() => tmp.cleanup());

describe('the ledger of what memory-warden deleted', () => {
  it('finds a user\'s deleted memories by keyed hash, per store, and never stores the user id', () => {
    const stateDb = join(tmp.dir, 'state', 'state.db');
    recordDeletions(stateDb, 'm', [{ id: 'u1', user: 'Zelda' }, { id: 'u2', user: 'zelda' }, { id: 'u3', user: null }, { id: 'u4', user: '' }], Date.UTC(2026, 10, 29));
    recordDeletions(stateDb, 'other', [{ id: 'o1', user: 'Zelda' }], Date.UTC(2026, 10, 29));
    const state = openStateDb(stateDb);
    try {
      expect(deletedFor(state, stateDb, 'm', 'Zelda')).toEqual(['u1']); // ids are exact: 'zelda' is someone else
      expect(deletedFor(state, stateDb, 'm', 'zelda')).toEqual(['u2']);
      expect(deletedFor(state, stateDb, 'm', 'nobody')).toEqual([]);
      expect(deletedFor(state, stateDb, 'other', 'Zelda')).toEqual(['o1']);
      expect(state.prepare('SELECT count(*) AS n FROM warden_deletions').get()).toEqual({ n: 3 });
    } finally {
      state.close();
    }
    expect(readFileSync(stateDb).toString('latin1').toLowerCase()).not.toContain('zelda');
  });

  it('one key per installation, private, stable; another key gives other hashes; a damaged key is one clear error', () => {
    const stateDb = join(tmp.dir, 'state.db');
    const k = eraseKey(stateDb);
    expect(eraseKey(stateDb)).toEqual(k);
    expect(statSync(join(tmp.dir, 'erase.key')).mode & 0o777).toBe(0o600);
    expect(userHmac(k, 'zelda')).not.toEqual(userHmac(eraseKey(join(tmp.dir, 'elsewhere', 'state.db')), 'zelda'));
    writeFileSync(join(tmp.dir, 'erase.key'), 'not a key');
    expect(() => eraseKey(stateDb)).toThrow(/erase key: .*erase\.key is not 64 hex digits/);
  });
});
