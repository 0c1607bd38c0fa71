import { afterEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { openStateDb } from '../../src/state/state.js';
import { pendingItems, recordVerdict, verdictsFor } from '../../src/drift/record.js';
import { confirmMemory, deleteMemory, expireMemory, supersedeMemory } from '../../src/drift/review.js';
import { openStore } from '../../src/layouts/open.js';
import type { CurrentMemory } from '../../src/layouts/contract.js';
import { validateConfig } from '../../src/config/config.js';
import { silentLogger } from '../../src/log/logger.js';
import { startReviewServer, type ReviewServer } from '../../src/review-web/server.js';
import { DAY_MS, toCanonical } from '../../src/time/instants.js';
import { qdrantTarget, type QdrantTarget } from '../helpers/qdrant-server.js';
import { tempDir } from '../helpers/store.js';
import { Mem0Fixture } from '../layouts/mem0-fixture.js';
import { daysAgo, KEY_ENV, memory, NOW, PASSWORD_ENV, startSite, withState, type Site } from './fixtures.js';
import { cardOf, drawPage, filled, post, signIn } from './http.js';

/**
 * A form is acted on only if the row still reads as the page showed it: whatever changed it since (another tab,
 * the command line, the agent writing the store), a decision drawn before is refused with 409 and changes nothing.
 */
const KINDS = ['confirm', 'supersede', 'expire', 'delete'] as const;
const LONG = 'x'.repeat(2500);

/** The agent's own writes, one per field a decision depends on or shows. */
const AGENT_WRITES: Record<string, (db: Database.Database, id: string) => void> = {
  fact: (db, id) => db.prepare(`UPDATE memory SET fact = 'the database is MySQL 8' WHERE id = ?`).run(id),
  // Past what the card shows (2000 characters): the person saw the start only, and still not this text.
  'fact past what is shown': (db, id) => db.prepare(`UPDATE memory SET fact = ? WHERE id = ?`).run(`${LONG} and also the deploy key`, id),
  subject: (db, id) => db.prepare(`UPDATE memory SET subject = 'another user' WHERE id = ?`).run(id),
  source: (db, id) => db.prepare(`UPDATE memory SET source = 'https://fetched.example/page' WHERE id = ?`).run(id),
  confirmed_at: (db, id) => db.prepare(`UPDATE memory SET confirmed_at = ? WHERE id = ?`).run(daysAgo(100), id),
  expires_at: (db, id) => db.prepare(`UPDATE memory SET expires_at = ? WHERE id = ?`).run(toCanonical(NOW + 30 * DAY_MS), id),
  superseded_by: (db, id) => {
    db.prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at) VALUES (?, 'user', 'newer version', 'message:2', ?, ?)`).run(`${id}_v2`, daysAgo(0), daysAgo(0));
    db.prepare(`UPDATE memory SET superseded_by = ? WHERE id = ?`).run(`${id}_v2`, id);
  },
};
const rid = (field: string, kind: string) => `r_${field.replace(/ /g, '_')}_${kind}`;

const row = memory;
const agentWrite = (site: Site, fn: (db: Database.Database) => void) => {
  const db = new Database(site.dbPath);
  try {
    fn(db);
  } finally {
    db.close();
  }
};
const manual = (site: Site, id: string) => withState(site, (s) => verdictsFor(s, 'agent', id).filter((v) => v.verdict === 'manual'));
const rowsWithFact = (site: Site, fact: string) => {
  const db = new Database(site.dbPath, { readonly: true });
  try {
    return db.prepare(`SELECT count(*) FROM memory WHERE fact = ?`).pluck().get(fact);
  } finally {
    db.close();
  }
};

describe('a form drawn before its row changed', { timeout: 60_000 }, () => {
  let site: Site;
  afterEach(async () => {
    await site?.close();
  });

  it('is refused for every field the agent changes, with every decision; untouched rows are still decided', async () => {
    const rows = [];
    for (const field of Object.keys(AGENT_WRITES)) {
      for (const kind of KINDS) rows.push({ id: rid(field, kind), fact: field.startsWith('fact past') ? LONG : `fact for ${field}`, confirmed_at: daysAgo(200), created_at: daysAgo(200) });
    }
    for (const kind of KINDS) rows.push({ id: `u_${kind}`, fact: `untouched ${kind}`, confirmed_at: daysAgo(150), created_at: daysAgo(150) });
    site = await startSite({ rows, review: { batch: 100 } });
    const cookie = await signIn(site.url, 'agent', NOW);
    const cards = await drawPage(site.url, cookie);
    for (const [field, write] of Object.entries(AGENT_WRITES)) {
      for (const kind of KINDS) {
        const id = rid(field, kind);
        agentWrite(site, (db) => write(db, id));
        const after = row(site, id);
        const res = await post(site.url, cookie, filled(cardOf(cards, id), kind));
        expect(res.status, `${field} then ${kind}`).toBe(409);
        expect(res.text).toContain('changed since this page was drawn');
        expect(res.text).toContain('Nothing changed');
        expect(row(site, id), `${field} then ${kind}`).toEqual(after);
        expect(manual(site, id)).toEqual([]);
      }
    }
    expect(rowsWithFact(site, 'a new fact')).toBe(0);

    for (const kind of KINDS) {
      const res = await post(site.url, cookie, filled(cardOf(cards, `u_${kind}`), kind));
      expect(res.status, kind).toBe(200);
      expect(manual(site, `u_${kind}`).length, kind).toBe(1);
    }
    expect(row(site, 'u_confirm')!.confirmed_at).toBe(toCanonical(NOW));
    expect(row(site, 'u_expire')!.expires_at).toBe(toCanonical(NOW + 3 * DAY_MS));
    expect(row(site, 'u_supersede')!.superseded_by).toBeTruthy();
    expect(row(site, 'u_delete')).toBeUndefined();
  });

  it("is refused after another tab's decision, whichever decisions they are", async () => {
    const first = ['confirm', 'supersede', 'expire'] as const;
    const rows = first.flatMap((a) => KINDS.map((b) => ({ id: `t_${a}_${b}`, confirmed_at: daysAgo(200), created_at: daysAgo(200) })));
    site = await startSite({ rows, review: { batch: 100 } });
    const cookie = await signIn(site.url, 'agent', NOW);
    const tab1 = await drawPage(site.url, cookie);
    const tab2 = await drawPage(site.url, cookie);
    for (const a of first) {
      for (const b of KINDS) {
        const id = `t_${a}_${b}`;
        expect((await post(site.url, cookie, filled(cardOf(tab1, id), a))).status).toBe(200);
        const after = row(site, id);
        const res = await post(site.url, cookie, { ...filled(cardOf(tab2, id), b), fact: 'the other tab', days: '3650' });
        expect(res.status, `${a} then ${b}`).toBe(409);
        expect(res.text).toContain('changed since this page was drawn');
        expect(row(site, id), `${a} then ${b}`).toEqual(after);
        expect(manual(site, id).length).toBe(1);
      }
    }
    expect(rowsWithFact(site, 'the other tab')).toBe(0);
  });

  it('after a delete, says the row is not there (not that it was decided) and changes nothing', async () => {
    site = await startSite({ rows: KINDS.map((k) => ({ id: `d_${k}`, confirmed_at: daysAgo(200), created_at: daysAgo(200) })), review: { batch: 100 } });
    const cookie = await signIn(site.url, 'agent', NOW);
    const tab1 = await drawPage(site.url, cookie);
    const tab2 = await drawPage(site.url, cookie);
    for (const k of KINDS) {
      expect((await post(site.url, cookie, filled(cardOf(tab1, `d_${k}`), 'delete'))).status).toBe(200);
      const res = await post(site.url, cookie, filled(cardOf(tab2, `d_${k}`), k));
      expect(res.status, k).toBe(409);
      expect(res.text).toContain(`There is no memory d_${k} in the store`);
      expect(res.text).not.toMatch(/decided/);
      expect(row(site, `d_${k}`)).toBeUndefined();
    }
    expect(rowsWithFact(site, 'a new fact')).toBe(0);
  });

  it('is refused when a verdict came to wait on the row after the page was drawn (the decision would resolve it unseen)', async () => {
    site = await startSite({
      rows: [{ id: 'w_due', confirmed_at: daysAgo(200), created_at: daysAgo(200) }, { id: 'w_waiting', confirmed_at: daysAgo(200), created_at: daysAgo(200) }],
      waiting: ['w_waiting'],
    });
    const cookie = await signIn(site.url, 'agent', NOW);
    const cards = await drawPage(site.url, cookie);
    const contradicted = (id: string) => withState(site, (s) => recordVerdict(s, { store: 'agent', memoryId: id, verdict: 'contradicted', verifier: 'file', evidence: { reason: 'infra says 16' }, checkedAt: NOW, needsPerson: true }));
    contradicted('w_due');
    contradicted('w_waiting');
    for (const [id, kind] of [['w_due', 'confirm'], ['w_due', 'delete'], ['w_waiting', 'confirm'], ['w_waiting', 'expire']] as const) {
      const res = await post(site.url, cookie, filled(cardOf(cards, id), kind));
      expect(res.status, `${id} ${kind}`).toBe(409);
    }
    expect(row(site, 'w_due')).toMatchObject({ confirmed_at: daysAgo(200), expires_at: null });
    expect(withState(site, (s) => pendingItems(s, 'agent').map((p) => p.memory_id).sort())).toEqual(['w_due', 'w_waiting', 'w_waiting']);
    // Drawn again, both show what waits, and the decision goes through.
    const again = await drawPage(site.url, cookie);
    expect((await post(site.url, cookie, filled(cardOf(again, 'w_waiting'), 'confirm'))).status).toBe(200);
    expect(withState(site, (s) => pendingItems(s, 'agent').map((p) => p.memory_id))).toEqual(['w_due']);
  });
});

describe('the layout checks the row inside its own write', { timeout: 60_000 }, () => {
  let site: Site;
  afterEach(async () => {
    await site?.close();
  });

  it('confirm, supersede and expire hold the write lock while the guard looks: the agent cannot write in between', async () => {
    site = await startSite({ rows: ['g_confirm', 'g_supersede', 'g_expire'].map((id) => ({ id, confirmed_at: daysAgo(200) })) });
    const store = openStore(site.config, 'agent');
    const state = openStateDb(site.statePath);
    try {
      const decisions = {
        g_confirm: (guard: () => void) => confirmMemory(store, state, 'g_confirm', NOW, { guard }),
        g_supersede: (guard: () => void) => supersedeMemory(store, state, 'g_supersede', { fact: 'new', source: 's' }, NOW, { guard }),
        g_expire: (guard: () => void) => expireMemory(store, state, 'g_expire', '3d', NOW, { guard }),
      };
      for (const [id, decide] of Object.entries(decisions)) {
        let blocked: unknown;
        await decide(() => {
          const agent = new Database(site.dbPath, { timeout: 0 });
          try {
            agent.prepare(`UPDATE memory SET fact = 'agent was here' WHERE id = ?`).run(id);
          } catch (err) {
            blocked = err;
          } finally {
            agent.close();
          }
        });
        expect((blocked as { code?: string } | undefined)?.code, id).toBe('SQLITE_BUSY');
        expect(row(site, id)!.fact).toBe(`fact of ${id}`);
      }
    } finally {
      state.close();
      store.close();
    }
  });

  it('a delete takes the row only if it still reads as the guard saw it', async () => {
    site = await startSite({ rows: [{ id: 'g_delete', confirmed_at: daysAgo(200) }, { id: 'g_old', confirmed_at: daysAgo(300), superseded_by: 'g_delete' }] });
    const store = openStore(site.config, 'agent');
    const state = openStateDb(site.statePath);
    try {
      // The agent rewrites the row after the guard looked, before the DELETE (the guard looks again inside the
      // DELETE's transaction: the write is made on its first look only, the agent being locked out then).
      let looks = 0;
      const guard = () => {
        if (looks++ === 0) agentWrite(site, (db) => db.prepare(`UPDATE memory SET fact = 'agent was here' WHERE id = 'g_delete'`).run());
      };
      await expect(deleteMemory(store, state, 'g_delete', NOW, { guard })).rejects.toThrow(/changed or deleted by someone else meanwhile/);
      expect(row(site, 'g_delete')!.fact).toBe('agent was here');
      expect(row(site, 'g_old')).toBeDefined();
      expect(verdictsFor(state, 'agent', 'g_delete')).toEqual([]);
      // Unchanged, it goes, with the older version behind it.
      await deleteMemory(store, state, 'g_delete', NOW, { guard: () => undefined });
      expect(row(site, 'g_delete')).toBeUndefined();
      expect(row(site, 'g_old')).toBeUndefined();
    } finally {
      state.close();
      store.close();
    }
  });
});

/** The agent's writes to the chain behind a shown row: each is something a delete of that row would take along. */
const CHAIN_WRITES: Record<string, (db: Database.Database, id: string) => void> = {
  'a new row linked to it': (db, id) => {
    db.prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at, superseded_by) VALUES (?, 'user', 'the agent wrote this just now', 'message:9', ?, ?, ?)`).run(`${id}_new`, daysAgo(0), daysAgo(0), id);
  },
  'a new row linked to an older version': (db, id) => {
    db.prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at, superseded_by) VALUES (?, 'user', 'the agent wrote this just now', 'message:9', ?, ?, ?)`).run(`${id}_new`, daysAgo(0), daysAgo(0), `${id}_old`);
  },
  'an older version rewritten': (db, id) => db.prepare(`UPDATE memory SET fact = 'rewritten by the agent' WHERE id = ?`).run(`${id}_old`),
  'an older version unlinked': (db, id) => db.prepare(`UPDATE memory SET superseded_by = NULL WHERE id = ?`).run(`${id}_old`),
  'an older version relinked elsewhere': (db, id) => db.prepare(`UPDATE memory SET superseded_by = 'elsewhere' WHERE id = ?`).run(`${id}_oldest`),
};

describe('a form drawn before the chain behind its row changed', { timeout: 60_000 }, () => {
  let site: Site;
  afterEach(async () => {
    await site?.close();
  });

  const chainRows = (id: string) => [
    { id, fact: `fact of ${id}`, confirmed_at: daysAgo(200), created_at: daysAgo(200) },
    { id: `${id}_old`, fact: 'older', confirmed_at: daysAgo(300), created_at: daysAgo(300), superseded_by: id },
    { id: `${id}_oldest`, fact: 'oldest', confirmed_at: daysAgo(400), created_at: daysAgo(400), superseded_by: `${id}_old` },
  ];

  it('is refused (409) with every decision, and the delete takes none of the rows, the agent\'s new one included', async () => {
    const ids: string[] = [];
    for (const what of Object.keys(CHAIN_WRITES)) for (const kind of KINDS) ids.push(rid(what, kind));
    site = await startSite({ rows: [...ids.flatMap(chainRows), { id: 'elsewhere', confirmed_at: daysAgo(1), created_at: daysAgo(1) }], review: { batch: 100 } });
    const cookie = await signIn(site.url, 'agent', NOW);
    const cards = await drawPage(site.url, cookie);
    for (const [what, write] of Object.entries(CHAIN_WRITES)) {
      for (const kind of KINDS) {
        const id = rid(what, kind);
        agentWrite(site, (db) => write(db, id));
        const before = [id, `${id}_old`, `${id}_oldest`, `${id}_new`].map((r) => row(site, r));
        const res = await post(site.url, cookie, filled(cardOf(cards, id), kind));
        expect(res.status, `${what} then ${kind}`).toBe(409);
        expect(res.text).toContain('changed since this page was drawn');
        expect([id, `${id}_old`, `${id}_oldest`, `${id}_new`].map((r) => row(site, r)), `${what} then ${kind}`).toEqual(before);
        expect(manual(site, id)).toEqual([]);
      }
    }
  });

  it('a delete whose chain the agent grows after the first look is refused inside its transaction', async () => {
    site = await startSite({ rows: chainRows('c') });
    const store = openStore(site.config, 'agent');
    const state = openStateDb(site.statePath);
    try {
      const seen: string[] = [];
      let looks = 0;
      // First look: as drawn. Then the agent links a new row, before the DELETE's transaction starts.
      const guard = (r: CurrentMemory) => {
        seen.push(JSON.stringify(r?.olderVersions?.map((o) => o.id)));
        if (looks++ === 0) agentWrite(site, (db) => CHAIN_WRITES['a new row linked to it']!(db, 'c'));
        if (seen.length > 1 && seen.at(-1) !== seen[0]) throw new Error('drawn before');
      };
      await expect(deleteMemory(store, state, 'c', NOW, { guard })).rejects.toThrow('drawn before');
      expect(seen).toEqual([JSON.stringify(['c_old', 'c_oldest']), JSON.stringify(['c_new', 'c_old', 'c_oldest'])]);
      for (const id of ['c', 'c_old', 'c_oldest', 'c_new']) expect(row(site, id), id).toBeDefined();
      expect(verdictsFor(state, 'agent', 'c')).toEqual([]);
    } finally {
      state.close();
      store.close();
    }
  });

  it('an unchanged chain is deleted whole, as the page drew it', async () => {
    site = await startSite({ rows: chainRows('d') });
    const cookie = await signIn(site.url, 'agent', NOW);
    const res = await post(site.url, cookie, filled(cardOf(await drawPage(site.url, cookie), 'd'), 'delete'));
    expect(res.status).toBe(200);
    for (const id of ['d', 'd_old', 'd_oldest']) expect(row(site, id), id).toBeUndefined();
  });
});

describe('a mem0 store on the page', { timeout: 60_000 }, () => {
  let q: QdrantTarget;
  let tmp: ReturnType<typeof tempDir>;
  let fx: Mem0Fixture;
  let server: ReviewServer | undefined;
  afterEach(async () => {
    await server?.close();
    fx?.close();
    await q?.close();
    tmp?.cleanup();
  });

  it('confirms a due memory, and refuses a Confirm drawn before the agent changed it in any shown field or its expiry', async () => {
    q = await qdrantTarget();
    tmp = tempDir('mw-review-mem0-');
    fx = await Mem0Fixture.create(q, tmp.dir, 'python');
    const at = NOW - 200 * DAY_MS;
    const mk = (text: string) => fx.add(text, { user_id: 'kim', actor_id: 'kim', role: 'user', at });
    const ok = await mk('Prefers tea');
    const changes: Record<string, (p: Record<string, unknown>) => Record<string, unknown>> = {
      'data, nothing else': (p) => ({ ...p, data: 'Prefers whisky' }),
      user: (p) => ({ ...p, user_id: 'lee' }),
      actor: (p) => ({ ...p, actor_id: 'mallory' }),
      updated_at: (p) => ({ ...p, updated_at: '2026-06-01T00:00:00+00:00' }),
      expiration_date: (p) => ({ ...p, expiration_date: '2027-01-01' }),
    };
    const ids: Record<string, string> = {};
    for (const name of Object.keys(changes)) ids[name] = await mk(`Memory for ${name}`);
    const updated = await mk('Lives in Porto');
    const base = fx.config();
    const raw = {
      stateDb: join(tmp.dir, 'state.db'),
      stores: { m: base.stores.m },
      review: { batch: 50, secretEnv: KEY_ENV, auth: { mode: 'password', passwordEnv: PASSWORD_ENV }, listen: { host: '127.0.0.1', port: 0 } },
    };
    server = await startReviewServer({ config: validateConfig(raw), log: silentLogger, now: () => NOW });
    const cookie = await signIn(server.url, 'm', NOW);
    const cards = await drawPage(server.url, cookie, 'm');
    expect(cardOf(cards, ok).forms.supersede).toBeUndefined();

    const points = async () => new Map((await fx.points()).map((p) => [p.id, p.payload]));
    // Unchanged: confirmed through mem0's updated_at, recorded as the person's.
    const res = await post(server.url, cookie, cardOf(cards, ok).forms.confirm!, 'm');
    expect(res.status).toBe(200);
    expect((await points()).get(ok)!.updated_at).toBe(new Date(NOW).toISOString().replace('.000Z', '+00:00'));
    const state = openStateDb(raw.stateDb);
    expect(verdictsFor(state, 'm', ok).map((v) => v.resolution)).toEqual(['confirmed']);
    state.close();

    for (const [name, change] of Object.entries(changes)) {
      await fx.rawPoint(ids[name]!, change((await points()).get(ids[name]!)!));
      const res = await post(server.url, cookie, cardOf(cards, ids[name]!).forms.confirm!, 'm');
      expect(res.status, name).toBe(409);
      expect(res.text).toContain('changed since this page was drawn');
    }
    await fx.update(updated, 'Lives in Lisbon', NOW - DAY_MS); // mem0's own update
    expect((await post(server.url, cookie, cardOf(cards, updated).forms.confirm!, 'm')).status).toBe(409);
    const after = await points();
    expect(after.get(updated)!.updated_at).toBe(new Date(NOW - DAY_MS).toISOString().replace('Z', '000+00:00'));
    for (const name of Object.keys(changes)) expect(after.get(ids[name]!)!.updated_at, name).not.toBe(new Date(NOW).toISOString().replace('.000Z', '+00:00'));

    q.assertConforms();
  });
});
