import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ids, makeStore, tempDir } from '../helpers/store.js';
import { cli, type CliResult } from '../helpers/cli.js';
import { eraseKey, eraseKeyId } from '../../src/erase/key.js';
import { openStateDb } from '../../src/state/state.js';

/**
 * The erase key is bound to its state db: a key that is missing, another one, damaged, or looked for in the wrong
 * place is refused in one line that names the file, says how to restore it and how to start a new key knowingly;
 * it is never silently made again while the state db holds hashes made under the one it lost. It can live apart
 * from the state db (`eraseKeyFile`), and `config` and `erase key` say where it is.
 */
let tmp: { dir: string; cleanup: () => void };
beforeEach(() => {
  tmp = tempDir('mw-erase-key-');
});
afterEach(() => tmp.cleanup());

const ROWS = [
  { id: 'k1', subject: 'zara', fact: 'Zara Quell takes the night train' },
  { id: 'k2', subject: 'zara', fact: 'Zara Quell keeps bees' },
  { id: 'k3', subject: 'yuri', fact: 'Yuri likes rain' },
];

function setup(extra = '') {
  const db = makeStore(join(tmp.dir, 'memory.db'), ROWS);
  const stateDir = join(tmp.dir, 'state');
  const config = join(tmp.dir, 'config.yaml');
  writeFileSync(config, `stateDb: ${join(stateDir, 'state.db')}\nsnapshot:\n  root: ${join(tmp.dir, 'backups')}\nstores:\n  agent:\n    db: ${db}\n${extra}`);
  const run = (...args: string[]) => cli([...args, '--config', config]);
  return { db, stateDir, stateDb: join(stateDir, 'state.db'), keyFile: join(stateDir, 'erase.key'), config, run };
}

/** One line on stderr, exit 2, naming `path`. */
function refused(r: CliResult, path: string): string {
  expect(r.code, r.stdout + r.stderr).toBe(2);
  const lines = r.stderr.trim().split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toContain(path);
  return lines[0]!;
}

const otherKey = () => `${'ab'.repeat(32)}\n`;

