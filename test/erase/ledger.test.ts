import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { deletedFor, eraseKey, recordDeletions, userHmac } from '../../src/erase/ledger.js';
import { earlierIdMacs, erasedSnapshots, recordErasedIds, recordErasedSnapshots, selectorMac } from '../../src/erase/needles.js';
import { idMac } from '../../src/snapshot/targets/holds.js';
import { openStateDb } from '../../src/state/state.js';
import { tempDir } from '../helpers/store.js';

let tmp: { dir: string; cleanup: () => void };
beforeEach(() => {
  tmp = tempDir('mw-ledger-');
});
afterEach(() => tmp.cleanup());

describe('the ledger of what memory-warden deleted', () => {
  it('finds a user\'s deleted memories by keyed hash, per store, and never stores the user id', () => {
    const stateDb = join(tmp.dir, 'state', 'state.db');
    recordDeletions({ stateDb }, 'm', [{ id: 'u1', user: 'Zelda' }, { id: 'u2', user: 'zelda' }, { id: 'u3', user: null }, { id: 'u4', user: '' }], Date.UTC(2026, 10, 29));
    recordDeletions({ stateDb }, 'other', [{ id: 'o1', user: 'Zelda' }], Date.UTC(2026, 10, 29));
    const state = openStateDb(stateDb);
    const key = eraseKey({ stateDb });
    try {
      expect(deletedFor(state, key, 'm', 'Zelda')).toEqual(['u1']); // ids are exact: 'zelda' is someone else
      expect(deletedFor(state, key, 'm', 'zelda')).toEqual(['u2']);
      expect(deletedFor(state, key, 'm', 'nobody')).toEqual([]);
      expect(deletedFor(state, key, 'other', 'Zelda')).toEqual(['o1']);
      expect(state.prepare('SELECT count(*) AS n FROM warden_deletions').get()).toEqual({ n: 3 });
    } finally {
      state.close();
    }
    expect(readFileSync(stateDb).toString('latin1').toLowerCase()).not.toContain('zelda');
  });

  it('one key per installation, private, stable; another key gives other hashes; a damaged key is one clear error', () => {
    const stateDb = join(tmp.dir, 'state.db');
    const k = eraseKey({ stateDb });
    expect(eraseKey({ stateDb })).toEqual(k);
    expect(statSync(join(tmp.dir, 'erase.key')).mode & 0o777).toBe(0o600);
    expect(userHmac(k, 'zelda')).not.toEqual(userHmac(eraseKey({ stateDb: join(tmp.dir, 'elsewhere', 'state.db') }), 'zelda'));
    writeFileSync(join(tmp.dir, 'erase.key'), 'not a key');
    expect(() => eraseKey({ stateDb })).toThrow(/erase key: .*erase\.key is not 64 hex digits/);
  });

  it('keeps what each selector erased as keyed hashes, per store, for the next erase of the same person; no id or text in the file', () => {
    const stateDb = join(tmp.dir, 'state', 'state.db');
    const key = eraseKey({ stateDb });
    const state = openStateDb(stateDb);
    try {
      const sel = selectorMac(key, { subject: 'Zelda Quorn' });
      // --subject matches in any ASCII case, so the same person asked in another case is the same selector.
      expect(selectorMac(key, { subject: '  zelda QUORN ' })).toBe(sel);
      expect(selectorMac(key, { user: 'Zelda Quorn' })).not.toBe(sel);
      expect(selectorMac(key, { user: 'zelda' })).not.toBe(selectorMac(key, { user: 'Zelda' })); // user ids are exact
      expect(selectorMac(key, { ids: ['b', 'a', 'a'] })).toBe(selectorMac(key, { ids: ['a', 'b'] }));
      recordErasedIds(state, key, 'm', sel, ['zq-0001', 'zq-0002']);
      recordErasedIds(state, key, 'm', sel, ['zq-0002', 'zq-0003']); // a second run adds, never duplicates
      recordErasedIds(state, key, 'other', sel, ['o-1']);
      expect(earlierIdMacs(state, 'm', sel).sort()).toEqual(['zq-0001', 'zq-0002', 'zq-0003'].map((id) => idMac(key, id)).sort());
      expect(earlierIdMacs(state, 'other', sel)).toEqual([idMac(key, 'o-1')]);
      expect(earlierIdMacs(state, 'm', selectorMac(key, { subject: 'someone else' }))).toEqual([]);
    } finally {
      state.close();
    }
    recordErasedSnapshots(stateDb, 'm', ['2026-11-20T020000Z'], Date.UTC(2026, 10, 29));
    recordErasedSnapshots(stateDb, 'm', ['2026-11-20T020000Z', '2026-11-21T020000Z'], Date.UTC(2026, 10, 30));
    expect([...erasedSnapshots(stateDb, 'm')].sort()).toEqual(['2026-11-20T020000Z', '2026-11-21T020000Z']);
    expect(erasedSnapshots(stateDb, 'other').size).toBe(0);
    const bytes = [stateDb, `${stateDb}-wal`].filter((f) => existsSync(f)).map((f) => readFileSync(f).toString('latin1').toLowerCase()).join('');
    for (const piece of ['zelda', 'quorn', 'zq-000', 'o-1']) expect(bytes, piece).not.toContain(piece);
  });
});
