import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { JOBS } from '../../jobs/index.js';
import Database from 'better-sqlite3';
import { copyFileSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { validateConfig, type Config } from '../../src/config/config.js';
import { erase, type EraseReceipt, type EraseSelector } from '../../src/erase/erase.js';
import { listReceipts } from '../../src/erase/receipts.js';
import { openStateDb, recordRunEnd, recordRunStart } from '../../src/state/state.js';
import { openStore } from '../../src/layouts/open.js';
import { listReview } from '../../src/drift/review.js';
import { recordVerdict } from '../../src/drift/record.js';
import { previewDigest } from '../../src/digest/digest.js';
import { runJob } from '../../src/job/runner.js';
import { silentLogger } from '../../src/log/logger.js';
import { DAY_MS, toCanonical } from '../../src/time/instants.js';
import { makeStore, tempDir } from '../helpers/store.js';
import { startSmtp, type TestSmtp } from '../helpers/smtp.js';
import { qdrantTarget, type QdrantTarget } from '../helpers/qdrant-server.js';
import { Mem0Fixture } from '../layouts/mem0-fixture.js';

/**
 * Erase reaches every copy memory-warden itself made of a person's text: drift verdicts (evidence, proposed
 * replacement), job runs (results, errors), digest deliveries, the ledger of what prune deleted, staged copies
 * killed jobs left behind. Checked the hard way: every byte of every file in the store's folder, the state dir and
 * the snapshot root (db, -wal, -shm, journals), in the encodings a copy could take.
 */
const NOW = Date.parse('2026-11-29T06:00:00Z');
const HOUR = 3_600_000;
const log = silentLogger;

const F1 = 'Alice Nakamura runs Postgres 15 on her laptop';
const F2 = 'Alice Nakamura takes insulin twice a day';
const F3 = 'Alice Nakamura "Ali" moved to\n4 Kelp Road'; // quotes and a newline: JSON escapes them
const READING = '16.1 (laptop at 9 Brine Lane)';

let tmp: { dir: string; cleanup: () => void };
let smtp: TestSmtp;
beforeEach(async () => {
  tmp = tempDir('mw-erase-copies-');
  smtp = await startSmtp();
});
afterEach(async () => {
  await smtp.close();
  tmp.cleanup();
});

function* filesUnder(dir: string): Generator<string> {
  if (!existsSync(dir)) return;
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (lstatSync(p).isDirectory()) yield* filesUnder(p);
    else if (lstatSync(p).isFile()) yield p;
  }
}

/** The forms a text can take in a file: UTF-8, JSON-escaped, and (folded) any ASCII case. */
function whereFound(dirs: string[], texts: string[], foldedToo: string[] = []): string[] {
  const hits: string[] = [];
  for (const dir of dirs) {
    for (const f of filesUnder(dir)) {
      const bytes = readFileSync(f);
      const low = Buffer.from(bytes.toString('latin1').toLowerCase(), 'latin1');
      for (const t of texts) {
        for (const form of new Set([t, JSON.stringify(t).slice(1, -1)])) if (bytes.includes(Buffer.from(form, 'utf8'))) hits.push(`${f}: ${JSON.stringify(form)}`);
      }
      for (const t of foldedToo) if (low.includes(Buffer.from(t.toLowerCase(), 'utf8'))) hits.push(`${f}: ${t} (any case)`);
    }
  }
  return hits;
}

interface World {
  config: Config;
  storeDir: string;
  stateDir: string;
  snapRoot: string;
  storeDb: string;
}