describe('the erase key and its state db', () => {
  it('first use makes it beside the state db (0600) and records its id; erase key and config say where it is', () => {
    const s = setup();
    const shown = s.run('erase', 'key', '--json');
    expect(shown.code, shown.stderr).toBe(0);
    const key = readFileSync(s.keyFile, 'utf8').trim();
    expect(shown.json()).toEqual({ path: s.keyFile, keyId: eraseKeyId(Buffer.from(key, 'hex')), replaced: null });
    expect(statSync(s.keyFile).mode & 0o777).toBe(0o600);
    expect(s.run('erase', 'key').stdout).toContain(`erase key ${s.keyFile} (key id ${eraseKeyId(Buffer.from(key, 'hex'))})`);
    expect(s.run('config').json()).toMatchObject({ stateDb: s.stateDb, eraseKeyFile: s.keyFile });
  });

  it('deleted: refused in one line (the file, restore from backup, erase key --new), nothing erased, no key made; --new starts one knowingly', () => {
    const s = setup();
    expect(s.run('erase', '--store', 'agent', '--subject', 'night train').code).toBe(0);
    const before = s.run('erase', 'key', '--json').json<{ keyId: string }>().keyId;
    rmSync(s.keyFile);
    for (const args of [['erase', '--store', 'agent', '--subject', 'keeps bees'], ['erase', '--store', 'agent', '--user', 'zara', '--dry-run'], ['erase', 'key'], ['erase', 'receipts', '--user', 'zara']]) {
      const line = refused(s.run(...args), s.keyFile);
      expect(line, args.join(' ')).toMatch(/is missing, and state db \S+ holds hashes made under erase key [0-9a-f]{16}: restore the key from your backup to .*erase key --new/);
      expect(existsSync(s.keyFile), args.join(' ')).toBe(false);
    }
    expect(ids(s.db)).toEqual(['k2', 'k3']);

    const fresh = s.run('erase', 'key', '--new', '--json');
    expect(fresh.code, fresh.stderr).toBe(0);
    expect(fresh.json()).toMatchObject({ path: s.keyFile, replaced: before });
    expect(fresh.json<{ keyId: string }>().keyId).not.toBe(before);
    expect(s.run('erase', '--store', 'agent', '--subject', 'keeps bees').code).toBe(0);
    expect(ids(s.db)).toEqual(['k3']);
    // A key is never overwritten, not even knowingly: it has to be moved away first.
    const again = refused(s.run('erase', 'key', '--new'), s.keyFile);
    expect(again).toMatch(/exists; a key is never overwritten/);
    expect(s.run('erase', 'key', '--json').json<{ keyId: string }>().keyId).toBe(fresh.json<{ keyId: string }>().keyId);
  });

  it.each([
    ['replaced by another key', () => otherKey(), /is not the key state db \S+ was used with \(this file's key id [0-9a-f]{16}, the state db's [0-9a-f]{16}\): restore that key from your backup/],
    ['truncated', (k: string) => k.slice(0, 40), /is not 64 hex digits \(damaged or truncated\): restore it from your backup \(state db \S+ holds hashes made under key [0-9a-f]{16}\)/],
    ['emptied', () => '', /is not 64 hex digits/],
    ['upper-cased and re-wrapped', (k: string) => `${k.slice(0, 32).toUpperCase()}\n${k.slice(32)}`, /is not 64 hex digits/],
  ])('%s: refused in one line, the file left as it is, nothing erased', (_, damage, message) => {
    const s = setup();
    expect(s.run('erase', '--store', 'agent', '--subject', 'night train').code).toBe(0);
    const damaged = damage(readFileSync(s.keyFile, 'utf8'));
    writeFileSync(s.keyFile, damaged);
    for (const args of [['erase', '--store', 'agent', '--subject', 'keeps bees'], ['erase', 'key']]) {
      const line = refused(s.run(...args), s.keyFile);
      expect(line).toMatch(message);
      expect(line).toMatch(/erase key --new/);
    }
    expect(readFileSync(s.keyFile, 'utf8')).toBe(damaged);
    expect(ids(s.db)).toEqual(['k2', 'k3']);
  });

  it('pointing elsewhere: eraseKeyFile naming another installation\'s key, or a file that is not there, is refused; nothing is made there', () => {
    const s = setup();
    expect(s.run('erase', '--store', 'agent', '--subject', 'night train').code).toBe(0);
    const mine = readFileSync(s.keyFile, 'utf8');
    // Another installation's key (its own state db made it), and a path where nothing is.
    const other = join(tmp.dir, 'other', 'erase.key');
    eraseKey({ stateDb: join(tmp.dir, 'other', 'state.db') });
    const nowhere = join(tmp.dir, 'keys', 'erase.key');
    for (const [path, message] of [[other, /is not the key state db/], [nowhere, /is missing, and state db/]] as const) {
      const config = join(tmp.dir, 'elsewhere.yaml');
      writeFileSync(config, `${readFileSync(s.config, 'utf8')}eraseKeyFile: ${path}\n`);
      const line = refused(cli(['erase', '--store', 'agent', '--subject', 'keeps bees', '--config', config]), path);
      expect(line).toMatch(message);
    }
    expect(existsSync(nowhere)).toBe(false);
    expect(readFileSync(s.keyFile, 'utf8')).toBe(mine);
    expect(ids(s.db)).toEqual(['k2', 'k3']);
  });

  it('kept apart: eraseKeyFile (relative to the config file) is where the key is made and read; the state db\'s folder holds none', () => {
    const s = setup('eraseKeyFile: secrets/erase.key\n');
    const key = join(tmp.dir, 'secrets', 'erase.key');
    expect(s.run('config').json()).toMatchObject({ stateDb: s.stateDb, eraseKeyFile: key });
    expect(s.run('erase', '--store', 'agent', '--user', 'zara').code).toBe(0);
    expect(statSync(key).mode & 0o777).toBe(0o600);
    expect(existsSync(s.keyFile)).toBe(false);
    expect(s.run('erase', 'key', '--json').json()).toMatchObject({ path: key });
    expect(s.run('erase', 'receipts', '--json', '--user', 'zara').json<unknown[]>()).toHaveLength(1);
    // The state db moved to another folder (restored from its backup) still finds the key where the config says.
    mkdirSync(join(tmp.dir, 'moved'));
    renameSync(s.stateDb, join(tmp.dir, 'moved', 'state.db'));
    rmSync(s.stateDir, { recursive: true });
    const moved = join(tmp.dir, 'moved.yaml');
    writeFileSync(moved, readFileSync(s.config, 'utf8').replace(s.stateDb, join(tmp.dir, 'moved', 'state.db')));
    const found = cli(['erase', 'receipts', '--json', '--user', 'zara', '--config', moved]);
    expect(found.code, found.stderr).toBe(0);
    expect(found.json<unknown[]>()).toHaveLength(1);
  });

  it.each([
    ['the state db itself', (s: ReturnType<typeof setup>) => s.stateDb, /eraseKeyFile \S+ is the state db/],
    ['a store\'s file', (s: ReturnType<typeof setup>) => s.db, /eraseKeyFile \S+ is a file of store agent/],
    ['a folder', () => tmp.dir, /eraseKeyFile \S+ is a directory/],
    ['empty text', () => '""', /eraseKeyFile: a path, not empty text/],
  ])('eraseKeyFile naming %s is refused at load, one line, exit 2', (_, path, message) => {
    const s = setup();
    openStateDb(s.stateDb).close();
    writeFileSync(s.config, `${readFileSync(s.config, 'utf8')}eraseKeyFile: ${path(s)}\n`);
    const r = s.run('erase', '--store', 'agent', '--subject', 'night train');
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(message);
    expect(ids(s.db)).toEqual(['k1', 'k2', 'k3']);
  });

  it('a state db from before keys were recorded: its key is adopted; without it, one holding keyed hashes is refused', () => {
    const legacy = (name: string) => {
      const stateDb = join(tmp.dir, name, 'state.db');
      openStateDb(stateDb).close();
      const db = new Database(stateDb);
      db.prepare(`INSERT INTO erase_needles (store, selector_mac, kind, mac) VALUES ('agent', ?, 'id', ?)`).run('ab'.repeat(32), 'cd'.repeat(8));
      db.close();
      return stateDb;
    };
    const kept = legacy('kept');
    writeFileSync(join(tmp.dir, 'kept', 'erase.key'), otherKey(), { mode: 0o600 });
    expect(eraseKey({ stateDb: kept }).toString('hex')).toBe('ab'.repeat(32));
    const recorded = new Database(kept);
    expect(recorded.prepare('SELECT key_id FROM erase_key').pluck().get()).toBe(eraseKeyId(Buffer.from('ab'.repeat(32), 'hex')));
    recorded.close();

    const lost = legacy('lost');
    expect(() => eraseKey({ stateDb: lost })).toThrow(/erase\.key is missing, and state db \S+ holds hashes made under an earlier key: restore/);
    expect(existsSync(join(tmp.dir, 'lost', 'erase.key'))).toBe(false);
  });

  it('processes making the first key together agree on one, and the state db records it', async () => {
    const key = JSON.stringify(fileURLToPath(new URL('../../dist/src/erase/key.js', import.meta.url)));
    const stateDb = join(tmp.dir, 'race', 'state.db');
    const child = `const { eraseKey } = await import(${key}); process.stdin.once('data', () => { process.stdout.write(eraseKey({ stateDb: process.argv[1] }).toString('hex')); process.exit(0); }); process.stdout.write('ready ');`;
    const procs = Array.from({ length: 4 }, () => spawn(process.execPath, ['--input-type=module', '-e', child, stateDb], { stdio: ['pipe', 'pipe', 'pipe'] }));
    const outs = procs.map((p) => {
      let out = '';
      let err = '';
      p.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
      p.stderr.setEncoding('utf8').on('data', (c: string) => (err += c));
      const ready = new Promise<void>((r) => p.stdout.on('data', () => out.startsWith('ready') && r()));
      const done = new Promise<{ code: number | null; out: string; err: string }>((r) => p.once('close', (code) => r({ code, out: out.slice(6), err })));
      return { ready, done };
    });
    await Promise.all(outs.map((o) => o.ready));
    for (const p of procs) p.stdin.end('go\n');
    const results = await Promise.all(outs.map((o) => o.done));
    for (const r of results) expect(r, r.err).toMatchObject({ code: 0, err: '' });
    expect(new Set(results.map((r) => r.out)).size).toBe(1);
    expect(results[0]!.out).toBe(readFileSync(join(tmp.dir, 'race', 'erase.key'), 'utf8'));
    const db = new Database(stateDb);
    expect(db.prepare('SELECT key_id FROM erase_key').pluck().all()).toEqual([eraseKeyId(Buffer.from(results[0]!.out, 'hex'))]);
    db.close();
  });
});
