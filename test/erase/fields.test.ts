/** Every field of an erased memory (subject, fact, source, id), in any form a record quotes it, leaves the state db. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { JOBS } from '../../jobs/index.js';
import { validateConfig, type Config } from '../../src/config/config.js';
import { erase, type EraseSelector } from '../../src/erase/erase.js';
import { openStateDb, recordRunEnd, recordRunStart } from '../../src/state/state.js';
import { recordVerdict } from '../../src/drift/record.js';
import { runJob } from '../../src/job/runner.js';
import { silentLogger } from '../../src/log/logger.js';
import { DAY_MS, toCanonical } from '../../src/time/instants.js';
import { makeStore, tempDir } from '../helpers/store.js';

/**
 * Every field of an erased memory (subject, fact, source, id) leaves memory-warden's records, in whatever form a
 * record quotes it: a real drift run refusing the memory's source path, and job runs and another memory's verdict
 * quoting each field JSON-escaped, percent-encoded, in another case, cut short, or with other separators.
 */
const NOW = Date.parse('2026-11-29T06:00:00Z');
const SUBJECT = 'Zanthe Quillory';
const PATH = '../../home/zanthe-quillory/notes.md';
const SOURCE = `file:${PATH}`;
const FACT = 'Zanthe Quillory keeps her passport in the desk drawer';
const ID = 'mem-zq-0042';

let tmp: { dir: string; cleanup: () => void };
beforeEach(() => {
  tmp = tempDir('mw-erase-fields-');
});
afterEach(() => tmp.cleanup());

const asciiJson = (t: string) => JSON.stringify(t).slice(1, -1).replace(/[a-z/]/g, (c) => (c === '/' ? '\\/' : `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`));
const pct = (t: string) => [...Buffer.from(t, 'utf8')].map((b) => `%${b.toString(16).toUpperCase().padStart(2, '0')}`).join('');

/** Each quote a record can hold of one field, by name; every one of them must be gone after the erase. */
const QUOTES: [string, string][] = [
  ['the path as refused', `path ${PATH} is outside the allowed roots`],
  ['the source JSON-escaped (every letter and slash)', asciiJson(SOURCE)],
  ['the path percent-encoded in a URL', `https://files.example/open?p=${pct(PATH)}`],
  ['the path in capitals', PATH.toUpperCase()],
  ['the path cut short', `could not read ${PATH.slice(0, 26)}…`],
  ['the path with other separators', '/home/zanthe_quillory/'],
  ['the fact cut in the middle', `the page says …${FACT.slice(10, 44)}…`],
  ['the fact percent-encoded', `q=${encodeURIComponent(FACT)}`],
  ['the subject as a slug', 'user zanthe-quillory'],
  ['the id in capitals', `row ${ID.toUpperCase()} is locked`],
  ['the id JSON-escaped', `row ${asciiJson(ID)} is locked`],
  ['the id percent-encoded', `https://x.example/memory/${pct(ID)}`],
];

function world(): { config: Config; stateDir: string; files: string } {
  const files = join(tmp.dir, 'files');
  const stateDir = join(tmp.dir, 'state');
  mkdirSync(files, { recursive: true });
  mkdirSync(stateDir, { recursive: true });
  writeFileSync(join(files, 'team.json'), JSON.stringify({ lead: 'Bob' }));
  const old = { created_at: toCanonical(NOW - 300 * DAY_MS), confirmed_at: toCanonical(NOW - 200 * DAY_MS) };
  const db = makeStore(join(tmp.dir, 'memory.db'), [
    { id: ID, subject: SUBJECT, fact: FACT, source: SOURCE, ...old },
    { id: 'mem-zq-0043', subject: SUBJECT, fact: 'She is allergic to penicillin', source: 'user message', ...old },
    { id: 'mem-bob-0001', subject: 'bob', fact: 'Bob is the team lead', source: `file:${join(files, 'team.json')}`, ...old },
    { id: 'mem-bob-0002', subject: 'bob', fact: 'Bob prefers pnpm', source: 'user message', ...old },
  ]);
  const config = validateConfig({
    stateDb: join(stateDir, 'state.db'),
    snapshot: { root: join(tmp.dir, 'backups') },
    stores: { agent: { db } },
    verify: {
      cacheDir: join(stateDir, 'cache'),
      allow: { fileRoots: [files] },
      rules: [{ name: 'file', match: { source: '^file:(?<path>.+)$', fact: 'team lead|passport' }, use: 'file', with: { path: '${path}', select: '$.lead', expect: { equals: 'Bob' } } }],
    },
  });
  return { config, stateDir, files };
}

