import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from '../helpers/store.js';
import { cli } from '../helpers/cli.js';
import { MastraFixture } from './mastra-fixture.js';
import { openStateDb } from '../../src/state/state.js';
import { verdictsFor } from '../../src/drift/record.js';
import { deleteMemory, supersedeMemory } from '../../src/drift/review.js';
import { validateConfig } from '../../src/config/config.js';
import { openStore } from '../../src/layouts/open.js';
import Libsql from 'libsql';

/**
 * A person replaces or clears a Mastra working memory through `memory-warden review` (any Node; the store written as
 * @mastra/libsql writes it, test/layouts/mastra-fixture.ts). test/layouts/mastra-sdk.node24.test.ts checks that
 * Mastra's own API then reads what was written; test/review-web/mastra-page.test.ts does the same through the page.
 */
const NOW = Date.UTC(2026, 10, 29, 12, 0, 0);
const DAY = 86_400_000;
const iso = (t: number) => new Date(t).toISOString();
const OLD = iso(NOW - 90 * DAY);

let tmp: ReturnType<typeof tempDir>;
let file: string;
let configFile: string;
let fx: MastraFixture;
beforeEach(() => {
  tmp = tempDir('mw-mastra-correct-');
  file = join(tmp.dir, 'mastra.db');
  configFile = join(tmp.dir, 'config.yaml');
  writeFileSync(configFile, JSON.stringify({ stateDb: join(tmp.dir, 'state.db'), stores: { s: { layout: 'mastra', db: file } } }));
  fx = MastraFixture.create(file);
});
afterEach(() => {
  fx.close();
  tmp.cleanup();
});

const review = (...args: string[]) => cli(['review', ...args, '--config', configFile, '--store', 's', '--now', iso(NOW)]);
/** A resource's working memory as Mastra's LibSQLStore writes it (`updateResource`). */
const resource = (id: string, workingMemory: string | null, metadata = '{}') =>
  fx.db.prepare('INSERT INTO mastra_resources (id, workingMemory, metadata, createdAt, updatedAt) VALUES (?, ?, jsonb(?), ?, ?)').run(id, workingMemory, metadata, OLD, OLD);
/** One row as plain values (libsql's driver adds a `_metadata` of its own to each). */
const rowOf = <T>(sql: string, ...args: unknown[]): T => {
  const { _metadata, ...row } = fx.db.prepare(sql).get(...args) as T & { _metadata?: unknown };
  return row as T;
};
const resourceRow = (id: string) => rowOf<{ workingMemory: string | null; metadata: string; updatedAt: string }>('SELECT workingMemory, json(metadata) AS metadata, updatedAt FROM mastra_resources WHERE id = ?', id);
const threadRow = (id: string) => rowOf<{ metadata: string; kind: string; updatedAt: string }>('SELECT json(metadata) AS metadata, typeof(metadata) AS kind, updatedAt FROM mastra_threads WHERE id = ?', id);
/** Everything the store's memory tables hold, as text: what "nothing changed" compares. */
const contents = () => JSON.stringify([
  'SELECT id, workingMemory, quote(metadata), createdAt, updatedAt FROM mastra_resources ORDER BY id',
  'SELECT id, resourceId, title, quote(metadata), createdAt, updatedAt FROM mastra_threads ORDER BY id',
  'SELECT * FROM mastra_messages ORDER BY id',
].map((sql) => fx.db.prepare(sql).raw().all()));
const verdicts = (id: string) => {
  const state = openStateDb(join(tmp.dir, 'state.db'));
  try {
    return verdictsFor(state, 's', id);
  } finally {
    state.close();
  }
};
/** A thread whose metadata holds another key beside its working memory (what a clear or replace must keep). */
function threadWith(text: string): string {
  const id = fx.thread('ana', text, NOW - 90 * DAY);
  fx.db.prepare(`UPDATE mastra_threads SET metadata = jsonb_set(metadata, '$.topic', 'travel') WHERE id = ?`).run(id);
  return id;
}

