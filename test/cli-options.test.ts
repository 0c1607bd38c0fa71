import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command, Option } from 'commander';
import { buildProgram, main } from '../src/program.js';
import { cli } from './helpers/cli.js';
import { ids, makeStore, tempDir } from './helpers/store.js';

/**
 * An option given with nothing in it is refused before any command runs. Read as "not given", an empty value
 * changed what ran: `run prune --now ""` pruned as of this moment, `serve --hash-password ""` started the server.
 */

/** Every command under `cmd`, with the words that name it (`review supersede`; `erase` and `erase receipts`). */
function commands(cmd: Command, path: string[] = []): { cmd: Command; path: string[] }[] {
  return cmd.commands.flatMap((c) => [{ cmd: c, path: [...path, c.name()] }, ...commands(c, [...path, c.name()])]);
}

const takesValue = (o: Option) => o.required || o.optional;

/** The command line that gives `option` the value `value`, and whatever else the command needs to parse. */
function argvFor(leaf: { cmd: Command; path: string[] }, option: Option, value: string): string[] {
  const args = leaf.cmd.registeredArguments.filter((a) => a.required).map(() => 'x');
  const mandatory = leaf.cmd.options.filter((o) => o.mandatory && o !== option).flatMap((o) => [o.long!, 'x']);
  return [...leaf.path, ...args, ...mandatory, option.long!, value];
}

async function run(argv: string[]): Promise<{ code: number; stderr: string }> {
  let stderr = '';
  const write = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    stderr += String(chunk);
    return true;
  });
  try {
    return { code: await main(['node', 'memory-warden', ...argv]), stderr };
  } finally {
    write.mockRestore();
  }
}