/** A warden store with Alice's and Bob's rows, a drift run, a sent digest, a failed job, leftovers of killed jobs. */
async function warden(): Promise<World> {
  const storeDir = join(tmp.dir, 'agent');
  const stateDir = join(tmp.dir, 'state');
  const snapRoot = join(tmp.dir, 'backups');
  const files = join(tmp.dir, 'configs');
  for (const d of [storeDir, stateDir, files]) mkdirSync(d, { recursive: true });
  writeFileSync(join(files, 'app.json'), JSON.stringify({ database: { version: READING } }));
  writeFileSync(join(files, 'team.json'), JSON.stringify({ lead: 'ALICE NAKAMURA' }));
  const storeDb = makeStore(join(storeDir, 'memory.db'), [
    { id: 'a1', subject: 'alice', fact: F1, source: 'ask:app.json', created_at: toCanonical(NOW - 300 * DAY_MS), confirmed_at: toCanonical(NOW - 200 * DAY_MS) },
    { id: 'a2', subject: 'alice', fact: F2, source: 'user message', created_at: toCanonical(NOW - HOUR) },
    { id: 'a3', subject: 'alice', fact: F3, source: 'user message', created_at: toCanonical(NOW - 2 * HOUR) },
    { id: 'b1', subject: 'bob', fact: 'Bob prefers pnpm', source: 'user message', created_at: toCanonical(NOW - HOUR) },
    { id: 'b2', subject: 'bob', fact: 'Bob is the team lead', source: 'team:team.json', created_at: toCanonical(NOW - 300 * DAY_MS), confirmed_at: toCanonical(NOW - 190 * DAY_MS) },
  ]);
  const config = validateConfig({
    stateDb: join(stateDir, 'state.db'),
    snapshot: { root: snapRoot },
    stores: { agent: { db: storeDb } },
    smtp: smtp.config(),
    digest: { to: ['owner@example.org'], from: 'memory-warden <warden@example.org>' },
    verify: {
      cacheDir: join(stateDir, 'cache'),
      allow: { fileRoots: [files] },
      rules: [
        // a person must decide: the evidence keeps the reading and the proposed replacement
        { name: 'db', match: { source: '^ask:(?<path>.+)$', fact: 'Postgres 15' }, use: 'file', with: { path: '${path}', select: '$.database.version', expect: '^15' }, replacement: 'Alice Nakamura runs Postgres ${value}' },
        // Bob's memory, whose reading names her
        { name: 'lead', match: { source: '^team:(?<path>.+)$', fact: 'Bob is the team lead' }, use: 'file', with: { path: '${path}', select: '$.lead', expect: { equals: 'Bob' } } },
      ],
    },
  });
  const w = { config, storeDir, stateDir, snapRoot, storeDb };
  await runJob('drift', { store: 'agent' }, { jobs: JOBS, config, log, now: () => NOW });
  await runJob('digest', {}, { jobs: JOBS, config, log, now: () => NOW });
  expect(String(smtp.received[0]?.parsed.text)).toContain('insulin');
  // A job that failed on her text (a verifier or a store error quoting the row).
  const state = openStateDb(config.stateDb);
  recordRunEnd(state, recordRunStart(state, 'drift', 'agent', NOW), NOW, 'failed', `drift agent: could not verify a2 ${JSON.stringify(F2)}; and "${F3}"`);
  state.close();
  // What killed jobs leave: a restore's staged copy beside the store, a snapshot's partial folder.
  copyFileSync(storeDb, join(storeDir, '.memory.db.restore-4242'));
  mkdirSync(join(snapRoot, 'agent', '.partial-2026-11-29T050000Z-4242-abcd'), { recursive: true });
  copyFileSync(storeDb, join(snapRoot, 'agent', '.partial-2026-11-29T050000Z-4242-abcd', 'memory.db'));
  return w;
}

const placeCount = (r: EraseReceipt, place: string) => r.places.find((p) => p.place === place)?.count;

async function reviewAndDigest(w: World): Promise<string> {
  const store = openStore(w.config, 'agent');
  const state = openStateDb(w.config.stateDb);
  try {
    const review = await listReview(store, state, w.config, NOW + HOUR);
    const preview = await previewDigest(w.config, { now: NOW + HOUR });
    return JSON.stringify(review) + preview.text + preview.html;
  } finally {
    state.close();
    store.close();
  }
}

