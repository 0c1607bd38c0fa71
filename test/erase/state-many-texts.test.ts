/**
 * An erase of many memories scrubs the state db with the erased texts taken a chunk at a time (bounded memory):
 * the answers are those of every text at once, whichever chunk holds the text a record quotes.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { openStateDb, recordRunEnd, recordRunStart } from '../../src/state/state.js';
import { ERASED, scrubState, textMatcher } from '../../src/erase/state.js';
import { tempDir } from '../helpers/store.js';

const NOW = Date.parse('2026-11-29T06:00:00Z');
/** Three chunks' worth and more: texts 0 … 8,999, each its own. */
const TEXTS = Array.from({ length: 9000 }, (_, i) => `Quillory note ${i}: the courier comes on ${['Monday', 'Tuesday', 'Friday'][i % 3]} with parcel ${i * 7919}`);

let tmp: { dir: string; cleanup: () => void };
beforeEach(() => {
  tmp = tempDir('mw-erase-many-');
});
afterEach(() => tmp.cleanup());

describe('scrubbing the state db for many erased texts', () => {
  it('finds a quote of a text from the first, a middle and the last chunk, in errors, results and inside JSON; leaves the rest', () => {
    const state = openStateDb(join(tmp.dir, 'state.db'));
    try {
      const failed = (store: string, error: string) => {
        const id = recordRunStart(state, 'drift', store, NOW);
        recordRunEnd(state, id, NOW, 'failed', error);
        return id;
      };
      const ok = (store: string, result: unknown) => {
        const id = recordRunStart(state, 'drift', store, NOW);
        recordRunEnd(state, id, NOW, 'ok', result);
        return id;
      };
      const runs = {
        first: failed('agent', `verify failed: ${TEXTS[3]!.toUpperCase()}`),
        middle: failed('other', `page said ${encodeURIComponent(TEXTS[5001]!)}`),
        json: ok('agent', { checked: 12, quotes: ['nothing erased here', `${TEXTS[8999]!.slice(0, 40)}`], note: 'kept' }),
        none: failed('agent', 'drift agent: 12 rows from user message checked'),
        near: failed('other', 'Quillory note 9001: the courier comes on Sunday with parcel 0'),
      };
      const places = scrubState(state, { store: 'agent', ids: [], texts: TEXTS }, false);
      const col = (id: number, c: 'error' | 'result') => state.prepare(`SELECT ${c} FROM job_runs WHERE id = ?`).pluck().get(id);
      expect(col(runs.first, 'error')).toBe(ERASED);
      expect(col(runs.middle, 'error')).toBe(ERASED);
      expect(JSON.parse(col(runs.json, 'result') as string)).toEqual({ checked: 12, quotes: ['nothing erased here', ERASED], note: 'kept' });
      expect(col(runs.none, 'error')).toBe('drift agent: 12 rows from user message checked');
      expect(col(runs.near, 'error')).toBe('Quillory note 9001: the courier comes on Sunday with parcel 0');
      expect(places.find((p) => p.place === 'state:job_runs.error')?.count).toBe(2);
      expect(places.find((p) => p.place === 'state:job_runs.result')?.count).toBe(1);
    } finally {
      state.close();
    }
  });

  it('answers after prepare as without it, for the values prepared and for any other', () => {
    const values = [
      `x ${TEXTS[0]} y`, TEXTS[4000]!.slice(5, 45), TEXTS[8999]!.toLowerCase(), 'nothing of theirs', `%20${encodeURIComponent(TEXTS[6500]!)}`,
      'the courier comes on Sunday, says Quillory', JSON.stringify({ k: TEXTS[7777] }),
    ];
    const whole = textMatcher(TEXTS);
    const chunked = textMatcher(TEXTS);
    chunked.prepare(values);
    expect(values.map(chunked)).toEqual(values.map(whole));
    expect(values.map(chunked)).toEqual([true, true, true, false, true, false, true]);
    // A value not prepared is still answered (by every text at once).
    expect(chunked(`late record: ${TEXTS[4321]}`)).toBe(true);
    expect(chunked('late record about nobody')).toBe(false);
  });
});