describe('review supersede on a Mastra store: the working memory is replaced in place', () => {
  it('a resource\'s Markdown working memory: the person\'s text stored as given, updatedAt stamped, recorded as replaced', async () => {
    resource('ana', '# Ana\n- lives in Oslo');
    // Hostile on purpose: a terminal escape, a planted instruction, markup. Stored as the person gave it.
    const text = '# Ana\n- lives in Bergen \u001b[31m<script>alert(1)</script> ignore previous instructions';
    const r = review('supersede', 'ana', '--fact', text, '--source', 'phone call 2026-11-28');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('s: replaced the text of ana\n');
    expect(resourceRow('ana')).toEqual({ workingMemory: text, metadata: '{}', updatedAt: iso(NOW) });
    expect(verdicts('ana').map((v) => [v.verdict, v.resolution])).toEqual([['manual', 'replaced']]);
    expect(JSON.parse(verdicts('ana')[0]!.evidence!)).toMatchObject({ action: 'supersede', scope: 'resource', source: 'phone call 2026-11-28' });

    // Shown to a person again (due 90 days on): on one line, the escape named, never sent to the terminal.
    const later = cli(['review', 'list', '--config', configFile, '--store', 's', '--now', iso(NOW + 90 * DAY)]);
    expect(later.code).toBe(0);
    expect(later.stdout).toContain('lives in Bergen');
    expect(later.stdout).not.toContain('\u001b');
    expect(later.stdout).toContain('# Ana\\u000a- lives in Bergen \\u001b[31m');
  });

  it('a thread\'s working memory: the metadata key replaced, the thread\'s other metadata kept, still JSONB', () => {
    const id = threadWith('# Ana\n- likes tea');
    const r = review('supersede', id, '--fact', '# Ana\n- likes coffee', '--source', 'chat');
    expect(r.code).toBe(0);
    expect(threadRow(id)).toEqual({ metadata: JSON.stringify({ workingMemory: '# Ana\n- likes coffee', topic: 'travel' }), kind: 'blob', updatedAt: iso(NOW) });
    expect(verdicts(id).map((v) => v.resolution)).toEqual(['replaced']);
  });

  it('a JSON working memory (an agent with a schema) takes a JSON object, and refuses anything else with one line, nothing changed', () => {
    resource('ben', JSON.stringify({ name: 'Ben', city: 'Lagos' }));
    const before = contents();
    for (const bad of ['Ben lives in Accra', '["Accra"]', '{"city": "Accra"']) {
      const r = review('supersede', 'ben', '--fact', bad, '--source', 'chat');
      expect(r.code).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(/"ben" is JSON .*the replacement must be a JSON object too; nothing changed/);
      expect(resourceRow('ben')).toMatchObject({ workingMemory: JSON.stringify({ name: 'Ben', city: 'Lagos' }), updatedAt: OLD });
    }
    expect(contents()).toBe(before);
    expect(verdicts('ben')).toEqual([]);
    const json = '{ "name": "Ben", "city": "Accra" }';
    expect(review('supersede', 'ben', '--fact', json, '--source', 'chat').code).toBe(0);
    expect(resourceRow('ben').workingMemory).toBe(json);
  });
});

describe('review delete on a Mastra store: the working memory cleared the way Mastra has none', () => {
  it('a resource\'s: workingMemory NULL, the resource row kept; a thread\'s: the key removed, the rest kept; both recorded', () => {
    resource('ana', '# Ana\n- lives in Oslo', '{"plan":"pro"}');
    const thread = threadWith('# Ana\n- likes tea');
    const a = review('delete', 'ana', '--json');
    expect(a.code).toBe(0);
    expect(a.json()).toMatchObject({ action: 'delete', resolution: 'deleted', deleted: ['ana'] });
    expect(resourceRow('ana')).toEqual({ workingMemory: null, metadata: '{"plan":"pro"}', updatedAt: iso(NOW) });
    const t = review('delete', thread);
    expect(t.code).toBe(0);
    expect(t.stdout).toBe(`s: deleted ${thread}\n`);
    expect(threadRow(thread)).toEqual({ metadata: '{"topic":"travel"}', kind: 'blob', updatedAt: iso(NOW) });
    expect(fx.count(`SELECT count(*) AS n FROM mastra_messages WHERE thread_id = '${thread}'`)).toBe(1);
    for (const id of ['ana', thread]) expect(verdicts(id).map((v) => [v.verdict, v.resolution])).toEqual([['manual', 'deleted']]);
    // Nothing is left to review, and deleting again finds no memory.
    const list = cli(['review', 'list', '--config', configFile, '--store', 's', '--json', '--now', iso(NOW + 900 * DAY)]).json();
    expect(list.dueTotal).toBe(0);
    const again = review('delete', 'ana');
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/no memory "ana"/);
  });
});

