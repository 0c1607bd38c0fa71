import { afterAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { tempDir } from '../helpers/store.js';
import { openStateDb } from '../../src/state/state.js';
import { scrubState } from '../../src/erase/state.js';
import { StringList } from '../../src/text/string-list.js';

const { dir, cleanup } = tempDir('mw-erase-records-');
afterAll(cleanup);

/**
 * The records about an erased memory go whole, found by its id as it is or folded (escaped, in capitals), in this
 * store only: the same records whether the state db holds fewer records than there are erased ids (each record's
 * id looked up among them) or more (the ids asked for a list at a time).
 */
describe('erase: the state db records about the erased memories', () => {
  // Ten more erased ids no record names: with no filler the store's records here (five) are fewer than the ids.
  const erased = ['M7', 'm8', 'k\\u0039', ...Array.from({ length: 10 }, (_, i) => `gone${i}`)];
  // Theirs: an id as it is, one folded (M7 in lower case), one escaped (k\u0039 is k9). Not theirs: another id, the
  // same id in another store.
  const theirs = ['M7', 'm7', 'm8', 'k9'];
  const others: [store: string, id: string][] = [['agent', 'm9'], ['other', 'm8'], ['other', 'M7']];

  for (const [how, filler] of [['fewer records than erased ids', 0], ['more records than erased ids', 5000]] as const) {
    it(how, () => {
      const state = openStateDb(join(dir, `${filler}.db`));
      try {
        const verdict = state.prepare(`INSERT INTO drift_verdicts (store, memory_id, verdict, checked_at) VALUES (?, ?, 'confirmed', '2026-12-01 00:00:00')`);
        const deletion = state.prepare(`INSERT INTO warden_deletions (store, memory_id, user_hmac, deleted_at) VALUES (?, ?, 'h', '2026-12-01 00:00:00')`);
        state.transaction(() => {
          for (const id of theirs) {
            verdict.run('agent', id);
            deletion.run('agent', id);
          }
          for (const [store, id] of others) {
            verdict.run(store, id);
            deletion.run(store, id);
          }
          for (let i = 0; i < filler; i++) {
            verdict.run('agent', `f${i}`);
            deletion.run('agent', `f${i}`);
          }
        })();
        const target = { store: 'agent', ids: StringList.from(erased), texts: [] };
        const count = (places: { place: string; count: number }[], place: string) => places.find((p) => p.place === place)?.count;
        const dry = scrubState(state, target, true);
        expect(count(dry, 'state:drift_verdicts')).toBe(theirs.length);
        expect(count(dry, 'state:warden_deletions')).toBe(theirs.length);
        expect(state.prepare(`SELECT count(*) FROM drift_verdicts`).pluck().get()).toBe(theirs.length + others.length + filler);

        const done = scrubState(state, target, false);
        expect(count(done, 'state:drift_verdicts')).toBe(theirs.length);
        expect(count(done, 'state:warden_deletions')).toBe(theirs.length);
        for (const table of ['drift_verdicts', 'warden_deletions']) {
          const left = state.prepare(`SELECT store, memory_id FROM ${table} WHERE memory_id NOT LIKE 'f%' ORDER BY store, memory_id`).raw().all();
          expect(left, table).toEqual([...others].sort((a, b) => (a.join('\0') < b.join('\0') ? -1 : 1)));
          expect(state.prepare(`SELECT count(*) FROM ${table} WHERE memory_id LIKE 'f%'`).pluck().get()).toBe(filler);
        }
      } finally {
        state.close();
      }
    });
  }
});
