import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import pg from 'pg';
import { CLI } from '../helpers/cli.js';
import { pgvectorSdkStore, type PgvectorSdkStore } from './mem0-pgvector-store.js';
import { cliAsync as cli, type SdkStore } from './mem0-sdk.js';

/**
 * A restore of a mem0 pgvector store (mem0ai 3.3.1's own tables on PGlite with pgvector, history in the SDK's SQLite
 * file) that fails after mem0's tables were replaced by the snapshot's: it is rolled back to the undo snapshot, the
 * tables included, and mem0 reads and writes the store as it was before the restore.
 */
const FAR = '2027-09-01T00:00:00Z';

/**
 * Preloaded into the CLI (node --require): the nth file renamed onto a path matching MW_TEST_FAIL.rename, or the nth
 * statement to PostgreSQL matching MW_TEST_FAIL.sql, fails (EIO; a server error) instead of being done. The hook
 * appends what it failed to MW_TEST_FAIL.log, so the test knows the failure happened.
 */
const FAIL_HOOK = `
const fs = require('node:fs');
const { syncBuiltinESMExports } = require('node:module');
const spec = JSON.parse(process.env.MW_TEST_FAIL);
let seen = 0;
const hit = (what) => { if (++seen !== (spec.nth || 1)) return false; fs.appendFileSync(spec.log, what + '\\n'); return true; };
if (spec.rename) {
  const re = new RegExp(spec.rename);
  const rename = fs.renameSync;
  fs.renameSync = function (from, to) {
    if (re.test(String(to)) && hit('rename ' + to)) throw Object.assign(new Error('EIO: i/o error, rename ' + to), { code: 'EIO' });
    return rename.apply(this, arguments);
  };
  syncBuiltinESMExports();
}
if (spec.sql) {
  const re = new RegExp(spec.sql);
  const pg = require(${JSON.stringify(createRequire(import.meta.url).resolve('pg'))});
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function (config, ...rest) {
    const text = typeof config === 'string' ? config : config && config.text;
    if (typeof text === 'string' && re.test(text) && hit('sql ' + text.replace(/\\s+/g, ' ').slice(0, 60))) {
      config = 'SELECT injected_failure_of_the_test()';
    }
    return query.call(this, config, ...rest);
  };
}
`;

