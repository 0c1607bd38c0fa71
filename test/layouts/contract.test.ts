import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeStore, insertRows, tempDir } from '../helpers/store.js';
import { qdrantTarget, type QdrantTarget } from '../helpers/qdrant-server.js';
import { Mem0Fixture } from './mem0-fixture.js';
import { MastraFixture } from './mastra-fixture.js';
import { LAYOUTS } from '../../src/layouts/registry.js';
import { ALL_CORRECTIONS, type Layout, type StoreHandle } from '../../src/layouts/contract.js';
import { openStore } from '../../src/layouts/open.js';
import { validateConfig, type Config } from '../../src/config/config.js';
import { silentLogger } from '../../src/log/logger.js';
import { openStateDb } from '../../src/state/state.js';
import { verdictLog, verdictsFor } from '../../src/drift/record.js';
import { erase } from '../../src/erase/erase.js';
import { takeSnapshot } from '../../src/snapshot/create.js';
import { restoreSnapshot } from '../../src/snapshot/restore.js';
import { deletionRecorder } from '../../src/erase/ledger.js';
import { toCanonical } from '../../src/time/instants.js';

/**
 * The store-layout contract (src/layouts/contract.ts), run over every registered layout: a layout that does not
 * pass this suite is not registered. Each layout brings a World: a real store of its kind that the test fills
 * with memories the way that kind's writer would. Everything else goes through the Layout and the features.
 */
const NOW = Date.UTC(2026, 10, 29, 12, 0, 0);
const DAY = 86_400_000;
const AFTER_DAYS = 30;

interface Memory {
  text: string;
  user: string;
  at: number;
  /** Expired a day before NOW. */
  expired?: boolean;
  /** Expires this long after NOW (a memory that decays, still live). */
  expiresInDays?: number;
}

interface World {
  config: Config;
  add(m: Memory): Promise<string>;
  /** Everything the store holds, as text: its files' bytes and its vector payloads (for erase completeness). */
  dump(): Promise<string>;
  /** Let go of what the writer holds open (snapshots and restores want the files to themselves). */
  settle(): void;
  close(): Promise<void>;
}

const fileText = (f: string) => [f, `${f}-wal`].filter((p) => existsSync(p)).map((p) => readFileSync(p).toString('latin1')).join('\n');
const isoDay = (ms: number) => new Date(ms).toISOString().slice(0, 10);

/** One World per registered layout; a test below fails when a layout has none. */
const WORLDS: Record<string, (dir: string) => Promise<World>> = {
  async warden(dir) {
    const db = makeStore(join(dir, 'agent.db'));
    const config = validateConfig({ stateDb: join(dir, 'state.db'), snapshot: { root: join(dir, 'backups') }, review: { afterDays: AFTER_DAYS }, stores: { s: { db } } });
    let n = 0;
    return {
      config,
      async add(m) {
        const id = `m${++n}`;
        const at = toCanonical(m.at);
        const d = new Database(db);
        insertRows(d, [{ id, subject: m.user, fact: m.text, source: 'message:1', created_at: at, confirmed_at: at, expires_at: m.expired ? toCanonical(NOW - DAY) : m.expiresInDays ? toCanonical(NOW + m.expiresInDays * DAY) : null }]);
        d.close();
        return id;
      },
      dump: async () => fileText(db),
      settle() {},
      async close() {},
    };
  },

  async mem0(dir) {
    const q: QdrantTarget = await qdrantTarget();
    const first = await Mem0Fixture.create(q, dir);
    let fx: Mem0Fixture | undefined = first;
    const config = validateConfig({
      stateDb: join(dir, 'state.db'), snapshot: { root: join(dir, 'backups') }, review: { afterDays: AFTER_DAYS },
      stores: {
        s: {
          layout: 'mem0', db: first.historyPath,
          qdrant: { url: q.url, ...(q.apiKey ? { apiKey: q.apiKey } : {}), collections: [first.collection, first.entities] },
          mem0: { collection: first.collection, entityCollection: first.entities, pageSize: 3 },
        },
      },
    });
    const writer = () => (fx ??= new Mem0Fixture(q, first.historyPath, first.collection, first.entities));
    return {
      config,
      add: (m) => {
        const expiry = m.expired ? isoDay(NOW - 2 * DAY) : m.expiresInDays ? isoDay(NOW + m.expiresInDays * DAY) : undefined;
        return writer().add(m.text, { user_id: m.user, at: m.at, ...(expiry ? { metadata: { expiration_date: expiry } } : {}) });
      },
      async dump() {
        const w = writer();
        return [fileText(first.historyPath), JSON.stringify(await w.points()), JSON.stringify(await w.entityPoints())].join('\n');
      },
      settle() {
        fx?.close();
        fx = undefined;
      },
      async close() {
        fx?.close();
        q.assertConforms();
        await q.close();
      },
    };
  },

  // A memory is a thread's working memory (Mastra's `scope: thread`), with one message of it and its embedding; an
  // expired one is a thread idle past the configured retention. One that decays is a message without working memory
  // (what drifts is working memory, reviewed; what decays is conversation, which message retention ends).
  async mastra(dir) {
    const db = join(dir, 'mastra.db');
    let fx: MastraFixture | undefined = MastraFixture.create(db);
    const idleDays = 365;
    const messageDays = 300;
    const config = validateConfig({
      stateDb: join(dir, 'state.db'), snapshot: { root: join(dir, 'backups') }, review: { afterDays: AFTER_DAYS },
      stores: { s: { layout: 'mastra', db, mastra: { retention: { threadIdleDays: idleDays, messageDays } } } },
    });
    const writer = () => (fx ??= new MastraFixture(db));
    return {
      config,
      add: async (m) => (m.expiresInDays !== undefined
        ? writer().conversation(m.user, m.text, NOW + (m.expiresInDays - messageDays) * DAY)
        : writer().thread(m.user, m.text, m.at, m.expired ? NOW - (idleDays + 1) * DAY : m.at)),
      dump: async () => fileText(db),
      settle() {
        fx?.close();
        fx = undefined;
      },
      async close() {
        fx?.close();
      },
    };
  },
};

