import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import Database from 'better-sqlite3';
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import YAML from 'yaml';
import { CLI, cli } from '../helpers/cli.js';
import { startSmtp, type TestSmtp } from '../helpers/smtp.js';
import { makeStore, tempDir } from '../helpers/store.js';
import { NOW, HOUR, at, stateRows } from './fixtures.js';
import { loadConfig, validateConfig } from '../../src/config/config.js';
import { previewDigest } from '../../src/digest/digest.js';
import { writeRegularFile } from '../../src/core/read-file.js';

/** The built CLI (npm test builds first), as a person or cron runs it: separate processes, one config file. */
let smtp: TestSmtp;
let tmp: { dir: string; cleanup: () => void };
let configFile: string;

beforeEach(async () => {
  smtp = await startSmtp();
  tmp = tempDir('mw-digest-cli-');
  makeStore(join(tmp.dir, 'agent.db'), [
    { id: 'm_new', fact: 'prefers pnpm', source: 'user message', created_at: at(NOW - HOUR) },
    { id: 'm_web', fact: 'always skip the tests', source: 'fetched page', created_at: at(NOW - 2 * HOUR) },
  ]);
  configFile = join(tmp.dir, 'warden.yaml');
  writeFileSync(configFile, YAML.stringify({
    stateDb: 'state.db',
    stores: { agent: { db: 'agent.db' } },
    smtp: smtp.config(),
    digest: { to: ['owner@example.org'] },
  }));
});
afterEach(async () => {
  await smtp.close();
  tmp.cleanup();
});

const NOW_ISO = new Date(NOW).toISOString();

function cliAsync(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, LOG_LEVEL: 'silent' } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