describe('a failed restore of a mem0 pgvector store (mem0ai 3.3.1, PGlite)', { timeout: 240_000 }, () => {
  let fx: PgvectorSdkStore;
  let client: pg.Client;
  let s: SdkStore;
  let tmp: { dir: string };

  beforeAll(async () => {
    fx = await pgvectorSdkStore('mw-sdk-pg-rf-');
    ({ client, s } = fx);
    tmp = { dir: fx.dir };
  });

  afterAll(async () => {
    await fx?.stop();
  });

  /** The CLI with the failure hook preloaded; what it failed, from the hook's log. */
  function failing(args: string[], at: { rename?: string; sql?: string; nth?: number }): Promise<{ code: number | null; stdout: string; stderr: string; failed: string }> {
    const hook = join(tmp.dir, 'fail-hook.cjs');
    writeFileSync(hook, FAIL_HOOK);
    const log = join(tmp.dir, `fail-${Math.random().toString(36).slice(2, 8)}.log`);
    const env = { ...process.env, LOG_LEVEL: 'silent', NODE_OPTIONS: `--require ${hook}`, MW_TEST_FAIL: JSON.stringify({ ...at, log }) };
    const child = spawn(process.execPath, [CLI, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr, failed: existsSync(log) ? readFileSync(log, 'utf8') : '' })));
  }

  /** Both tables' rows (ids and payloads, in id order) and the history file's rows: the store as mem0 keeps it. */
  async function state(): Promise<unknown> {
    const tables: Record<string, unknown> = {};
    for (const t of ['memories', 'memories_entities']) tables[t] = (await client.query(`SELECT id::text AS id, vector::text AS v, payload FROM ${t} ORDER BY id`)).rows;
    const Database = (await import('better-sqlite3')).default;
    const db = new Database(s.historyPath, { readonly: true });
    const history = db.prepare('SELECT * FROM memory_history ORDER BY id').all();
    db.close();
    return { tables, history };
  }

  it('fails after the tables\' step (the history file\'s replacement, the erase ledger\'s re-application): rolled back, tables included; mem0 still works', async () => {
    let m = await s.open();
    const add = async (text: string, userId: string) => (await m.add(text, { userId, infer: false })).results[0].id as string;
    const a1 = await add('Alice Martin lives in Berlin', 'alice');
    await m.update(a1, { text: 'Alice Martin lives in Berlin near Tempelhof Airport' });
    const b1 = await add('Bob Keller works on Project Falcon', 'bob');
    await m.update(b1, { text: 'Bob Keller leads Project Falcon' });
    const b2 = await add('Bob Keller drinks Earl Grey', 'bob');
    await (await m.getEntityStore()).list({}, 1);
    const config = s.configFile();
    const run = (...args: string[]) => cli([...args, '--config', config]);

    const snap = await run('run', 'snapshot', '--json');
    expect(snap.code, snap.stderr).toBe(0);
    const dir = snap.json().dir as string;
    // After the snapshot: a memory added, one deleted by mem0, Alice erased (the ledger a restore re-applies).
    const dana = await add('Dana Fox plays chess', 'dana');
    await m.delete(b2);
    const erased = await run('erase', '--user', 'alice', '--json', '--now', FAR);
    expect(erased.code, erased.stdout + erased.stderr).toBe(1); // her rows are still in the snapshot
    s.close(m);

    const faults: { rename?: string; sql?: string; nth?: number }[] = [
      { rename: 'memory\\.db$' }, // the history file put in place: the tables are the snapshot's already
      { sql: '^VACUUM' }, // the erase ledger re-applied to the restored tables: its first VACUUM FULL
    ];
    let at = 0;
    for (const fault of faults) {
      const before = await state();
      expect(JSON.stringify(before)).toContain('Dana Fox');
      const r = await failing(['restore', dir, '--store', 'm', '--json', '--now', `2026-12-06T09:0${at++}:00Z`, '--config', config], fault);
      const what = JSON.stringify(fault);
      expect(r.failed, `${what}: ${r.stderr}`).not.toBe(''); // the failure was injected
      expect(r.code, `${what}: ${r.stdout}`).not.toBe(0);
      expect(r.stderr, what).toMatch(/EIO|injected_failure_of_the_test/);
      expect(await state(), what).toEqual(before); // the tables and the history as they were
      expect(existsSync(`${s.historyPath}.warden-restore.json`), what).toBe(false); // rolled back, nothing pending
      const check = await run('check', '--json', '--now', FAR);
      expect(check.json().problems, what).toEqual([]);
      m = await s.open();
      expect((await m.get(dana)).memory, what).toBe('Dana Fox plays chess');
      expect(await m.get(b2), what).toBeNull();
      expect(await m.get(a1), what).toBeNull();
      expect((await m.search('Bob Keller leads Project Falcon', { filters: { user_id: 'bob' } })).results.map((x: any) => x.id), what).toContain(b1);
      const erin = await add('Erin Walsh likes rowing', 'erin');
      expect((await m.get(erin)).memory, what).toBe('Erin Walsh likes rowing');
      await m.delete(erin);
      s.close(m);
    }

    // The same restore without a fault: the snapshot's store, Alice kept out.
    const done = await run('restore', dir, '--store', 'm', '--json', '--now', '2026-12-06T09:09:00Z');
    expect(done.code, done.stdout + done.stderr).toBe(0);
    expect((await client.query('SELECT id::text AS id FROM memories ORDER BY id')).rows.map((x) => x.id)).toEqual([b1, b2].sort());
  });
});
