import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { makeStore, tempDir, type Row } from '../helpers/store.js';
import { prune } from '../../jobs/prune.js';
import { loadConfig } from '../../src/config/config.js';
import { silentLogger } from '../../src/log/logger.js';
import { openStore } from '../../src/layouts/open.js';
import { checkStore, checkStoreConcurrently } from '../../src/layouts/warden/check.js';
import { reviewDue, reviewDueCount, reviewQueue, reviewQueueConcurrently } from '../../src/layouts/warden/queue.js';
import { newRows } from '../../src/layouts/warden/new-rows.js';
import { initSchema, liveViewState } from '../../src/layouts/warden/schema.js';
import { classifyTime, instantShapeSql, parseInstant, toCanonical } from '../../src/time/instants.js';

/**
 * One rule for every timestamp form: prune's dry run, check's unparseable list and the live_memory view (as the
 * agent's own SQLite evaluates it, without memory-warden's functions) must agree on every row.
 */
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

const pad = (n: number, w = 2) => String(n).padStart(w, '0');
/** The wall-clock parts of instant `ms` seen at `offsetMin` east of UTC. */
function local(ms: number, offsetMin = 0) {
  const d = new Date(ms + offsetMin * 60_000);
  return {
    date: `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}`,
    time: `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`,
    ms: pad(d.getUTCMilliseconds(), 3),
  };
}

/** Every form an agent (or a person, or a bug) might write for the instant `ms`. */
function forms(ms: number): string[] {
  const u = local(ms);
  const at = (off: number, suffix: string, sep = 'T') => { const l = local(ms, off); return `${l.date}${sep}${l.time}${suffix}`; };
  const dayBefore = local(ms - DAY);
  return [
    `${u.date} ${u.time}`, `${u.date}T${u.time}Z`, `${u.date}T${u.time}z`, `${u.date}t${u.time}Z`, `${u.date}t${u.time}z`,
    `${u.date}T${u.time}+0000`, `${u.date}T${u.time}+00`, `${u.date}T${u.time}+00:00`, `${u.date}T${u.time}-00:00`, `${u.date}T${u.time}-0000`,
    at(120, '+02:00'), at(120, '+0200'), at(-330, '-05:30'), at(840, '+14:00'), at(899, '+14:59'), at(1439, '+23:59'), at(900, '+15:00'),
    at(-720, '-12:00', ' '), at(60, ' +01:00', ' '), `${u.date} ${u.time} Z`,
    `${u.date}T${u.time}.${u.ms}Z`, `${u.date}T${u.time}.5`, `${u.date}T${u.time}.123456789Z`, `${u.date}T${u.time}.9999`, `${u.date}T${u.time}.1234567890123`,
    `${u.date}T${u.time},5Z`, `${u.date}T${u.time}.Z`,
    ` ${u.date} ${u.time}`, `${u.date} ${u.time} `, `${u.date} ${u.time}\t`, `${u.date} ${u.time}\n`, `${u.date}  ${u.time}`, `${u.date}TT${u.time}`,
    `${u.date}T ${u.time}`, `${u.date}${u.time}`, `${u.date}\t${u.time}`, `${u.date} ${u.time.slice(0, 5)}`, `${u.date} ${u.time.slice(0, 2)}`,
    `${dayBefore.date} 24:00:00`, `${u.date} ${u.time.slice(0, 6)}60`, `${u.date}`, `${u.date}T`, `${u.date}Z`,
    `0${u.date} ${u.time}`, `+${u.date} ${u.time}`, `-${u.date} ${u.time}`,
    String(ms / DAY + 2440587.5), ` ${(ms / DAY + 2440587.5).toFixed(3)} `, String(Math.floor(ms / 1000)), String(ms), 'now', 'NOW', ' now ',
    `${u.date.slice(0, 4)}-02-30 ${u.time}`, `${u.date.slice(0, 4)}-02-29`, '2028-02-29 10:00:00', '2100-02-29', `${u.date.slice(0, 8)}32`,
    `${u.time}`, `${u.date.replace(/-/g, '/')} ${u.time}`, '', 'never', 'tomorrow',
  ];
}

