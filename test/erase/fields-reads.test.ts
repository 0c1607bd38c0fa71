/**
 * Which subjects and sources of the erased rows name only them is a question about the whole table (no index on
 * those columns): erase asks it only when one of memory-warden's records quotes one of them, in one pass that ends
 * once every value has been met on another row, and the real erase does not ask again what its plan answered.
 * Counted here as the statements that scan the memory table on the erase's own connection, by SQLite's query plan.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { validateConfig, type Config } from '../../src/config/config.js';
import { erase, type EraseSelector } from '../../src/erase/erase.js';
import { openStateDb, recordRunEnd, recordRunStart } from '../../src/state/state.js';
import { textMatcher } from '../../src/erase/state.js';
import { makeStore, tempDir, type Row } from '../helpers/store.js';

const NOW = Date.parse('2026-11-29T06:00:00Z');
const PATH_SOURCE = 'file:/home/zanthe-quillory/notes.md';

let tmp: { dir: string; cleanup: () => void };
beforeEach(() => {
  tmp = tempDir('mw-erase-reads-');
});
afterEach(() => {
  vi.restoreAllMocks();
  tmp.cleanup();
});

/** Many rows, so that a scan is a scan; the person's two rows among them, one with a source only it has. */
function world(): Config {
  const rows: Row[] = [];
  for (let i = 0; i < 3000; i++) rows.push({ id: `other-${i}`, subject: `user${i % 50}`, source: i % 2 ? 'user message' : `file:/srv/notes/${i}.md` });
  rows.splice(1500, 0, { id: 'zq-1', subject: 'Zanthe Quillory', fact: 'Zanthe keeps her passport in the desk drawer', source: PATH_SOURCE });
  rows.push({ id: 'zq-2', subject: 'Zanthe Quillory', fact: 'She is allergic to penicillin', source: 'user message' });
  const db = makeStore(join(tmp.dir, 'memory.db'), rows);
  return validateConfig({ stateDb: join(tmp.dir, 'state', 'state.db'), snapshot: { root: join(tmp.dir, 'backups') }, stores: { agent: { db } } });
}

function plant(config: Config, texts: string[]): number[] {
  const state = openStateDb(config.stateDb);
  try {
    return texts.map((t) => {
      const run = recordRunStart(state, 'drift', 'agent', NOW);
      recordRunEnd(state, run, NOW, 'failed', t);
      return run;
    });
  } finally {
    state.close();
  }
}

function errors(config: Config, runs: number[]): string[] {
  const db = new Database(config.stateDb, { readonly: true });
  try {
    return runs.map((id) => db.prepare(`SELECT error FROM job_runs WHERE id = ?`).pluck().get(id) as string);
  } finally {
    db.close();
  }
}

/** Statements run (any connection of this thread) whose query plan scans the memory table, with their SQL. */
function countScans(storePath: string): string[] {
  const scans: string[] = [];
  const proto = Object.getPrototypeOf(new Database(':memory:').prepare('SELECT 1')) as Record<string, (...a: unknown[]) => unknown>;
  const all = proto.all!;
  for (const method of ['all', 'get', 'run', 'iterate'] as const) {
    const orig = proto[method]!;
    vi.spyOn(proto, method).mockImplementation(function (this: Database.Statement, ...args: unknown[]) {
      const db = this.database;
      if (db.name === storePath && /\bmemory\b/.test(this.source) && !/^\s*(EXPLAIN|PRAGMA)/i.test(this.source)) {
        const plan = all.apply(db.prepare(`EXPLAIN QUERY PLAN ${this.source}`), args) as { detail: string }[];
        if (plan.some((p) => /^SCAN (main\.)?memory\b/.test(p.detail))) scans.push(this.source.replace(/\s+/g, ' ').trim());
      }
      return orig.apply(this, args);
    });
  }
  return scans;
}

describe('erase reads the memory table for the fields only when a record quotes one', () => {
  const selectors: [string, EraseSelector][] = [
    ['--ids', { ids: ['zq-1', 'zq-2'] }],
    ['--subject', { subject: 'zanthe quillory' }],
  ];

  it.each(selectors)('%s, no record quoting a field: no scan of the table for them', async (_label, sel) => {
    const config = world();
    const untouched = plant(config, ['drift agent: timed out reading /srv/notes/7.md']);
    const scans = countScans(config.stores.agent!.db);
    const r = await erase(config, 'agent', sel, { now: () => NOW });
    expect(r.memories).toBe(2);
    // --subject finds its rows by their text, which is a scan of its own; nothing else reads the table whole.
    expect(scans.filter((s) => !/instr\(lower\(subject\)/.test(s))).toEqual([]);
    expect(errors(config, untouched)).toEqual(['drift agent: timed out reading /srv/notes/7.md']);
  });

  it.each(selectors)('%s, records quoting the only source and a shared one: one pass per phase at most, the shared one kept', async (_label, sel) => {
    const config = world();
    const runs = plant(config, [`drift agent: path ${PATH_SOURCE.slice(5)} is outside the allowed roots`, 'drift agent: 12 rows from user message checked']);
    const scans = countScans(config.stores.agent!.db);
    await erase(config, 'agent', sel, { now: () => NOW });
    expect(errors(config, runs)).toEqual(['[erased]', 'drift agent: 12 rows from user message checked']);
    const fieldScans = scans.filter((s) => !/instr\(lower\(subject\)/.test(s));
    expect(fieldScans.length).toBeGreaterThan(0);
    expect(fieldScans.length).toBeLessThanOrEqual(2); // the plan's, and the real erase's for the value the plan found shared
  });
});

describe('textMatcher asks which fields name only the erased rows once, and only when a value holds one', () => {
  it('a value that quotes no field never asks; many values quoting fields ask once; a shared field does not match', () => {
    const onlyTheirs = vi.fn(() => new Set(['file:/home/zanthe-quillory/notes.md']));
    const holds = textMatcher(['She is allergic to penicillin'], undefined, { values: ['file:/home/zanthe-quillory/notes.md', 'user message'], onlyTheirs });
    expect(holds('a record about something else entirely')).toBe(false);
    expect(holds('SHE IS ALLERGIC TO PENICILLIN')).toBe(true);
    expect(onlyTheirs).not.toHaveBeenCalled();
    expect(holds('read /home/zanthe_quillory/notes.md')).toBe(true);
    expect(holds('from a user message')).toBe(false);
    expect(holds(JSON.stringify({ p: 'file:/home/zanthe-quillory/notes.md' }))).toBe(true);
    expect(onlyTheirs).toHaveBeenCalledTimes(1);
  });

  it('fields alone (no text long enough) still match', () => {
    const holds = textMatcher(['x'], undefined, { values: ['Zanthe Quillory'], onlyTheirs: () => new Set(['Zanthe Quillory']) });
    expect(holds('user zanthe-quillory')).toBe(true);
    expect(holds('user bob')).toBe(false);
  });
});