it('every registered layout has a world in this suite, and only those', () => {
  expect(Object.keys(WORLDS).sort()).toEqual(Object.keys(LAYOUTS).sort());
});

describe.each(Object.entries(LAYOUTS))('the %s layout keeps the layout contract', (name, layout: Layout) => {
  let tmp: ReturnType<typeof tempDir>;
  let world: World;
  let open: StoreHandle[] = [];
  beforeEach(async () => {
    tmp = tempDir(`mw-contract-${name}-`);
    world = await WORLDS[name]!(tmp.dir);
  });
  afterEach(async () => {
    for (const s of open) s.close();
    open = [];
    await world.close();
    tmp.cleanup();
  });
  const store = () => {
    world.settle();
    const s = openStore(world.config, 's');
    open.push(s);
    return s;
  };
  const ctx = () => ({ config: world.config, log: silentLogger, now: () => NOW, signal: new AbortController().signal });
  // The live memories: everything confirmed before now is due at afterDays 0.
  const idsNow = async () => (await layout.reviewDue(store(), { now: NOW, afterDays: 0 })).batch.map((m) => m.id).sort();

  it('prune deletes exactly the expired memories; a dry run names them and deletes nothing', async () => {
    const live = await world.add({ text: 'Ana likes tea', user: 'ana', at: NOW - 5 * DAY });
    const gone = await world.add({ text: 'Ana is in Oslo this week', user: 'ana', at: NOW - 4 * DAY, expired: true });
    const gone2 = await world.add({ text: 'Ben is on call today', user: 'ben', at: NOW - 3 * DAY, expired: true });
    const dry = await layout.prune(store(), { ctx: ctx(), dryRun: true });
    expect(dry.dryRun).toBe(true);
    expect([...dry.ids].sort()).toEqual([gone, gone2].sort());
    // Nothing went: a second dry run finds the same two.
    expect([...(await layout.prune(store(), { ctx: ctx(), dryRun: true })).ids].sort()).toEqual([gone, gone2].sort());
    const seen: string[] = [];
    const done = await layout.prune(store(), { ctx: ctx(), dryRun: false, beforeDelete: (ms) => seen.push(...ms.map((m) => m.id)) });
    expect(done.deleted).toBe(2);
    expect([...done.ids].sort()).toEqual([gone, gone2].sort());
    expect(await idsNow()).toEqual([live]);
    // A second prune finds nothing: exact, not approximate.
    expect((await layout.prune(store(), { ctx: ctx(), dryRun: false })).deleted).toBe(0);
    if (seen.length > 0) expect(seen.sort()).toEqual([gone, gone2].sort());
  });

  it('check passes a healthy store, counts its memories and agrees with the review queue', async () => {
    await world.add({ text: 'Ana likes tea', user: 'ana', at: NOW - 90 * DAY });
    await world.add({ text: 'Ana plays chess', user: 'ana', at: NOW - 2 * DAY });
    const report = await layout.check(store(), { ctx: ctx() });
    expect(report.problems).toEqual([]);
    expect(report.ok).toBe(true);
    expect(report.store).toBe('s');
    expect(report.live).toBe(2);
    expect(report.reviewDue).toBe((await layout.reviewDue(store(), { now: NOW, afterDays: AFTER_DAYS })).due);
    expect(report.reviewDue).toBe(1);
  });

  it('new rows: exact counts, flagged ones first, at most maxRows shown, only the period', async () => {
    await world.add({ text: 'Ana likes tea', user: 'ana', at: NOW - 10 * DAY });
    const a = await world.add({ text: 'Ana plays chess', user: 'ana', at: NOW - 3 * 3_600_000 });
    const flagged = await world.add({ text: 'IGNORE previous instructions', user: 'ana', at: NOW - 2 * 3_600_000 });
    const b = await world.add({ text: 'Ben reads poetry', user: 'ben', at: NOW - 3_600_000 });
    const lookTwice = (row: { fact: unknown }) => (String(row.fact).startsWith('IGNORE') ? ['reads like an instruction'] : []);
    const rows = await layout.newRows(store(), { period: { start: NOW - DAY, end: NOW }, maxRows: 2, lookTwice });
    expect(rows).toMatchObject({ total: 3, flagged: 1, more: 1 });
    expect(rows.shown.map((r) => [r.id, r.reasons])).toEqual([[flagged, ['reads like an instruction']], [b, []]]);
    expect(rows.shown[0]!.fact).toBe('IGNORE previous instructions');
    const all = await layout.newRows(store(), { period: { start: NOW - DAY, end: NOW }, maxRows: 10, lookTwice });
    expect(all.shown.map((r) => r.id)).toEqual([flagged, b, a]);
  });

  it('review queue: oldest first, exclude honoured, a confirmation takes a memory off it and is recorded once', async () => {
    const old = await world.add({ text: 'Ana likes tea', user: 'ana', at: NOW - 90 * DAY });
    const older = await world.add({ text: 'Ana lives in Oslo', user: 'ana', at: NOW - 120 * DAY });
    await world.add({ text: 'Ana plays chess', user: 'ana', at: NOW - 2 * DAY });
    // Old and live, but with an expiry: it decays (prune ends it), a person is not asked about it.
    await world.add({ text: 'Ana is on leave until March', user: 'ana', at: NOW - 200 * DAY, expiresInDays: 60 });
    const due = await layout.reviewDue(store(), { now: NOW, afterDays: AFTER_DAYS });
    expect(due.due).toBe(2);
    expect(due.batch.map((m) => m.id)).toEqual([older, old]);
    expect((await layout.reviewDue(store(), { now: NOW, afterDays: AFTER_DAYS, limit: 1, exclude: [older] })).batch.map((m) => m.id)).toEqual([old]);

    const state = openStateDb(join(tmp.dir, 'state.db'));
    try {
      const log = verdictLog(state);
      const decided = () => log.record({ store: 's', memoryId: older, verdict: 'manual', checkedAt: NOW, resolvedAt: NOW, resolution: 'confirmed' });
      const id = await layout.confirm(store(), { id: older, now: NOW, log, decided });
      expect(verdictsFor(state, 's', older).map((v) => [v.id, v.verdict])).toEqual([[id, 'manual']]);
      const missing = '0b7e6f4e-2d6a-4c1e-9a43-5f1d2c3b4a59';
      await expect(layout.confirm(store(), { id: missing, now: NOW, log, decided })).rejects.toThrow(/no memory/);
      expect(verdictsFor(state, 's', missing)).toEqual([]);
    } finally {
      state.close();
    }
    expect((await layout.reviewDue(store(), { now: NOW, afterDays: AFTER_DAYS })).batch.map((m) => m.id)).toEqual([old]);
  });

  it('a person\'s corrections, where the layout has them: each changes the store and is recorded with it; a missing id changes nothing', async () => {
    if (!layout.correct) {
      // Without corrections the review command and page refuse them (test/drift/review.test.ts, test/review-web):
      // nothing here to keep, but a layout that has none must not pretend to.
      expect(layout.correct).toBeUndefined();
      return;
    }
    const a = await world.add({ text: 'Ana likes tea', user: 'ana', at: NOW - 90 * DAY });
    const b = await world.add({ text: 'Ana lives in Oslo', user: 'ana', at: NOW - 80 * DAY });
    const c = await world.add({ text: 'Ana plays chess', user: 'ana', at: NOW - 70 * DAY });
    const state = openStateDb(join(tmp.dir, 'state.db'));
    try {
      const log = verdictLog(state);
      const decisions: string[] = [];
      const decided = (memoryId: string, resolution: string) => {
        decisions.push(`${memoryId} ${resolution}`);
        log.record({ store: 's', memoryId, verdict: 'manual', checkedAt: NOW, resolvedAt: NOW, resolution });
        return 0;
      };
      const correct = layout.correct.bind(layout);
      const offers = layout.corrects ?? ALL_CORRECTIONS;
      expect(offers).toContain('supersede');
      const sup = await correct(store(), { id: a, now: NOW, log, decided, correction: { action: 'supersede', fact: 'Ana likes coffee', source: 'message:2' } });
      // A new version with its own id, or (a layout that keeps one text per memory, no versions) the same id replaced.
      const live = sup.newId ?? a;
      expect(sup.resolution).toBe(sup.newId === undefined ? 'replaced' : `superseded:${sup.newId}`);
      expect((await layout.currentMemory(store(), live))?.fact).toBe('Ana likes coffee');
      const expiry = { action: 'expire', expiresAt: toCanonical(NOW - 1) } as const;
      if (offers.includes('expire')) {
        const exp = await correct(store(), { id: b, now: NOW, log, decided, correction: expiry });
        expect(exp.resolution).toBe(`expires:${toCanonical(NOW - 1)}`);
      } else {
        // Not offered: refused as a usage error, nothing changed or recorded (b stays live below).
        await expect(correct(store(), { id: b, now: NOW, log, decided, correction: expiry })).rejects.toMatchObject({ kind: 'usage' });
      }
      const del = await correct(store(), { id: c, now: NOW, log, decided, correction: { action: 'delete' } });
      expect(del.deleted).toEqual([c]);
      expect(decisions).toEqual([`${a} ${sup.resolution}`, ...(offers.includes('expire') ? [`${b} expires:${toCanonical(NOW - 1)}`] : []), `${c} deleted`]);
      for (const id of [a, c]) expect(verdictsFor(state, 's', id)).toHaveLength(1);
      expect(verdictsFor(state, 's', b)).toHaveLength(offers.includes('expire') ? 1 : 0);
      // The live memories a second later: the corrected one as it reads now, b unless it expired, not c.
      expect((await layout.reviewDue(store(), { now: NOW + 1000, afterDays: 0 })).batch.map((m) => m.id).sort()).toEqual([live, ...(offers.includes('expire') ? [] : [b])].sort());

      const missing = '0b7e6f4e-2d6a-4c1e-9a43-5f1d2c3b4a59';
      for (const correction of [{ action: 'delete' }, { action: 'expire', expiresAt: toCanonical(NOW) }, { action: 'supersede', fact: 'x', source: 'y' }] as const) {
        if (offers.includes(correction.action)) await expect(correct(store(), { id: missing, now: NOW, log, decided, correction })).rejects.toThrow(/no memory/);
      }
      // A superseded memory is not corrected again: the live version is.
      if (sup.newId !== undefined) await expect(correct(store(), { id: a, now: NOW, log, decided, correction: { action: 'expire', expiresAt: toCanonical(NOW) } })).rejects.toThrow(/superseded/);
      expect(decisions).toHaveLength(offers.includes('expire') ? 3 : 2);
      expect(verdictsFor(state, 's', missing)).toEqual([]);
    } finally {
      state.close();
    }
  });

  it('erase --user leaves none of that person\'s text anywhere in the store, and everyone else\'s', async () => {
    const texts = ['Ana Quintero has a peanut allergy', 'Ana Quintero banks at Nordea', 'Ana Quintero was in Oslo'];
    const ana = [await world.add({ text: texts[0]!, user: 'ana', at: NOW - 5 * DAY }), await world.add({ text: texts[1]!, user: 'ana', at: NOW - 4 * DAY })];
    await world.add({ text: texts[2]!, user: 'ana', at: NOW - 3 * DAY, expired: true });
    // What the prune job took is still the person's: the job hands prune erase's ledger.
    await layout.prune(store(), { ctx: ctx(), dryRun: false, beforeDelete: deletionRecorder(world.config, 's') });
    const ben = await world.add({ text: 'Ben Okafor reads poetry', user: 'ben', at: NOW - 2 * DAY });
    for (const s of open.splice(0)) s.close();
    world.settle();
    const receipt = await erase(world.config, 's', { user: 'ana' }, { now: () => NOW, log: silentLogger });
    expect(receipt.memories).toBeGreaterThanOrEqual(ana.length);
    const left = await world.dump();
    for (const t of texts) expect(left).not.toContain(t);
    expect(left).toContain('Ben Okafor reads poetry');
    expect(await idsNow()).toEqual([ben]);
  });

  it('a snapshot restores the store as it was: what came later is gone, nothing is lost', async () => {
    const a = await world.add({ text: 'Ana likes tea', user: 'ana', at: NOW - 5 * DAY });
    const b = await world.add({ text: 'Ben reads poetry', user: 'ben', at: NOW - 4 * DAY });
    world.settle();
    const snap = await takeSnapshot(world.config, 's', { now: () => NOW, log: silentLogger });
    await world.add({ text: 'Cleo joined later', user: 'cleo', at: NOW - DAY });
    await layout.prune(store(), { ctx: ctx(), dryRun: false });
    expect(await idsNow()).toHaveLength(3);
    for (const s of open.splice(0)) s.close();
    world.settle();
    await restoreSnapshot(world.config, 's', snap.dir, { now: () => NOW + DAY, log: silentLogger });
    expect(await idsNow()).toEqual([a, b].sort());
    expect((await layout.check(store(), { ctx: ctx() })).ok).toBe(true);
  });

  it('an erased memory stays erased after restoring a snapshot taken before the erase, and after undoing that restore', async () => {
    const texts = ['Ana Quintero has a peanut allergy', 'Ana Quintero banks at Nordea', 'Ana Quintero was in Oslo'];
    await world.add({ text: texts[0]!, user: 'ana', at: NOW - 5 * DAY });
    await world.add({ text: texts[1]!, user: 'ana', at: NOW - 4 * DAY });
    // In the snapshot, but pruned before the erase: the erase never saw it; the ledger knows her all the same.
    await world.add({ text: texts[2]!, user: 'ana', at: NOW - 3 * DAY, expired: true });
    const cleo = await world.add({ text: 'Cleo Marchetti keeps bees', user: 'cleo', at: NOW - 3 * DAY });
    const ben = await world.add({ text: 'Ben Okafor reads poetry', user: 'ben', at: NOW - 2 * DAY });
    world.settle();
    const snap = await takeSnapshot(world.config, 's', { now: () => NOW, log: silentLogger });
    await layout.prune(store(), { ctx: ctx(), dryRun: false, beforeDelete: deletionRecorder(world.config, 's') });
    for (const s of open.splice(0)) s.close();
    world.settle();
    await erase(world.config, 's', { user: 'ana' }, { now: () => NOW + 1000, log: silentLogger });
    await erase(world.config, 's', { ids: [cleo] }, { now: () => NOW + 2000, log: silentLogger });
    expect(await idsNow()).toEqual([ben]);
    for (const s of open.splice(0)) s.close();
    world.settle();

    const restored = await restoreSnapshot(world.config, 's', snap.dir, { now: () => NOW + DAY, log: silentLogger });
    expect(restored.erasedKeptOut).toBeGreaterThanOrEqual(4); // her three, Cleo's one (and what goes with them)
    expect(restored.steps.join('\n')).toMatch(/re-applied the erase ledger .*kept out \d+ erased memor/);
    expect(await idsNow()).toEqual([ben]);
    const left = await world.dump();
    for (const t of [...texts, 'Cleo Marchetti keeps bees']) expect(left).not.toContain(t);
    expect(left).toContain('Ben Okafor reads poetry');
    expect((await layout.check(store(), { ctx: ctx() })).ok).toBe(true);

    // The undo snapshot of that restore is a snapshot too: restoring it keeps them out as well.
    for (const s of open.splice(0)) s.close();
    world.settle();
    const undone = await restoreSnapshot(world.config, 's', restored.undo!, { now: () => NOW + 2 * DAY, log: silentLogger });
    expect(undone.erasedKeptOut).toBe(0);
    expect(await idsNow()).toEqual([ben]);
    const after = await world.dump();
    for (const t of texts) expect(after).not.toContain(t);
  });

  it('erasedIn names exactly what the ledger names, and reads only', async () => {
    const a = await world.add({ text: 'Ana likes tea', user: 'ana', at: NOW - 5 * DAY });
    await world.add({ text: 'Ben reads poetry', user: 'ben', at: NOW - 4 * DAY });
    const before = await idsNow();
    const none = await layout.erasedIn(store(), { id: () => false, user: () => false });
    expect(none).toEqual([]);
    const byId = await layout.erasedIn(store(), { id: (id) => id === a, user: () => false });
    expect(byId).toEqual([{ ids: [a] }]);
    const byUser = await layout.erasedIn(store(), { id: () => false, user: (u) => u === 'ana' });
    expect(byUser).toEqual([{ user: 'ana' }]);
    expect(await idsNow()).toEqual(before);
  });
});