describe('the instant rule: parseInstant reads exactly what the view reads, as the same instant', () => {
  const db = new Database(':memory:');
  const sqlInstant = db.prepare(
    `SELECT CASE WHEN ${instantShapeSql('@v')} AND julianday(@v) IS NOT NULL THEN CAST(round((julianday(@v) - 2440587.5) * 86400000) AS INTEGER) END AS ms`,
  ).pluck();
  const agree = (v: string) => expect(parseInstant(v), JSON.stringify(v)).toBe(sqlInstant.get({ v }) ?? null);

  it('on every form of several instants', () => {
    for (const ms of [Date.UTC(2026, 10, 29, 1, 0, 0), Date.UTC(2026, 1, 28, 23, 59, 59, 999), Date.UTC(2028, 1, 29, 12), Date.UTC(1, 0, 1), Date.UTC(9999, 11, 30)]) {
      for (const v of forms(ms)) agree(v);
    }
  });

  it('on thousands of generated near-misses', () => {
    let seed = 7;
    const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2147483648) % n);
    const pick = <T>(xs: T[]) => xs[rand(xs.length)]!;
    const years = ['2026', '0000', '0099', '1600', '1900', '2000', '9999', '202', '20266'];
    const mds = ['11-29', '02-28', '02-29', '02-30', '13-01', '00-10', '04-31', '12-31', '1-29', '11-00'];
    const seps = ['', ' ', 'T', 't', '  ', 'T ', '\t', '_'];
    const times = ['', '01:00', '01:00:00', '24:00', '24:59:59', '25:00', '23:60', '23:59:60', '1:00', '01:00:0', '12:34:56'];
    const fracs = ['', '.', '.5', '.123', '.9995', '.99999', ',5', '.12345678901234567890'];
    const zones = ['', 'Z', 'z', ' Z', '+00:00', '-00:00', '+0000', '+00', '+14:59', '+15:00', '-14:00', '+1:00', '+05:3', ' +05:30', '+05:60'];
    const tails = ['', ' ', '\n', ' x', '\u00a0'];
    for (let i = 0; i < 20_000; i++) {
      agree(`${pick(['', '', '', ' ', '-'])}${pick(years)}-${pick(mds)}${pick(seps)}${pick(times)}${pick(fracs)}${pick(zones)}${pick(tails)}`);
    }
  });
});

describe('prune, check and live_memory agree on every form', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it('a row prune would delete is not live, a live row is not deleted, and the rest are unparseable', async () => {
    const now = Date.now();
    const texts = [...new Set([...forms(now - 3 * DAY), ...forms(now + 3 * DAY)])];
    const rows: Row[] = texts.map((t, i) => ({ id: `r${i}`, expires_at: t }));
    const path = makeStore(join(dir, 'm.db'), rows);
    const config = loadConfig({ overrides: { stateDb: join(dir, 'state.db'), stores: { t: { db: path } } } });

    // The agent's view of it: a plain connection, none of memory-warden's functions registered.
    const agent = new Database(path, { readonly: true });
    const live = new Set((agent.prepare('SELECT id FROM live_memory').pluck().all() as string[]));
    agent.close();

    const dry = await prune({ store: 't', dryRun: true }, { config, log: silentLogger, now: () => now, signal: new AbortController().signal });
    const deleted = new Set(dry.ids);

    const store = openStore(config, 't', { readonly: true });
    const report = checkStore(store, { now, reviewAfterDays: 90, supersededAfterDays: 180 });
    store.close();
    const unparseableFinding = report.problems.find((f) => f.code === 'unparseable_time');
    const unparseable = new Set((unparseableFinding?.ids ?? []).map((id) => id.replace(/:expires_at$/, '')));

    let expected = 0;
    for (const [i, text] of texts.entries()) {
      const id = `r${i}`;
      const t = parseInstant(text);
      const label = `${id} ${JSON.stringify(text)}`;
      expect(deleted.has(id), label).toBe(!live.has(id));
      expect(deleted.has(id), label).toBe(t !== null && t <= now);
      if (t === null) expected += 1;
      // check's list is a sample of 50 ids; the count is exact.
      if (unparseable.size < 50) expect(unparseable.has(id), label).toBe(t === null);
    }
    expect(unparseableFinding?.count ?? 0).toBe(expected);
    expect(expected).toBeGreaterThan(20); // the table does exercise both sides
    expect(deleted.size).toBeGreaterThan(10);
  });
});