describe('erase reaches the copies memory-warden made (warden layout)', () => {
  const cases: [string, EraseSelector, string[]][] = [
    ['--subject, in another case', { subject: 'aLICE nAKAMURA' }, ['alice nakamura']],
    ['--user', { user: 'alice' }, []],
    ['--ids', { ids: ['a1', 'a2', 'a3'] }, []],
  ];
  it.each(cases)('%s: no byte of her text in the state db, its WAL, the staged copies; review and digest show nothing', async (_name, sel, folded) => {
    const w = await warden();
    const mine = [F1, F2, F3, 'insulin', 'Kelp Road', READING];
    const dirs = [w.storeDir, w.stateDir, w.snapRoot];
    // The world really holds copies: in the state db (evidence, the job error) and in the leftovers.
    expect(whereFound([w.stateDir], [READING, F2]).length).toBeGreaterThan(0);
    expect(await reviewAndDigest(w)).toContain('Brine Lane');

    const r = await erase(w.config, 'agent', sel, { now: () => NOW });
    expect(r).toMatchObject({ memories: 3, vacuumed: true, walTruncated: true, stateWalTruncated: true });
    expect(whereFound(dirs, mine, folded)).toEqual([]);
    expect(existsSync(join(w.storeDir, '.memory.db.restore-4242'))).toBe(false);
    expect(readdirSync(join(w.snapRoot, 'agent')).filter((n) => n.startsWith('.partial-'))).toEqual([]);

    const shown = await reviewAndDigest(w);
    for (const t of [...mine, ...folded]) expect(shown.toLowerCase()).not.toContain(t.toLowerCase());
    // Bob's pending item stays, whatever its evidence had to lose.
    expect(shown).toContain('b2');

    expect(placeCount(r, 'state:drift_verdicts')).toBe(1);
    expect(placeCount(r, 'state:job_runs.error')).toBe(1);
    expect(placeCount(r, 'files:restore staging copies')).toBe(1);
    expect(placeCount(r, 'files:snapshot partial folders')).toBe(1);
    expect(placeCount(r, 'store:rows')).toBe(3);
    const [stored] = listReceipts(w.config.stateDb);
    expect(JSON.parse(stored!.places)).toEqual(r.places);
    const receiptText = JSON.stringify([r, stored]).toLowerCase();
    for (const t of ['alice', 'insulin', 'kelp', 'brine']) expect(receiptText).not.toContain(t);

    // The next digest mails nothing of her.
    await runJob('digest', {}, { jobs: JOBS, config: w.config, log, now: () => NOW + DAY_MS });
    expect(smtp.received).toHaveLength(2); // not quiet: it reports the failed job, with its error scrubbed
    const next = String(smtp.received.at(-1)?.parsed.text ?? '') + String(smtp.received.at(-1)?.parsed.html ?? '');
    for (const t of [...mine, ...folded]) expect(next.toLowerCase()).not.toContain(t.toLowerCase());
  });

  it('a dry run counts the places and changes nothing', async () => {
    const w = await warden();
    const before = whereFound([w.stateDir, w.storeDir], [F2]);
    const r = await erase(w.config, 'agent', { subject: 'nakamura' }, { now: () => NOW, dryRun: true });
    expect(placeCount(r, 'state:drift_verdicts')).toBe(1);
    expect(placeCount(r, 'state:job_runs.error')).toBe(1);
    expect(placeCount(r, 'files:restore staging copies')).toBe(1);
    expect(whereFound([w.stateDir, w.storeDir], [F2])).toEqual(before);
    expect(existsSync(join(w.storeDir, '.memory.db.restore-4242'))).toBe(true);
  });

  it('--subject scrubs another memory\'s evidence quoting her, keeping that item and its shape', async () => {
    const w = await warden();
    await erase(w.config, 'agent', { subject: 'alice nakamura' }, { now: () => NOW });
    const state = new Database(w.config.stateDb, { readonly: true });
    const rows = state.prepare(`SELECT memory_id, evidence FROM drift_verdicts WHERE store = 'agent' ORDER BY id`).all() as { memory_id: string; evidence: string }[];
    state.close();
    expect(rows.map((x) => x.memory_id)).toEqual(['b2']);
    expect(JSON.parse(rows[0]!.evidence)).toMatchObject({ current: { format: 'json', select: '$.lead', value: '[erased]' } });
  });
});