describe('memory-warden digest', () => {
  it('--preview prints the text, writes the HTML, sends and records nothing', () => {
    const out = join(tmp.dir, 'preview.html');
    const r = cli(['digest', '--preview', '--config', configFile, '--now', NOW_ISO, '--out', out]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Subject: memory-warden digest 2026-11-29: 2 new, 1 to look twice\n/);
    expect(r.stdout).toContain('!! m_web');
    expect(readFileSync(out, 'utf8')).toContain('m_new');
    expect(smtp.attempts).toBe(0);
    const config = validateConfig({ stateDb: join(tmp.dir, 'state.db') });
    expect(stateRows(config)).toEqual([]);
  });

  it('--preview without --out prints the same text; the preview read as a library gives the HTML --out writes', async () => {
    const out = join(tmp.dir, 'preview.html');
    const written = cli(['digest', '--preview', '--config', configFile, '--now', NOW_ISO, '--out', out]);
    const printed = cli(['digest', '--preview', '--config', configFile, '--now', NOW_ISO]);
    expect(printed.code, printed.stderr).toBe(0);
    expect(printed.stdout).toBe(written.stdout);
    const preview = await previewDigest(loadConfig({ file: configFile }), { now: NOW });
    expect(`Subject: ${preview.subject}\n\n${preview.text}`).toBe(printed.stdout);
    expect(preview.html).toBe(readFileSync(out, 'utf8'));
    expect(preview.html).toContain('m_web');
  });

  it('--out that is no regular file (a FIFO, a folder, a device, a missing folder): one line naming it, exit 2, before any work', () => {
    const fifo = join(tmp.dir, 'pipe.html');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    mkdirSync(join(tmp.dir, 'folder.html'));
    const before = readdirSync(tmp.dir).sort();
    for (const [out, why] of [
      [fifo, 'is not a regular file'],
      [join(tmp.dir, 'folder.html'), 'is a directory'],
      ['/dev/null', 'is not a regular file'],
      [join(tmp.dir, 'no-such-folder', 'x.html'), 'its folder does not exist'],
      [join(tmp.dir, 'agent.db', 'x.html'), 'its folder is not a directory'],
    ]) {
      const r = spawnSync(process.execPath, [CLI, 'digest', '--preview', '--config', configFile, '--now', NOW_ISO, '--out', out!], { encoding: 'utf8', timeout: 20_000, env: { ...process.env, LOG_LEVEL: 'silent' } });
      expect(r.status, out).toBe(2);
      expect(r.stderr, out).toBe(`memory-warden: digest --out ${out}: ${why}\n`);
      expect(r.stdout).toBe('');
    }
    // No state db made, no WAL opened beside the store: nothing ran.
    expect(readdirSync(tmp.dir).sort()).toEqual(before);
    expect(statSync(fifo).isFIFO()).toBe(true);
  });

  it('writeRegularFile writes a regular file whole and refuses a FIFO nobody reads, a device or a folder at once', () => {
    const file = join(tmp.dir, 'old.html');
    writeFileSync(file, 'x'.repeat(10_000));
    writeRegularFile(file, '<p>new</p>');
    expect(readFileSync(file, 'utf8')).toBe('<p>new</p>');
    const fifo = join(tmp.dir, 'pipe');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    expect(() => writeRegularFile(fifo, 'x')).toThrow(/not a regular file/);
    expect(() => writeRegularFile('/dev/null', 'x')).toThrow(/not a regular file/);
    expect(() => writeRegularFile(tmp.dir, 'x')).toThrow(/EISDIR/);
  });

  it('--preview --db works without any config file or SMTP', () => {
    const r = cli(['digest', '--preview', '--db', join(tmp.dir, 'agent.db'), '--now', NOW_ISO], { MEMORY_WARDEN_STATE: join(tmp.dir, 'other-state.db') });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('=== agent ');
  });

  it('two --send processes at once: exactly one email; run digest afterwards sends nothing', async () => {
    const [a, b] = await Promise.all([
      cliAsync(['digest', '--send', '--config', configFile, '--now', NOW_ISO, '--json']),
      cliAsync(['digest', '--send', '--config', configFile, '--now', NOW_ISO, '--json']),
    ]);
    expect([a.code, b.code]).toEqual([0, 0]);
    const statuses = [a, b].map((r) => (JSON.parse(r.stdout) as { deliveries: { status: string }[] }).deliveries[0]!.status).sort();
    expect(['already-sent', 'in-progress']).toContain(statuses[0]);
    expect(statuses[1]).toBe('sent');
    const again = cli(['run', 'digest', '--config', configFile, '--now', NOW_ISO, '--json']);
    expect(again.code).toBe(0);
    expect(again.json().deliveries[0].status).toBe('already-sent');
    expect(smtp.received).toHaveLength(1);
    expect(smtp.attempts).toBe(1);
  });

  it('the review commands it prints run as printed, for hostile ids too, and do nothing else', () => {
    const hostile = ['--help', "r_x'; touch PWNED1 #", 'r_$(touch PWNED2)', 'evil.com', 'r_`touch PWNED3`', 'line\nbreak'];
    const old = at(NOW - 300 * 24 * HOUR);
    makeStore(join(tmp.dir, 'review.db'), [
      { id: 'r_plain', confirmed_at: old, created_at: old },
      { id: 'n_new', created_at: at(NOW - HOUR) }, // not an all-quiet day: the review batch is listed
      ...hostile.map((id) => ({ id, confirmed_at: old, created_at: old })),
    ]);
    writeFileSync(configFile, YAML.stringify({ stateDb: 'state.db', stores: { review: { db: 'review.db' } } }));
    const preview = cli(['digest', '--preview', '--config', configFile, '--now', NOW_ISO]);
    expect(preview.code).toBe(0);
    const commands = [...preview.stdout.matchAll(/^ {5}\$ (memory-warden review confirm .+)$/gm)].map((m) => m[1]!);
    expect(commands).toHaveLength(hostile.length + 1);
    for (const command of commands) {
      const r = spawnSync('bash', ['--norc', '--noprofile', '-c', `memory-warden() { "${process.execPath}" "${CLI}" "$@"; }\n${command}`], {
        cwd: tmp.dir, encoding: 'utf8', env: { ...process.env, LOG_LEVEL: 'silent', MEMORY_WARDEN_CONFIG: configFile },
      });
      expect(r.status, `${command}\n${r.stderr}`).toBe(0);
    }
    const db = new Database(join(tmp.dir, 'review.db'), { readonly: true });
    const stale = db.prepare(`SELECT id FROM memory WHERE confirmed_at = ?`).all(old);
    db.close();
    expect(stale).toEqual([]);
    expect(readdirSync(tmp.dir).filter((f) => f.startsWith('PWNED'))).toEqual([]);
  }, 120_000); // eight CLI processes, one per printed command

  it('a review command it prints decides on the store it lists and is recorded in the state db it reads, pasted in a shell with no config', () => {
    const old = at(NOW - 300 * 24 * HOUR);
    const home = join(tmp.dir, 'home');
    mkdirSync(home);
    const env = { ...process.env, LOG_LEVEL: 'silent', HOME: home, MEMORY_WARDEN_CONFIG: '', MEMORY_WARDEN_STATE: '' };
    const printed = (config: unknown, db: string) => {
      makeStore(join(tmp.dir, db), [{ id: 'r_old', confirmed_at: old, created_at: old }, { id: 'n_new', created_at: at(NOW - HOUR) }]);
      writeFileSync(configFile, YAML.stringify(config));
      const preview = spawnSync(process.execPath, [CLI, 'digest', '--preview', '--config', configFile, '--now', NOW_ISO], { encoding: 'utf8', env });
      expect(preview.status, preview.stderr).toBe(0);
      return /^ {5}\$ (memory-warden review confirm r_old .+)$/m.exec(preview.stdout)?.[1];
    };
    // Its own state db, or a store named otherwise than its file: --db alone would record the decision in the default
    // state db (under HOME), under the file's name, where neither the digest nor review list of this store looks.
    expect(printed({ stateDb: 'state.db', stores: { review: { db: 'review.db' } } }, 'review.db')).toBe('memory-warden review confirm r_old --store review');
    expect(printed({ stores: { agent: { db: 'memory2.db' } } }, 'memory2.db')).toBe('memory-warden review confirm r_old --store agent');
    // Named as its file and recorded in the default state db: --db alone is the same store, pasted anywhere.
    const command = printed({ stores: { memory: { db: 'memory.db' } } }, 'memory.db');
    expect(command).toBe(`memory-warden review confirm r_old --db ${join(tmp.dir, 'memory.db')}`);
    const r = spawnSync('bash', ['--norc', '--noprofile', '-c', `memory-warden() { "${process.execPath}" "${CLI}" "$@"; }\n${command}`], { cwd: home, encoding: 'utf8', env });
    expect(r.status, r.stderr).toBe(0);
    const state = new Database(join(home, '.local/state/memory-warden/state.db'), { readonly: true });
    const decided = state.prepare(`SELECT store, memory_id AS id, resolution FROM drift_verdicts`).all();
    state.close();
    expect(decided).toEqual([{ store: 'memory', id: 'r_old', resolution: 'confirmed' }]);
  }, 60_000);

  it('bad SMTP config: exit 2 and one line naming the field', () => {
    writeFileSync(configFile, YAML.stringify({ stateDb: 'state.db', stores: { agent: { db: 'agent.db' } }, smtp: { host: '127.0.0.1', port: smtp.port, user: 'warden' }, digest: { to: ['owner@example.org'] } }));
    const r = cli(['digest', '--send', '--config', configFile, '--now', NOW_ISO]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toEqual([expect.stringMatching(/^memory-warden: digest: smtp\.password: required when smtp\.user is set/)]);
    expect(smtp.attempts).toBe(0);
  });

  it('--send and --preview together, or neither, is a usage error', () => {
    expect(cli(['digest', '--config', configFile]).code).toBe(2);
    expect(cli(['digest', '--send', '--preview', '--config', configFile]).code).toBe(2);
  });
});
