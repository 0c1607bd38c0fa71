import { describe, expect, it, vi } from 'vitest';
import type { Command } from 'commander';
import { buildProgram } from '../src/program.js';
import { cli } from './helpers/cli.js';
import { runMain } from './helpers/main.js';
import { FORGED, RAW, TERMINAL_PAYLOADS } from './helpers/terminal-payloads.js';

/**
 * Commander's own output (its usage errors, which quote argv, and help) goes through the one sanitiser: an argv
 * word with an escape sequence, a bidi control or a newline cannot drive the terminal or forge a line of stderr.
 */

const payloads = Object.entries(TERMINAL_PAYLOADS);

/** Commander's help of the command at `path`, as `--help` prints it on stdout. */
async function helpOf(path: string[]): Promise<string> {
  return (await runMain([...path, '--help'])).stdout;
}

/**
 * An error is one line, as main() writes its own, naming where the usage is (`memory-warden review confirm
 * --help`): nothing after it, the help not printed (a script reading stderr gets the error alone).
 */
async function expectOneLineError(argv: string[], helpPath: string[], message: RegExp): Promise<void> {
  const r = await runMain(argv);
  expect(r.code, argv.join(' ')).toBe(2);
  expect(r.stderr, argv.join(' ')).not.toMatch(RAW);
  expect(r.stderr).not.toMatch(FORGED);
  const [line, ...rest] = r.stderr.split('\n');
  expect(rest).toEqual(['']);
  const where = ` (${['memory-warden', ...helpPath].join(' ')} --help shows the usage)`;
  expect(line!.endsWith(where), line).toBe(true);
  expect(line!.slice(0, -where.length)).toMatch(message);
  expect(await helpOf(helpPath)).toMatch(/^Usage: memory-warden/);
}

describe("commander's errors are one inert line", () => {
  it.each(payloads)('an unknown option holding %s', async (_, payload) => {
    await expectOneLineError(['review', 'confirm', `-x${payload}`, 'm1'], ['review', 'confirm'], /^memory-warden: unknown option '-x[^']*'$/);
    await expectOneLineError([`--x${payload}`, 'check'], [], /^memory-warden: unknown option '--x[^']*'$/);
  });

  it.each(payloads)('an unknown command holding %s', async (_, payload) => {
    await expectOneLineError([`x${payload}`], [], /^memory-warden: unknown command 'x[^']*'$/);
    await expectOneLineError(['review', `x${payload}`], ['review'], /^memory-warden: unknown command 'x[^']*'$/);
    await expectOneLineError(['snapshots', `x${payload}`], ['snapshots'], /^memory-warden: unknown command 'x[^']*'$/);
  });

  it.each(payloads)('too many arguments, one holding %s', async (_, payload) => {
    await expectOneLineError(['review', 'confirm', 'm1', `x${payload}`], ['review', 'confirm'], /^memory-warden: too many arguments for 'confirm'\. Expected 1 argument but got 2\.$/);
  });

  it('a missing argument, a missing option value, a missing required option', async () => {
    await expectOneLineError(['review', 'confirm'], ['review', 'confirm'], /^memory-warden: missing required argument 'id'$/);
    await expectOneLineError(['review', 'confirm', 'm1', '--now'], ['review', 'confirm'], /^memory-warden: option '--now <time>' argument missing$/);
    await expectOneLineError(['review', 'expire', 'm1'], ['review', 'expire'], /^memory-warden: required option '--in <duration>' not specified$/);
  });

  it("commander's suggestion stays on the error's line", async () => {
    await expectOneLineError(['checkk'], [], /^memory-warden: unknown command 'checkk' \(Did you mean check\?\)$/);
    await expectOneLineError(['run', `prunex${TERMINAL_PAYLOADS['a newline and a forged line']}`], ['run'], /^memory-warden: unknown command 'prunexx ⏎ FORGED line'$/);
  });

  it.each(payloads)('an invalid choice holding %s (any command made with .command() gets the same output)', async (_, payload) => {
    const program = buildProgram();
    program.command('pick').option('--colour <c>').action(() => {});
    program.commands.at(-1)!.options[0]!.choices(['red', 'blue']);
    let stderr = '';
    const err = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => ((stderr += String(chunk)), true));
    try {
      await expect(program.parseAsync(['node', 'memory-warden', 'pick', '--colour', `x${payload}`])).rejects.toThrow();
    } finally {
      err.mockRestore();
    }
    expect(stderr).not.toMatch(RAW);
    expect(stderr).not.toMatch(FORGED);
    expect(stderr.split('\n')[0]).toMatch(/^memory-warden: option '--colour <c>' argument 'x.*' is invalid\. Allowed choices are red, blue\. \(memory-warden pick --help shows the usage\)$/);
  });
});

describe('every command writes through the sanitiser', () => {
  /** Every command of the tree, with commander's implicit `help` commands (made by a private method, on demand). */
  function commands(cmd: Command): Command[] {
    const help = (cmd as unknown as { _getHelpCommand(): Command | null })._getHelpCommand();
    return [cmd, ...(help ? [help] : []), ...cmd.commands.flatMap(commands)];
  }

  it("has the root's output configuration, whenever and however it was made", () => {
    const program = buildProgram();
    const all = commands(program);
    expect(all.filter((c) => c.name() === 'help').length).toBeGreaterThan(3);
    const root = program.configureOutput();
    for (const cmd of all) {
      const own = cmd.configureOutput();
      for (const key of ['writeOut', 'writeErr'] as const) expect(own[key], `${cmd.name()} ${key}`).toBe(root[key]);
      // Its errors are its own: one inert line naming it.
      let written = '';
      own.outputError!(`error: unknown option '-x${TERMINAL_PAYLOADS['a newline and a forged line']}'\n`, (t) => (written += t));
      const path: string[] = [];
      for (let c: Command | null = cmd; c; c = c.parent) path.unshift(c.name());
      expect(written).not.toMatch(RAW);
      expect(written.split('\n')).toEqual([expect.stringMatching(new RegExp(`^memory-warden: unknown option '-x.*' \\(${path.join(' ')} --help shows the usage\\)$`)), '']);
    }
  });

  it('help is unchanged for ordinary text', async () => {
    const r = await runMain(['repair', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(buildProgram().commands.find((c) => c.name() === 'repair')!.helpInformation());
  });
});

describe('the built command line', () => {
  it.each([
    ['an unknown option', (p: string) => ['review', 'confirm', `-x${p}`, 'm1']],
    ['an unknown command', (p: string) => [`x${p}`]],
    ['an unknown subcommand', (p: string) => ['review', `x${p}`]],
  ])('%s: one inert error line, exit 2', (_, argv) => {
    for (const payload of [TERMINAL_PAYLOADS['OSC 52 clipboard write']!, TERMINAL_PAYLOADS['a newline and a forged line']!, TERMINAL_PAYLOADS['RLO (U+202E)']!, TERMINAL_PAYLOADS['C1 CSI (U+009B)']!]) {
      const r = cli(argv(payload));
      expect(r.code).toBe(2);
      expect(r.stderr).not.toMatch(RAW);
      expect(r.stderr).not.toMatch(FORGED);
      expect(r.stderr.split('\n')).toHaveLength(2);
      expect(r.stderr.split('\n')[0]).toMatch(/^memory-warden: unknown (option|command) '[^']*' \(memory-warden( review( confirm)?)? --help shows the usage\)$/);
    }
  });
});
