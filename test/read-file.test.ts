import { afterAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readRegularFile } from '../src/core/read-file.js';
import { loadIdentities } from '../src/snapshot/targets/age.js';
import { cli } from './helpers/cli.js';
import { makeStore, tempDir } from './helpers/store.js';

/**
 * Files a person names (config, users file, key files, a snapshot's manifest) are read only when they are regular
 * files of a sane size. A FIFO held the process until someone wrote to it (`check --config` on one never ended),
 * and /dev/zero filled its memory.
 */
const { dir, cleanup } = tempDir('mw-read-');
afterAll(cleanup);
const fifo = (name: string) => {
  const path = join(dir, name);
  expect(spawnSync('mkfifo', ['-m', '600', path]).status).toBe(0);
  return path;
};
const link = (name: string, to: string) => {
  const path = join(dir, name);
  symlinkSync(to, path);
  return path;
};

describe('readRegularFile', () => {
  it('reads a regular file, through a link too', () => {
    const file = join(dir, 'plain.yaml');
    writeFileSync(file, 'log:\n  level: warn\n');
    expect(readRegularFile(file)).toBe('log:\n  level: warn\n');
    expect(readRegularFile(link('plain-link.yaml', file))).toBe('log:\n  level: warn\n');
  });

  it('refuses, at once, what is not one: a FIFO, devices, a directory, links to them; and a file too large', () => {
    const cases: [string, string][] = [
      [fifo('pipe.yaml'), 'not a regular file'],
      ['/dev/zero', 'not a regular file'],
      ['/dev/urandom', 'not a regular file'],
      ['/dev/null', 'not a regular file'],
      [link('zero-link.yaml', '/dev/zero'), 'not a regular file'],
      [link('pipe-link.yaml', join(dir, 'pipe.yaml')), 'not a regular file'],
      [dir, 'EISDIR'],
      [join(dir, 'missing.yaml'), 'ENOENT'],
    ];
    for (const [path, code] of cases) expect(() => readRegularFile(path), path).toThrow(expect.objectContaining({ code }));
    const big = join(dir, 'big.yaml');
    writeFileSync(big, 'x'.repeat(101));
    expect(() => readRegularFile(big, 100)).toThrow(expect.objectContaining({ code: 'larger than 100 bytes' }));
    expect(readRegularFile(big, 101)).toHaveLength(101);
  }, 10_000);
});

describe('through the commands', () => {
  const db = makeStore(join(dir, 'store.db'), [{ id: 'a' }]);
  const env = { MEMORY_WARDEN_STATE: join(dir, 'state.db'), MEMORY_WARDEN_CONFIG: '' };

  it('a config file that is a FIFO or a device: one line, exit 2, no wait', () => {
    for (const [config, why] of [[fifo('config-pipe.yaml'), 'not a regular file'], ['/dev/zero', 'not a regular file'], [link('config-zero.yaml', '/dev/zero'), 'not a regular file']] as const) {
      for (const args of [['check', '--config', config, '--db', db], ['check', '--config', config], ['config', '--config', config]]) {
        const r = cli(args, env);
        expect(r.code, `${args.join(' ')}`).toBe(2);
        expect(r.stderr).toBe(`memory-warden: config ${config}: cannot read (${why})\n`);
      }
    }
    const viaEnv = cli(['check', '--db', db], { ...env, MEMORY_WARDEN_CONFIG: '/dev/zero' });
    expect(viaEnv.code).toBe(2);
    expect(viaEnv.stderr).toBe('memory-warden: config /dev/zero: cannot read (not a regular file)\n');
  }, 60_000);

  it('a snapshot whose manifest.json is a FIFO or a link to a device is not a snapshot', () => {
    for (const [name, make] of [['pipe', (p: string) => spawnSync('mkfifo', [p])], ['zero', (p: string) => symlinkSync('/dev/zero', p)]] as const) {
      const folder = join(dir, `snap-${name}`);
      mkdirSync(folder);
      make(join(folder, 'manifest.json'));
      const r = cli(['restore', folder, '--db', db, '--dry-run'], env);
      expect(r.code, name).toBe(2);
      expect(r.stderr).toBe(`memory-warden: ${folder}: no readable manifest.json (not a regular file): not a complete snapshot\n`);
    }
  }, 30_000);

  it('a snapshot whose store.db is a FIFO or a link to a device fails its verification at once', () => {
    const config = join(dir, 'snap.yaml');
    writeFileSync(config, `stateDb: ${join(dir, 'state.db')}\nsnapshot:\n  root: ${join(dir, 'snaps')}\n`);
    const taken = cli(['run', 'snapshot', '--config', config, '--db', db, '--json'], env);
    expect(taken.code, taken.stderr).toBe(0);
    const made = taken.json().dir as string;
    for (const [name, make] of [['pipe', (p: string) => spawnSync('mkfifo', [p])], ['zero', (p: string) => symlinkSync('/dev/zero', p)]] as const) {
      const folder = join(dir, `copy-${name}`);
      expect(spawnSync('cp', ['-r', made, folder]).status).toBe(0);
      rmSync(join(folder, 'store.db'));
      make(join(folder, 'store.db'));
      const before = readFileSync(db);
      const r = cli(['restore', folder, '--config', config, '--db', db, '--dry-run'], env);
      expect(r.code, name).toBe(2);
      expect(r.stderr).toBe(`memory-warden: ${join(folder, 'store.db')}: not a regular file\n`);
      expect(readFileSync(db).equals(before)).toBe(true);
    }
    const good = cli(['restore', made, '--config', config, '--db', db, '--dry-run'], env);
    expect(good.code, good.stderr).toBe(0);
  }, 60_000);

  it("an age identity file that is a FIFO is refused, not waited on", () => {
    const pipe = fifo('identity.txt');
    chmodSync(pipe, 0o600);
    expect(() => loadIdentities('offsite', pipe, {})).toThrow(`target offsite: identity file ${pipe}: not a regular file`);
  });
});