/** Every content value of the state db, read back. */
function contents(stateDb: string): string[] {
  const db = new Database(stateDb, { readonly: true });
  try {
    return [
      ...(db.prepare(`SELECT result AS v FROM job_runs UNION ALL SELECT error FROM job_runs`).pluck().all() as (string | null)[]),
      ...(db.prepare(`SELECT evidence FROM drift_verdicts`).pluck().all() as (string | null)[]),
    ].filter((v): v is string => v !== null);
  } finally {
    db.close();
  }
}

describe('erase takes every field of an erased memory out of memory-warden\'s records', () => {
  const selectors: [string, EraseSelector][] = [
    ['--subject in other words', { subject: 'zanthe quillory' }],
    ['--user', { user: SUBJECT }],
    ['--ids', { ids: [ID, 'mem-zq-0043'] }],
  ];
  it.each(selectors)('%s: the drift run\'s refusal and each quote in job runs and another memory\'s verdict are scrubbed; Bob\'s stay', async (_label, sel) => {
    const w = world();
    await runJob('drift', { store: 'agent' }, { jobs: JOBS, config: w.config, log: silentLogger, now: () => NOW });
    const before = contents(w.config.stateDb).join('\n');
    expect(before).toContain('zanthe-quillory'); // the drift run recorded the refused path
    const state = openStateDb(w.config.stateDb);
    const planted: number[] = [];
    for (const [, quote] of QUOTES) {
      const run = recordRunStart(state, 'drift', 'agent', NOW);
      recordRunEnd(state, run, NOW, 'failed', `drift agent: ${quote}`);
      planted.push(run);
    }
    const bobs = recordRunStart(state, 'prune', 'agent', NOW);
    recordRunEnd(state, bobs, NOW, 'failed', 'row mem-bob-0002 is locked: Bob prefers pnpm');
    recordVerdict(state, {
      store: 'agent', memoryId: 'mem-bob-0002', verdict: 'unverifiable', verifier: null, checkedAt: NOW, needsPerson: true,
      evidence: { quotes: QUOTES.map(([, q]) => q), note: 'Bob prefers pnpm' },
    });
    state.close();

    await erase(w.config, 'agent', sel, { now: () => NOW });

    const db = new Database(w.config.stateDb, { readonly: true });
    const errors = db.prepare(`SELECT id, error FROM job_runs WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id`).all(JSON.stringify(planted)) as { id: number; error: string }[];
    const evidence = JSON.parse(db.prepare(`SELECT evidence FROM drift_verdicts WHERE memory_id = 'mem-bob-0002' ORDER BY id DESC LIMIT 1`).pluck().get() as string);
    const bobsError = db.prepare(`SELECT error FROM job_runs WHERE id = ?`).pluck().get(bobs);
    db.close();
    QUOTES.forEach(([what], i) => {
      expect(errors[i]!.error, what).toBe('[erased]');
      expect(evidence.quotes[i], what).toBe('[erased]');
    });
    expect(evidence.note).toBe('Bob prefers pnpm');
    expect(bobsError).toBe('row mem-bob-0002 is locked: Bob prefers pnpm');
    const after = contents(w.config.stateDb).join('\n').toLowerCase();
    for (const piece of ['quillory', 'passport', 'penicillin', ID]) expect(after, piece).not.toContain(piece);
    // Nor in any byte of the state db's files.
    for (const f of readdirSync(w.stateDir).filter((n) => n.startsWith('state.db')).map((n) => join(w.stateDir, n))) {
      const bytes = readFileSync(f).toString('latin1').toLowerCase();
      for (const piece of ['quillory', 'passport', 'penicillin', ID]) expect(bytes.includes(piece), `${piece} in ${f}`).toBe(false);
    }
    expect(existsSync(join(w.stateDir, 'erase.key'))).toBe(true);
  });

  it.each(selectors)('%s again: a verdict about an erased memory recorded after the erase (a drift task that came back late) goes whole', async (_label, sel) => {
    const w = world();
    await erase(w.config, 'agent', sel, { now: () => NOW });
    const state = openStateDb(w.config.stateDb);
    recordVerdict(state, { store: 'agent', memoryId: ID, verdict: 'contradicted', verifier: 'file', checkedAt: NOW + 1, needsPerson: true, evidence: { current: 'her passport moved to the safe' } });
    recordVerdict(state, { store: 'agent', memoryId: 'mem-bob-0002', verdict: 'unverifiable', verifier: null, checkedAt: NOW + 1, needsPerson: true, evidence: { reason: 'nothing to read' } });
    state.close();
    const again = await erase(w.config, 'agent', sel, { now: () => NOW + 2 });
    expect(again.memories).toBe(0);
    expect(again.places).toContainEqual({ place: 'state:drift_verdicts', count: 1 });
    const db = new Database(w.config.stateDb, { readonly: true });
    const left = db.prepare(`SELECT memory_id FROM drift_verdicts`).pluck().all();
    expect(left).toContain('mem-bob-0002');
    expect(left.filter((id) => String(id).startsWith('mem-zq'))).toEqual([]);
    db.close();
  });
});