describe('live_memory of an earlier definition', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  const OLD = {
    brief: `CREATE VIEW live_memory AS
      SELECT id, subject, fact, source, confirmed_at, expires_at
      FROM memory
      WHERE superseded_by IS NULL
        AND (expires_at IS NULL OR expires_at > datetime('now'));`,
    julianday: `CREATE VIEW IF NOT EXISTS live_memory AS
SELECT id, subject, fact, source, confirmed_at, expires_at
FROM memory
WHERE superseded_by IS NULL
  AND (expires_at IS NULL OR julianday(expires_at) IS NULL OR julianday(expires_at) > julianday('now'));`,
  };

  it.each(Object.entries(OLD))('%s: check says so, init replaces it once, rows untouched', (_, ddl) => {
    const path = makeStore(join(dir, 'm.db'), [{ id: 'a', expires_at: 'now' }, { id: 'b', expires_at: '2020-01-01T00:00:00+0000' }]);
    const db = new Database(path);
    db.exec('DROP VIEW live_memory');
    db.exec(ddl);
    expect(liveViewState(db)).toBe('old');
    const config = loadConfig({ overrides: { stateDb: join(dir, 'state.db'), stores: { t: { db: path } } } });
    const store = openStore(config, 't', { readonly: true });
    expect(checkStore(store, { now: Date.now(), reviewAfterDays: 90, supersededAfterDays: 180 }).notes.concat(
      checkStore(store, { now: Date.now(), reviewAfterDays: 90, supersededAfterDays: 180 }).problems).map((f) => f.code)).toContain('old_live_view');
    store.close();

    expect(initSchema(db, path)).toMatchObject({ replacedView: true, addedView: false });
    expect(liveViewState(db)).toBe('current');
    expect(db.prepare('SELECT id FROM live_memory ORDER BY id').pluck().all()).toEqual(['a', 'b']);
    expect(initSchema(db, path)).toMatchObject({ replacedView: false, addedView: false });
    expect(db.prepare('SELECT count(*) FROM memory').pluck().get()).toBe(2);
    db.close();
  });

  it('a view someone else wrote is left alone and reported', () => {
    const path = makeStore(join(dir, 'm.db'));
    const db = new Database(path);
    db.exec('DROP VIEW live_memory');
    db.exec('CREATE VIEW live_memory AS SELECT id, fact FROM memory WHERE superseded_by IS NULL');
    initSchema(db, path);
    expect(liveViewState(db)).toBe('foreign');
    db.close();
  });
});

/**
 * check counts live rows, review-due rows and prune candidates in one SQL pass that compares canonical text as
 * text and sends only other forms to warden_epoch; the review queue orders by julianday(). Each must agree with
 * parseInstant on every form, in every column it reads, at a `now` with milliseconds (where a text shortcut
 * that rounds the wrong way would be off by one second).
 */