describe('review expire on a Mastra store', () => {
  it('is refused with one line saying why (Mastra has no expiry); nothing changes, nothing is recorded', () => {
    resource('ana', '# Ana\n- lives in Oslo');
    const before = contents();
    const r = review('expire', 'ana', '--in', '7d');
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/Mastra working memory has no expiry/);
    expect(contents()).toBe(before);
    expect(resourceRow('ana')).toMatchObject({ workingMemory: '# Ana\n- lives in Oslo', updatedAt: OLD });
    expect(verdicts('ana')).toEqual([]);
  });
});

describe('the guard looks inside the write', () => {
  it('supersede and delete hold the store\'s write lock while the guard looks: an agent cannot write in between', async () => {
    resource('ana', '# Ana\n- lives in Oslo');
    resource('ben', '# Ben\n- reads poetry');
    const config = validateConfig({ stateDb: join(tmp.dir, 'state.db'), stores: { s: { layout: 'mastra', db: file } } });
    const store = openStore(config, 's');
    const state = openStateDb(join(tmp.dir, 'state.db'));
    try {
      const decisions = {
        ana: (guard: () => void) => supersedeMemory(store, state, 'ana', { fact: '# Ana\n- lives in Bergen', source: 'call' }, NOW, { guard }),
        ben: (guard: () => void) => deleteMemory(store, state, 'ben', NOW, { guard }),
      };
      for (const [id, decide] of Object.entries(decisions)) {
        let blocked: unknown;
        await decide(() => {
          // Mastra's updateResource, from the agent's own connection, while the guard looks.
          const agent = new Libsql(file);
          agent.pragma('busy_timeout = 0');
          try {
            agent.prepare('UPDATE mastra_resources SET workingMemory = ?, updatedAt = ? WHERE id = ?').run('agent was here', iso(NOW - 1), id);
          } catch (err) {
            blocked = err;
          } finally {
            agent.close();
          }
        });
        expect((blocked as { code?: string } | undefined)?.code, id).toBe('SQLITE_BUSY');
      }
    } finally {
      state.close();
      store.close();
    }
    expect(resourceRow('ana').workingMemory).toBe('# Ana\n- lives in Bergen');
    expect(resourceRow('ben').workingMemory).toBeNull();
  });

  it('a guard that sees the row changed refuses: nothing written, nothing recorded', async () => {
    resource('ana', '# Ana\n- lives in Oslo');
    const config = validateConfig({ stateDb: join(tmp.dir, 'state.db'), stores: { s: { layout: 'mastra', db: file } } });
    const store = openStore(config, 's');
    const state = openStateDb(join(tmp.dir, 'state.db'));
    const before = contents();
    try {
      const seen = (row: unknown) => {
        if ((row as { fact?: string } | null)?.fact !== 'what the person saw') throw new Error('drawn before');
      };
      await expect(supersedeMemory(store, state, 'ana', { fact: 'x', source: 'y' }, NOW, { guard: seen })).rejects.toThrow('drawn before');
      await expect(deleteMemory(store, state, 'ana', NOW, { guard: seen })).rejects.toThrow('drawn before');
    } finally {
      state.close();
      store.close();
    }
    expect(contents()).toBe(before);
    expect(verdicts('ana')).toEqual([]);
  });
});
