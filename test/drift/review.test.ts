import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { drift } from '../../jobs/drift.js';
import { openStore } from '../../src/layouts/open.js';
import { openStateDb } from '../../src/state/state.js';
import { confirmMemory, deleteMemory, expireMemory, listReview, supersedeMemory } from '../../src/drift/review.js';
import { inBothTransactions, pendingItems, recordVerdict, verdictsFor } from '../../src/drift/record.js';
import { configFor, daysAgo, insertRows, jobContext, liveIds, NOW, row, sandbox, withDb, withState, type Sandbox } from './helpers.js';
import { DAY_MS, toCanonical } from '../../src/time/instants.js';
import type { Config } from '../../src/config/config.js';

const CLI = resolve(import.meta.dirname, '../../dist/src/cli.js');

describe('review: a person settles what drift could not', () => {
  let box: Sandbox;
  let root: string;
  let config: Config;
  beforeEach(async () => {
    box = sandbox();
    root = join(box.dir, 'configs');
    mkdirSync(root);
    writeFileSync(join(root, 'notes.txt'), 'v1\n');
    writeFileSync(join(root, 'app.json'), JSON.stringify({ db: '16' }));
    config = configFor(box, {
      allow: { fileRoots: [root] },
      rules: [
        { match: { source: '^watch:(?<p>.+)$' }, use: 'file', with: { path: '${p}' } },
        { match: { source: '^db:(?<p>.+)$', fact: 'Postgres' }, use: 'file', with: { path: '${p}', select: '$.db', expect: '^15' }, replacement: 'Postgres ${value}' },
      ],
    });
    insertRows(box.dbPath, [
      { id: 'm_watch', fact: 'notes say v1', source: 'watch:notes.txt', confirmed_at: daysAgo(100) },
      { id: 'm_db', fact: 'Postgres 15', source: 'db:app.json', confirmed_at: daysAgo(101) },
      { id: 'm_chat', fact: 'prefers pnpm', source: 'chat', confirmed_at: daysAgo(102) },
      { id: 'm_old', fact: 'prefers npm', source: 'chat', confirmed_at: daysAgo(300), superseded_by: null },
      { id: 'm_later', fact: 'untouched', source: 'chat', confirmed_at: daysAgo(5) },
    ]);
    // baseline for m_watch (it counts as a confirmation: make it old again), then a change
    await drift({ store: 'agent' }, jobContext(config));
    withDb(box.dbPath, (db) => db.prepare(`UPDATE memory SET confirmed_at = ? WHERE id = 'm_watch'`).run(daysAgo(100)));
    writeFileSync(join(root, 'notes.txt'), 'v2\n');
    await drift({ store: 'agent' }, jobContext(config, NOW + DAY_MS));
  });
  afterEach(() => box.cleanup());

  const handles = () => ({ store: openStore(config, 'agent'), state: openStateDb(box.statePath) });
  async function using<T>(fn: (store: ReturnType<typeof openStore>, state: ReturnType<typeof openStateDb>) => Promise<T> | T): Promise<T> {
    const { store, state } = handles();
    try {
      return await fn(store, state);
    } finally {
      store.close();
      state.close();
    }
  }

  it('lists the waiting items with their evidence and what the next run takes', async () => {
    const list = await using((store, state) => listReview(store, state, config, NOW + DAY_MS));
    const by = Object.fromEntries(list.pending.map((p) => [p.memoryId, p]));
    expect(Object.keys(by).sort()).toEqual(['m_chat', 'm_db', 'm_old', 'm_watch']);
    expect(by.m_watch).toMatchObject({ verdict: 'changed', verifier: 'file', evidence: { previous: { value: 'v1\n' }, current: { value: 'v2\n' } }, memory: { fact: 'notes say v1' } });
    expect(by.m_db).toMatchObject({ verdict: 'contradicted', evidence: { replacement: { fact: 'Postgres 16' } } });
    expect(by.m_chat).toMatchObject({ verdict: 'unverifiable', verifier: null });
    expect(list.dueTotal).toBe(4);
    expect(list.next).toEqual([]);
  });

  it('confirm: confirmed_at = now, recorded as manual, the waiting item resolved, the new reading accepted', async () => {
    const at = NOW + 2 * DAY_MS;
    const d = await using((store, state) => confirmMemory(store, state, 'm_watch', at));
    expect(d).toMatchObject({ action: 'confirm', resolution: 'confirmed', resolved: 1 });
    expect(row(box.dbPath, 'm_watch')!.confirmed_at).toBe(toCanonical(at));
    withState(box.statePath, (state) => {
      expect(pendingItems(state, 'agent', 'm_watch')).toEqual([]);
      const all = verdictsFor(state, 'agent', 'm_watch');
      const changed = all.find((v) => v.verdict === 'changed')!;
      expect(changed).toMatchObject({ needs_person: 1, resolved_at: toCanonical(at), resolution: 'confirmed' });
      expect(all.at(-1)).toMatchObject({ verdict: 'manual', resolution: 'confirmed', needs_person: 0, fingerprint: changed.fingerprint, verifier: 'file' });
    });
    // 100 days later the same reading confirms without a person: "changed" is measured from what the person accepted
    const r = await drift({ store: 'agent' }, jobContext(config, at + 100 * DAY_MS));
    expect(r.verdicts.find((v) => v.id === 'm_watch')).toMatchObject({ verdict: 'confirmed' });
  });

  it('supersede: the correction pair, history kept, recorded', async () => {
    const d = await using((store, state) => supersedeMemory(store, state, 'm_db', { fact: 'Postgres 16', source: 'db:app.json' }, NOW + 2 * DAY_MS));
    expect(d.newId).toMatch(/^m_/);
    expect(row(box.dbPath, 'm_db')!.superseded_by).toBe(d.newId);
    expect(row(box.dbPath, d.newId!)).toMatchObject({ fact: 'Postgres 16', source: 'db:app.json', subject: 'user', superseded_by: null });
    expect(liveIds(box.dbPath)).toContain(d.newId);
    expect(liveIds(box.dbPath)).not.toContain('m_db');
    withState(box.statePath, (state) => expect(verdictsFor(state, 'agent', 'm_db').at(-1)).toMatchObject({ verdict: 'manual', resolution: `superseded:${d.newId}` }));
    await expect(using((store, state) => confirmMemory(store, state, 'm_db', NOW))).rejects.toThrow(/already superseded by/);
  });

  it('expire: the fact decays after all', async () => {
    const d = await using((store, state) => expireMemory(store, state, 'm_chat', '7d', NOW));
    expect(row(box.dbPath, 'm_chat')!.expires_at).toBe(toCanonical(NOW + 7 * DAY_MS));
    expect(d).toMatchObject({ resolution: `expires:${toCanonical(NOW + 7 * DAY_MS)}`, resolved: 1 });
    await expect(using((store, state) => expireMemory(store, state, 'm_chat', 'soon', NOW))).rejects.toThrow(/not a duration/);
  });

  it('delete: through the store with the cascade, each deleted row recorded, waiting items resolved', async () => {
    withDb(box.dbPath, (db) => db.prepare(`UPDATE memory SET superseded_by = 'm_chat' WHERE id = 'm_old'`).run());
    const d = await using((store, state) => deleteMemory(store, state, 'm_chat', NOW));
    expect(d.deleted!.sort()).toEqual(['m_chat', 'm_old']);
    expect(row(box.dbPath, 'm_chat')).toBeUndefined();
    expect(row(box.dbPath, 'm_old')).toBeUndefined();
    withState(box.statePath, (state) => {
      expect(verdictsFor(state, 'agent', 'm_old').at(-1)).toMatchObject({ verdict: 'manual', resolution: 'deleted' });
      expect(JSON.parse(verdictsFor(state, 'agent', 'm_old').at(-1)!.evidence!)).toMatchObject({ cascadedFrom: 'm_chat' });
      expect(pendingItems(state, 'agent').map((p) => p.memory_id).sort()).toEqual(['m_db', 'm_watch']);
    });
    await expect(using((store, state) => deleteMemory(store, state, 'm_chat', NOW))).rejects.toThrow(/no memory "m_chat"/);
  });

  it('a store write that fails records nothing', () => {
    const state = openStateDb(box.statePath);
    const before = (state.prepare('SELECT count(*) AS n FROM drift_verdicts').get() as { n: number }).n;
    try {
      withDb(box.dbPath, (db) => {
        expect(() =>
          inBothTransactions(state, db, () => {
            recordVerdict(state, { store: 'agent', memoryId: 'm_chat', verdict: 'manual', checkedAt: NOW });
            db.prepare(`INSERT INTO memory (id, subject, fact, source) VALUES ('m_chat', 's', 'f', 'x')`).run(); // duplicate id
          }),
        ).toThrow(/UNIQUE/);
      });
      expect((state.prepare('SELECT count(*) AS n FROM drift_verdicts').get() as { n: number }).n).toBe(before);
    } finally {
      state.close();
    }
  });

  describe('from the command line', () => {
    const cli = (...args: string[]) =>
      spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, MEMORY_WARDEN_STATE: box.statePath, LOG_LEVEL: 'silent' } });

    it('review list --json, review confirm, and exit 2 for an unknown id', () => {
      expect(existsSync(CLI), 'build first: npx tsc -p .').toBe(true);
      const file = join(box.dir, 'warden.yaml');
      writeFileSync(file, `stateDb: ./state.db\nstores:\n  agent:\n    db: ./memory.db\n`);
      const list = cli('review', 'list', '--config', file, '--store', 'agent', '--json', '--now', '2026-11-30T06:00:00Z');
      expect(list.status, list.stderr).toBe(0);
      const parsed = JSON.parse(list.stdout);
      expect(parsed.store).toBe('agent');
      expect(parsed.pending.map((p: { memoryId: string }) => p.memoryId).sort()).toEqual(['m_chat', 'm_db', 'm_old', 'm_watch']);
      withDb(box.dbPath, (db) => db.prepare(`UPDATE memory SET fact = ? WHERE id = 'm_chat'`).run('prefers \u001b[2Jpnpm'));
      const text = cli('review', 'list', '--config', file, '--store', 'agent');
      expect(text.stdout).toMatch(/waiting for a person/);
      expect(text.stdout).toContain('prefers \\u001b[2Jpnpm'); // memory text cannot drive the terminal
      expect(text.stdout).not.toContain('\u001b');
      const ok = cli('review', 'confirm', 'm_chat', '--config', file, '--store', 'agent', '--json', '--now', '2026-12-01T00:00:00Z');
      expect(ok.status, ok.stderr).toBe(0);
      expect(JSON.parse(ok.stdout)).toMatchObject({ id: 'm_chat', resolution: 'confirmed', resolved: 1 });
      expect(row(box.dbPath, 'm_chat')!.confirmed_at).toBe('2026-12-01 00:00:00');
      const missing = cli('review', 'delete', 'nope', '--config', file, '--store', 'agent');
      expect(missing.status).toBe(2);
      expect(missing.stderr).toMatch(/no memory "nope"/);
      const sup = cli('review', 'supersede', 'm_db', '--config', file, '--store', 'agent', '--fact', 'Postgres 16', '--source', 'db:app.json');
      expect(sup.status, sup.stderr).toBe(0);
      expect(sup.stdout).toMatch(/superseded m_db by m_/);
    });
  });
});