describe('empty option values', () => {
  const program = buildProgram();
  const cases = commands(program).flatMap((leaf) => leaf.cmd.options.filter(takesValue).map((option) => ({ leaf, option })));
  afterEach(() => {
    process.exitCode = undefined;
  });

  it('finds the commands and their options to try', () => {
    const names = new Set(cases.map((c) => `${c.leaf.path.join(' ')} ${c.option.long}`));
    for (const expected of ['run prune --now', 'erase --now', 'erase --user', 'serve --hash-password', 'serve --link', 'digest --out', 'check --db', 'check --config', 'worker --host']) {
      expect(names).toContain(expected);
    }
    expect(cases.length).toBeGreaterThan(60);
  });

  it('every option of every command, given "" or blanks, is a usage error naming the option (memory ids aside)', async () => {
    const refusedEverywhere: string[] = [];
    for (const { leaf, option } of cases) {
      for (const value of ['', '   ', '\t']) {
        const r = await run(argvFor(leaf, option, value));
        const where = `${leaf.path.join(' ')} ${option.long} ${JSON.stringify(value)}`;
        if (option.long === '--ids') {
          expect(r.stderr, where).not.toContain('empty (give a value');
          continue;
        }
        expect({ where, code: r.code }).toEqual({ where, code: 2 });
        expect(r.stderr.trim().split('\n'), where).toEqual([`memory-warden: ${option.long}: empty (give a value, or leave the option out)`]);
        refusedEverywhere.push(where);
      }
    }
    expect(refusedEverywhere.length).toBeGreaterThan(150);
  }, 60_000);

  it('the global options too, before or after the command', async () => {
    for (const argv of [['--log-level', '', 'check', '--db', 'x.db'], ['check', '--db', 'x.db', '--log-level', ' ']]) {
      const r = await run(argv);
      expect(r.code).toBe(2);
      expect(r.stderr).toBe('memory-warden: --log-level: empty (give a value, or leave the option out)\n');
    }
  });

  it('a value with something in it is not refused by this rule', async () => {
    const r = await run(['check', '--db', '/nonexistent/dir/x.db', '--now', '2026-12-01T00:00:00Z']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('no such store');
  });
});

describe('an empty value changes nothing in the store', () => {
  const { dir, cleanup } = tempDir('mw-empty-');
  afterAll(cleanup);
  const sha = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');
  const rows = [
    { id: 'old', subject: 'bob', expires_at: '2020-01-01 00:00:00' },
    { id: 'keep', subject: 'bob' },
    { id: '', subject: 'eve', fact: 'a row an agent wrote with an empty id' },
  ];
  const env = { MEMORY_WARDEN_STATE: join(dir, 'state.db'), MEMORY_WARDEN_CONFIG: '' };

  for (const [name, args] of [
    ['prune at --now ""', ['run', 'prune', '--now', '']],
    ['prune at --now " "', ['run', 'prune', '--now', ' ']],
    ['erase at --now ""', ['erase', '--user', 'bob', '--now', '']],
    ['erase with --config ""', ['erase', '--user', 'bob', '--config', '']],
    ['prune with --store ""', ['run', 'prune', '--store', '']],
  ] as const) {
    it(name, () => {
      const db = makeStore(join(dir, `${createHash('sha256').update(name).digest('hex').slice(0, 12)}.db`), rows);
      const before = sha(db);
      const r = cli([...args, '--db', db], env);
      expect(r.code).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(/^memory-warden: --(now|config|store): empty/);
      expect(sha(db)).toBe(before);
      expect(ids(db)).toEqual(['', 'keep', 'old']);
    });
  }

  it('--ids "" still names the row whose id is empty: erase takes it, and only it', () => {
    const db = makeStore(join(dir, 'empty-id.db'), rows);
    const r = cli(['erase', '--ids', '', '--db', db, '--json'], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json().memories).toBe(1);
    expect(ids(db)).toEqual(['keep', 'old']);
  });
});

describe('log levels', () => {
  const { dir, cleanup } = tempDir('mw-level-');
  afterAll(cleanup);
  const db = makeStore(join(dir, 'store.db'), [{ id: 'a' }]);
  const env = { MEMORY_WARDEN_STATE: join(dir, 'state.db'), MEMORY_WARDEN_CONFIG: '' };
  const levels = 'trace, debug, info, warn, error, fatal, silent';

  it('an unknown level is named with where it came from, in one line', () => {
    for (const [args, extra, from, value] of [
      [['--log-level', 'verbose'], {}, '--log-level', 'verbose'],
      [['--log-level', 'INFO'], {}, '--log-level', 'INFO'],
      [[], { LOG_LEVEL: 'bogus' }, 'LOG_LEVEL', 'bogus'],
      [[], { LOG_LEVEL: ' info' }, 'LOG_LEVEL', ' info'],
    ] as const) {
      const r = cli([...args, 'check', '--db', db], { ...env, ...extra });
      expect(r.code).toBe(2);
      expect(r.stderr).toBe(`memory-warden: ${from}: "${value}" is not a log level (${levels})\n`);
    }
  });

  it('--log-level wins over LOG_LEVEL; an empty LOG_LEVEL is unset; each known level runs', () => {
    expect(cli(['--log-level', 'silent', 'check', '--db', db], { ...env, LOG_LEVEL: 'bogus' }).code).toBe(0);
    const quiet = cli(['check', '--db', db], { ...env, LOG_LEVEL: '' });
    expect(quiet.code).toBe(0);
    expect(quiet.stderr).toContain('"msg":"integrity done"'); // config's level, info
    for (const level of levels.split(', ')) expect(cli(['--log-level', level, 'check', '--db', db], env).code, level).toBe(0);
  });
});

describe('an error that quotes a value holding a newline or an escape is still one whole line', () => {
  let dir: string;
  let cleanup: () => void;
  afterEach(() => cleanup?.());

  // The printer used to cut at the first newline: `memory-warden: host "bad` and nothing of why.
  const cases: [string, (dir: string) => { argv: string[]; env?: Record<string, string> }, RegExp][] = [
    ['a store name', (d) => ({ argv: ['check', '--config', join(d, 'c.yaml'), '--store', 'x\ny\x1b[31m'] }), /no store named "x ⏎ y�\[31m" in config \(stores: a\)$/],
    ['a host name from the command line', () => ({ argv: ['worker', '--host', 'a\r\nb'] }), /--host: "a ⏎ b" is not a host name/],
    ['a host name from the environment', () => ({ argv: ['fleet'], env: { REDIS_URL: 'redis://127.0.0.1:6379', MEMORY_WARDEN_HOST: 'bad\nhost\x1b]52;c;SGVsbG8=\x07' } }), /host "bad ⏎ host�\]52;c;SGVsbG8=�": a host name is letters/],
    ['a log level', () => ({ argv: ['check', '--log-level', 'de\nbug'] }), /--log-level: "de ⏎ bug" is not a log level/],
    ['a time', (d) => ({ argv: ['check', '--db', join(d, 'm.db'), '--now', '2026-13-01\n\x1b[2J'] }), /--now: "2026-13-01 ⏎ �\[2J" is not an ISO-8601 time$/],
    ['a duration', (d) => ({ argv: ['review', 'expire', 'm1', '--db', join(d, 'm.db'), '--in', 'soon\n\x9b31m'] }), /--in "soon ⏎ �31m" is not a duration like 7d, 12h, 30m$/],
    ['a config file name', (d) => ({ argv: ['check', '--config', join(d, 'no\nsuch.yaml')] }), /no ⏎ such\.yaml/],
  ];

  it.each(cases)('%s', (_, make, message) => {
    ({ dir, cleanup } = tempDir());
    makeStore(join(dir, 'm.db'), [{ id: 'm1' }]);
    writeFileSync(join(dir, 'c.yaml'), `stores:\n  a:\n    db: ${join(dir, 'm.db')}\n`);
    const { argv, env } = make(dir);
    const r = cli(argv, { REDIS_URL: 'redis://127.0.0.1:1', ...env });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^memory-warden: [^\n]*\n$/);
    expect(r.stderr).not.toMatch(/[\x00-\x09\x0b-\x1f\x7f]/);
    expect(r.stderr.trimEnd()).toMatch(message);
  });
});

describe('--store with no config file', () => {
  it('says the config file is missing, in one line, exit 2, for a command of one store (as a restore undo pasted in a new shell is)', () => {
    const env = { MEMORY_WARDEN_CONFIG: '' };
    for (const argv of [['check', '--store', 'agent'], ['restore', 'latest', '--store', 'agent', '--dry-run'], ['review', 'list', '--store', 'agent']]) {
      const r = cli(argv, env);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.stderr.trim().split('\n'), argv.join(' ')).toEqual(['memory-warden: --store agent: no config file to find it in (give --config FILE, or set MEMORY_WARDEN_CONFIG)']);
    }
  });
});