describe('check\'s one pass and the review queue agree with parseInstant on every form', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  const now = Date.UTC(2026, 11, 1, 12, 0, 0, 500);
  const reviewAfterDays = 90;
  const supersededAfterDays = 180;
  const old = '2025-01-01 00:00:00';

  /** The store with its connection's prepare() recorded: which statements ran here rather than on a thread. */
  function spy<S extends { db: Database.Database }>(store: S): { spied: S; prepared: string[] } {
    const prepared: string[] = [];
    const db = new Proxy(store.db, {
      get(target, key) {
        const v = Reflect.get(target, key, target) as unknown;
        if (key === 'prepare') return (sql: string) => (prepared.push(sql), target.prepare(sql));
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    return { spied: { ...store, db }, prepared };
  }

  function storeOf(rows: Row[]) {
    const path = makeStore(join(dir, `m${rows.length}.db`), rows);
    const config = loadConfig({ overrides: { stateDb: join(dir, 'state.db'), stores: { t: { db: path } } } });
    return openStore(config, 't', { readonly: true });
  }

  it('live, review due (and its order), prune pending and the odd timestamps', async () => {
    const cut = now - reviewAfterDays * DAY;
    const superCut = now - supersededAfterDays * DAY;
    // Instants exactly at the cutoffs, a millisecond and a second either side, in every form.
    const at = (t: number) => [t - 1000, t - 500, t - 1, t, t + 1, t + 499, t + 500, t + 1000, t - 3 * DAY, t + 3 * DAY];
    const texts = (t: number) => [...new Set(at(t).flatMap((ms) => forms(ms)))];
    const rows: Row[] = [{ id: 'head', created_at: old }];
    texts(now).forEach((t, i) => rows.push({ id: `e${i}`, created_at: old, confirmed_at: old, expires_at: t }));
    // Expiries no instant can be read from: live whatever the time, and reviewed as if they had none.
    ['soon', '2026-02-30 00:00:00', '2026-12-01 25:00:00', '', ' ', '-2026-01-01 00:00:00', 'next week'].forEach((t, i) => {
      rows.push({ id: `u${i}`, created_at: old, confirmed_at: old, expires_at: t });
      rows.push({ id: `v${i}`, created_at: old, confirmed_at: old, expires_at: t, superseded_by: 'head' });
    });
    texts(cut).forEach((t, i) => {
      rows.push({ id: `c${i}`, created_at: old, confirmed_at: t }); // confirmed differs from created: tested alone
      rows.push({ id: `d${i}`, created_at: t, confirmed_at: t }); // the same text: tested once for both
    });
    texts(superCut).forEach((t, i) => rows.push({ id: `s${i}`, created_at: t, confirmed_at: old, superseded_by: 'head' }));
    const store = storeOf(rows);

    const ms = (v: string | null | undefined) => (v === null || v === undefined ? null : parseInstant(v));
    const live = rows.filter((r) => !r.superseded_by && (r.expires_at == null || (ms(r.expires_at) ?? Infinity) > now));
    // A readable expiry: the row decays, it is not reviewed.
    const due = live.filter((r) => { const c = ms(r.confirmed_at ?? r.created_at); return c !== null && c < cut && ms(r.expires_at) === null; });
    const pending = rows.filter((r) => {
      const e = ms(r.expires_at);
      const c = ms(r.created_at);
      return (e !== null && e <= now) || (!!r.superseded_by && c !== null && c < superCut);
    });
    const order = [...due].sort((a, b) => ms(a.confirmed_at ?? a.created_at)! - ms(b.confirmed_at ?? b.created_at)! || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    // Canonical as check has always counted it: SQLite's own `24:00:00` is an instant, but not the canonical form.
    const canonical = (v: string) => classifyTime(v) === 'canonical' && v.slice(11, 13) !== '24';
    const odd = (col: 'created_at' | 'confirmed_at' | 'expires_at') =>
      rows.filter((r) => { const v = col === 'confirmed_at' ? r.confirmed_at ?? r.created_at : r[col]; return v != null && !canonical(v); }).length;

    for (const report of [checkStore(store, { now, reviewAfterDays, supersededAfterDays }), await checkStoreConcurrently(store, { now, reviewAfterDays, supersededAfterDays, threadMinBytes: 0 })]) {
      expect(report.rows).toBe(rows.length);
      expect(report.live).toBe(live.length);
      expect(report.reviewDue).toBe(due.length);
      const all = [...report.problems, ...report.notes];
      expect(all.find((f) => f.code === 'prune_pending')?.count).toBe(pending.length);
      expect(all.find((f) => f.code === 'review_due')?.ids).toEqual(order.slice(0, 50).map((r) => r.id));
      const times = (code: string) => all.find((f) => f.code === code)?.count ?? 0;
      expect(times('noncanonical_time') + times('unparseable_time')).toBe(odd('created_at') + odd('confirmed_at') + odd('expires_at'));
    }
    // The whole queue, oldest first, as drift and the digest take it.
    expect(reviewDue(store.db, { now, afterDays: reviewAfterDays }).map((r) => r.id)).toEqual(order.map((r) => r.id));
    expect(reviewDueCount(store.db, { now, afterDays: reviewAfterDays })).toBe(due.length);
    // The digest's and drift's one-scan form: the same count (exclude or not) and the same oldest rows.
    const exclude = [order[0]!.id, order[3]!.id, 'no-such-id'];
    const rest = order.filter((r) => !exclude.includes(r.id));
    for (const limit of [undefined, 0, 1, 20, order.length + 5]) {
      const q = reviewQueue(store.db, { now, afterDays: reviewAfterDays, exclude, ...(limit === undefined ? {} : { limit }) });
      expect(q.due).toBe(due.length);
      expect(q.batch).toEqual(reviewDue(store.db, { now, afterDays: reviewAfterDays, exclude, ...(limit === undefined ? {} : { limit }) }));
      expect(q.batch.map((r) => r.id)).toEqual(rest.slice(0, limit ?? rest.length).map((r) => r.id));
      // Forms only the main thread's rule reads: the store thread gives the scan back, and the answer is the same.
      const { spied, prepared } = spy(store);
      expect(await reviewQueueConcurrently(spied, { now, afterDays: reviewAfterDays, exclude, ...(limit === undefined ? {} : { limit }) }, 0)).toEqual(q);
      expect(prepared.some((sql) => sql.includes('WITH due AS MATERIALIZED') || sql.startsWith('SELECT count(*)'))).toBe(true);
    }
    const everyone = reviewQueue(store.db, { now, afterDays: reviewAfterDays, exclude: order.map((r) => r.id) });
    expect(everyone).toEqual({ due: due.length, batch: [] });
    expect(due.length).toBeGreaterThan(100);
    expect(pending.length).toBeGreaterThan(100);
    store.close();
  });

  it('the review queue on the store thread, for a store of canonical times: the same rows, read there', async () => {
    const cut = now - reviewAfterDays * DAY;
    const rows: Row[] = [{ id: 'head', created_at: toCanonical(now - 400 * DAY) }];
    // Canonical times around the cutoff to the second, expiries either side of now, superseded rows, ties on time.
    for (let i = 0; i < 300; i++) {
      const confirmed = toCanonical(cut + (i % 7 - 3) * 1000 - (i % 5) * DAY);
      const expires = i % 4 === 0 ? toCanonical(now + (i % 3 - 1) * 1000) : null;
      rows.push({ id: `r${String(i).padStart(3, '0')}`, created_at: confirmed, confirmed_at: confirmed, expires_at: expires, superseded_by: i % 9 === 0 ? 'head' : null });
    }
    const store = storeOf(rows);
    const exclude = ['r004', 'r010', 'nope'];
    let batches = 0;
    for (const limit of [undefined, 0, 1, 20, 1000]) {
      const opts = { now, afterDays: reviewAfterDays, exclude, ...(limit === undefined ? {} : { limit }) };
      const here = reviewQueue(store.db, opts);
      const { spied, prepared } = spy(store);
      const there = await reviewQueueConcurrently(spied, opts, 0);
      expect(there).toEqual(here);
      batches += there.batch.length;
      // The scan ran on the thread: the store's own connection prepared no queue statement (with limit 0 the thread
      // returns no row to read the count from, and the count is taken here).
      expect(prepared.filter((sql) => sql.includes('WITH due AS MATERIALIZED'))).toEqual([]);
    }
    // Nothing due (a cutoff before every row): an empty batch that could have held a row says so without a count.
    for (const limit of [undefined, 1, 20]) {
      const opts = { now, afterDays: 100_000, ...(limit === undefined ? {} : { limit }) };
      const { spied, prepared } = spy(store);
      expect(reviewQueue(spied.db, opts)).toEqual({ due: 0, batch: [] });
      expect(await reviewQueueConcurrently(spied, opts, 0)).toEqual({ due: 0, batch: [] });
      expect(prepared.filter((sql) => sql.startsWith('SELECT count(*)'))).toEqual([]);
    }
    expect(here0(store).due).toBeGreaterThan(50);
    expect(batches).toBeGreaterThan(50);
    store.close();

    function here0(s: typeof store) {
      return reviewQueue(s.db, { now, afterDays: reviewAfterDays });
    }
  });

  it('the digest\'s new rows: created in [start, end) as instants, newest first, without and with an index on created_at', () => {
    // A period whose ends carry milliseconds (a digest's `now`), and one on whole seconds (a sent digest's).
    for (const [start, end] of [[now - DAY, now], [now - DAY - 500, now - 500]] as const) {
      const rows: Row[] = [{ id: 'head', created_at: old }];
      const near = (t: number) => [t - 1000, t - 500, t - 1, t, t + 1, t + 499, t + 500, t + 1000, t - 3 * DAY, t + 3 * DAY];
      [...new Set([...near(start), ...near(end), start + HOUR].flatMap((ms) => forms(ms)))].forEach((t, i) => rows.push({ id: `n${i}`, created_at: t, confirmed_at: old }));
      const path = makeStore(join(dir, `new-${start}.db`), rows);
      const inPeriod = rows.filter((r) => { const c = parseInstant(r.created_at); return c !== null && c >= start && c < end; });
      const newest = [...inPeriod].sort((a, b) => parseInstant(b.created_at)! - parseInstant(a.created_at)! || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
      const flag = (row: { fact: unknown }) => (Number(String(row.fact).replace(/\D/g, '')) % 3 === 0 ? ['every third'] : []);
      const flagged = newest.filter((r) => flag({ fact: `fact of ${r.id}` }).length > 0);
      const expected = [...flagged, ...newest.filter((r) => !flagged.includes(r))].slice(0, 40).map((r) => r.id);
      expect(inPeriod.length).toBeGreaterThan(60);
      for (const index of [false, true]) {
        const db = new Database(path);
        db.exec(index ? 'CREATE INDEX IF NOT EXISTS memory_created ON memory(created_at)' : 'DROP INDEX IF EXISTS memory_created');
        db.close();
        const config = loadConfig({ overrides: { stateDb: join(dir, 'state.db'), stores: { t: { db: path } } } });
        const store = openStore(config, 't', { readonly: true });
        const plan = store.db.prepare(`EXPLAIN QUERY PLAN SELECT id FROM memory WHERE created_at >= '2026' AND created_at < '2027'`).all() as { detail: string }[];
        expect(plan.some((p) => p.detail.includes('memory_created'))).toBe(index);
        const got = newRows(store.db, { start, end }, 40, flag);
        expect(got.total).toBe(inPeriod.length);
        expect(got.flagged).toBe(flagged.length);
        expect(got.shown.map((r) => r.id)).toEqual(expected);
        expect(got.more).toBe(inPeriod.length - 40);
        store.close();
      }
    }
  });

  it('on a store of canonical text only, the text-only queue is the same queue', () => {
    const cut = now - reviewAfterDays * DAY;
    const rows: Row[] = [];
    for (let i = 0; i < 300; i++) {
      const t = toCanonical(cut + (i - 150) * 997);
      rows.push({ id: `r${i}`, created_at: t, confirmed_at: t, expires_at: i % 7 === 0 ? toCanonical(now + (i % 3 - 1) * 800) : null });
    }
    const store = storeOf(rows);
    const opts = { now, afterDays: reviewAfterDays };
    const general = reviewDue(store.db, opts).map((r) => r.id);
    expect(general.length).toBeGreaterThan(50);
    expect(reviewDue(store.db, { ...opts, canonicalOnly: true }).map((r) => r.id)).toEqual(general);
    expect(reviewDue(store.db, { ...opts, canonicalOnly: true, limit: 20, exclude: [general[0]!] }).map((r) => r.id)).toEqual(general.slice(1, 21));
    store.close();
  });
});