describe('erase in the state db: only content, and text quoted cut short', () => {
  it('--subject naming the store and the recipients scrubs content, never keys, names or statuses', async () => {
    const w = await warden();
    const long = `Alice Nakamura's passport number is X99-1234 and it expires in March of next year, renew early`;
    const state = openStateDb(w.config.stateDb);
    // An error that quoted the text cut at 60 characters.
    recordRunEnd(state, recordRunStart(state, 'prune', 'agent', NOW), NOW, 'failed', `prune agent: row m9 "${long.slice(0, 60)}…" is locked`);
    const before = state.prepare(`SELECT id, job, store, outcome FROM job_runs ORDER BY id`).all();
    const deliveriesBefore = state.prepare(`SELECT list_key, day, status FROM digest_deliveries ORDER BY id`).all();
    state.close();
    const db = new Database(w.storeDb);
    db.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES ('m9', 'alice', ?, 'user message')`).run(long);
    db.close();

    const r = await erase(w.config, 'agent', { ids: ['m9'] }, { now: () => NOW });
    expect(placeCount(r, 'state:job_runs.error')).toBe(1);
    expect(whereFound([w.stateDir], ['X99-1234', 'passport number'])).toEqual([]);

    // 'agent' is the store's name, 'example' is in the recipients' list key, 'failed' and 'sent' are statuses.
    for (const subject of ['agent', 'example.org', 'failed', 'sent']) await erase(w.config, 'agent', { subject }, { now: () => NOW });
    const after = openStateDb(w.config.stateDb);
    expect(after.prepare(`SELECT id, job, store, outcome FROM job_runs WHERE id <= ? ORDER BY id`).all((before.at(-1) as { id: number }).id)).toEqual(before);
    expect(after.prepare(`SELECT list_key, day, status FROM digest_deliveries ORDER BY id`).all()).toEqual(deliveriesBefore);
    after.close();
  });
});

describe('erase in the state db: the text in part, in other forms, and ids among words', () => {
  const LONG = 'Renée Brinewater was diagnosed with type 1 diabetes in March; her passport X99-1234 expires next year';
  const asciiJson = (t: string) => JSON.stringify(t).replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  const copies: [string, (id: string) => { error?: string; result?: string }][] = [
    ['an error quoting it cut at 40', () => ({ error: `prune agent: row "${LONG.slice(0, 40)}…" is locked` })],
    ['an error quoting its middle', () => ({ error: `verify failed: the page says …${LONG.slice(35, 85)}…` })],
    ['a result with it JSON-escaped in ASCII', () => ({ result: JSON.stringify({ raw: `file: ${asciiJson(LONG)}` }) })],
    ['an error in capitals', () => ({ error: `FAILED ON ${LONG.toUpperCase()}` })],
    ['a result with it percent-encoded in a URL', () => ({ result: JSON.stringify({ evidence: { url: `https://x.example/?q=${encodeURIComponent(LONG.slice(0, 50))}` } }) })],
    ['an error naming the id among words', (id) => ({ error: `row ${id} is locked by the agent` })],
    ['a result naming the id inside a note', (id) => ({ result: JSON.stringify({ note: `pruned ${id}, b1 and others` }) })],
  ];

  for (const how of ['ids', 'user'] as const) {
    it(`--${how}: every such copy in job runs is scrubbed, and the other records stay`, async () => {
      const w = await warden();
      const id = 'mem-9001';
      const db = new Database(w.storeDb);
      db.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES (?, 'renee', ?, 'user message')`).run(id, LONG);
      db.close();
      const state = openStateDb(w.config.stateDb);
      for (const [, copy] of copies) {
        const c = copy(id);
        const run = recordRunStart(state, 'drift', 'agent', NOW);
        if (c.result) state.prepare(`UPDATE job_runs SET result = ? WHERE id = ?`).run(c.result, run);
        recordRunEnd(state, run, NOW, c.error ? 'failed' : 'ok', c.error ?? null);
        if (c.result) state.prepare(`UPDATE job_runs SET result = ? WHERE id = ?`).run(c.result, run);
      }
      const unrelated = recordRunStart(state, 'prune', 'agent', NOW);
      recordRunEnd(state, unrelated, NOW, 'failed', 'row b1 is locked by the agent');
      state.close();

      await erase(w.config, 'agent', how === 'ids' ? { ids: [id] } : { user: 'renee' }, { now: () => NOW });
      const after = openStateDb(w.config.stateDb);
      const rows = after.prepare(`SELECT id, error, result FROM job_runs ORDER BY id`).all() as { id: number; error: string | null; result: string | null }[];
      after.close();
      // Each copy holds one of these as plain ASCII (the escapes and the URL encoding leave them as they are).
      for (const r of rows) {
        for (const v of [r.error, r.result]) {
          for (const piece of ['brinewater', 'x99-1234', 'diabetes', 'passport', id]) expect((v ?? '').toLowerCase(), `${piece} in ${v}`).not.toContain(piece);
        }
      }
      expect(rows.some((r) => r.error === 'row b1 is locked by the agent')).toBe(true);
    });
  }
});

describe('erase in the state db: order and tables added later', () => {
  it('an erase that fails at the store (Qdrant down) has already scrubbed the state db, and leaves the rows for the retry', async () => {
    const w = await warden();
    const down = validateConfig({ ...w.config, stores: { agent: { db: w.storeDb, qdrant: { url: 'http://127.0.0.1:9', collections: ['memories'] } } } });
    await expect(erase(down, 'agent', { user: 'alice' }, { now: () => NOW })).rejects.toThrow();
    expect(whereFound([w.stateDir], [F2, READING])).toEqual([]);
    const store = new Database(w.storeDb, { readonly: true });
    expect(store.prepare(`SELECT count(*) AS n FROM memory WHERE subject = 'alice'`).get()).toEqual({ n: 3 });
    store.close();
    const r = await erase(w.config, 'agent', { user: 'alice' }, { now: () => NOW });
    expect(r.memories).toBe(3);
    expect(whereFound([w.storeDir, w.stateDir, w.snapRoot], [F1, F2, F3, READING])).toEqual([]);
  });

  it('the worker reading the state db during the erase: reported, and a second erase once it let go leaves no byte', async () => {
    const w = await warden();
    const worker = new Database(w.config.stateDb);
    worker.exec('BEGIN');
    worker.prepare('SELECT count(*) FROM job_runs').get(); // a read transaction pins the WAL
    const r = await erase(w.config, 'agent', { subject: 'nakamura' }, { now: () => NOW });
    expect(r).toMatchObject({ memories: 3, stateWalTruncated: false });
    worker.exec('COMMIT');
    const again = await erase(w.config, 'agent', { subject: 'nakamura' }, { now: () => NOW });
    expect(again).toMatchObject({ memories: 0, stateWalTruncated: true });
    worker.close();
    expect(whereFound([w.storeDir, w.stateDir, w.snapRoot], [F1, F2, F3, READING], ['nakamura'])).toEqual([]);
  });

  it('a table another feature adds to the state db is scrubbed in its content columns, its keys kept', async () => {
    const w = await warden();
    const state = openStateDb(w.config.stateDb);
    state.exec(`CREATE TABLE restore_notes (id INTEGER PRIMARY KEY, store TEXT NOT NULL, kind TEXT NOT NULL CHECK (kind IN ('note', 'warning')), note TEXT)`);
    state.exec(`CREATE INDEX restore_notes_by_store ON restore_notes(store)`);
    state.prepare(`INSERT INTO restore_notes (store, kind, note) VALUES ('agent', 'note', ?), ('agent', 'warning', 'nothing personal')`).run(`restored a2: ${F2}`);
    state.close();
    const r = await erase(w.config, 'agent', { subject: 'insulin' }, { now: () => NOW });
    expect(placeCount(r, 'state:restore_notes.note')).toBe(1);
    const after = new Database(w.config.stateDb, { readonly: true });
    expect(after.prepare(`SELECT store, kind, note FROM restore_notes ORDER BY id`).all()).toEqual([
      { store: 'agent', kind: 'note', note: '[erased]' },
      { store: 'agent', kind: 'warning', note: 'nothing personal' },
    ]);
    after.close();
    expect(whereFound([w.stateDir], ['insulin'])).toEqual([]);
  });
});

describe('erase --user finds what memory-warden\'s own prune deleted (mem0)', () => {
  let q: QdrantTarget;
  let fx: Mem0Fixture | undefined;
  beforeEach(async () => {
    q = await qdrantTarget();
  });
  afterEach(async () => {
    fx?.close();
    fx = undefined;
    q.assertConforms();
    await q.close();
  });

  it.each(['python', 'typescript'] as const)('%s: the history DELETE row prune wrote is scrubbed although the entity link went with the prune', async (flavour) => {
    fx = await Mem0Fixture.create(q, tmp.dir, flavour);
    const f = fx;
    const trip = await f.add('Xiomara Quill is in Lisbon for surgery this week', { user_id: 'xiomara', at: NOW - 5 * DAY_MS, metadata: { expiration_date: '2026-11-28' } });
    const bobTrip = await f.add('Bob is in Oslo this week', { user_id: 'bob', at: NOW - 5 * DAY_MS, metadata: { expiration_date: '2026-11-28' } });
    const tea = await f.add('Xiomara Quill likes tea', { user_id: 'xiomara', at: NOW - 5 * DAY_MS });
    await f.entity('Lisbon', [trip], { user_id: 'xiomara' });
    f.close();
    const stateDir = join(tmp.dir, 'state');
    const config = f.config({}, join(stateDir, 'state.db'));

    await runJob('prune', { store: 'm' }, { jobs: JOBS, config, log, now: () => NOW });
    expect((await f.points()).map((p) => p.id)).not.toContain(trip);
    expect(await f.entityPoints()).toEqual([]); // the link that tied it to her is gone
    const history = () => readFileSync(f.historyPath);
    expect(history().includes(Buffer.from('surgery'))).toBe(true);
    // The ledger keeps no user id: only a keyed hash, under a key only the owner can read.
    expect(whereFound([stateDir], [], ['xiomara'])).toEqual([]);
    expect(readFileSync(join(stateDir, 'erase.key'), 'utf8').trim()).toMatch(/^[0-9a-f]{64}$/);
    expect(lstatSync(join(stateDir, 'erase.key')).mode & 0o777).toBe(0o600);

    // Drift verdicts about both, waiting for a person, with the text as verified and a proposed replacement.
    const state = openStateDb(config.stateDb);
    recordVerdict(state, { store: 'm', memoryId: tea, verdict: 'contradicted', verifier: 'file', evidence: { current: 'Xiomara Quill now drinks coffee', replacement: { fact: 'Xiomara Quill prefers coffee' } }, checkedAt: NOW, needsPerson: true });
    recordVerdict(state, { store: 'm', memoryId: trip, verdict: 'unverifiable', verifier: null, evidence: { reason: 'surgery dates are not in any file' }, checkedAt: NOW - DAY_MS, needsPerson: true });
    state.close();

    const r = await erase(config, 'm', { user: 'xiomara' }, { now: () => NOW });
    expect(r.memories).toBe(2); // the live memory and the one prune deleted
    expect(placeCount(r, 'state:warden_deletions')).toBe(1);
    expect(placeCount(r, 'state:drift_verdicts')).toBe(2);
    expect(whereFound([stateDir], ['coffee', 'surgery dates'])).toEqual([]);
    expect(placeCount(r, 'state:job_runs.result')).toBe(1); // the prune's result listed the deleted id
    expect(whereFound([stateDir], ['surgery', 'Lisbon', 'likes tea', trip])).toEqual([]);
    for (const t of ['surgery', 'Xiomara', 'likes tea']) expect(history().includes(Buffer.from(t)), t).toBe(false);
    // Bob's pruned memory keeps its history.
    expect(history().includes(Buffer.from('Bob is in Oslo'))).toBe(true);
    const h = new Database(f.historyPath, { readonly: true });
    const table = flavour === 'python' ? 'history' : 'memory_history';
    expect(h.prepare(`SELECT count(*) AS n FROM ${table} WHERE memory_id = ?`).get(bobTrip)).toEqual({ n: 2 });
    h.close();
  });
});
