import { describe, expect, it } from 'vitest';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Command } from 'commander';
import { buildProgram } from '../src/program.js';
import { CITATION, commandsReferenceText, headingAnchor } from '../src/commands/reference.js';
import { COMMAND_DETAILS, commandWords, everyCommand } from '../src/commands/details.js';
import { cli } from './helpers/cli.js';

const file = (rel: string) => fileURLToPath(new URL(`../${rel}`, import.meta.url));

/** The anchors of a Markdown page: one per heading outside code fences, as GitHub makes them. */
function anchorsOf(path: string): Set<string> {
  const anchors = new Set<string>();
  let fenced = false;
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    else if (!fenced && /^#{1,6}\s/.test(line)) anchors.add(headingAnchor(line.replace(/^#+\s*/, '')));
  }
  return anchors;
}

/** What `memory-warden <words> --help` prints, all of it (the details after the options too). */
function helpOf(cmd: Command): string {
  let text = '';
  cmd.configureOutput({ writeOut: (s) => (text += s), writeErr: (s) => (text += s) });
  cmd.outputHelp();
  return text;
}

/** Each place a help text points a reader to that does not exist: a page, a heading, or a README named loosely. */
export function badCitations(help: string): string[] {
  const bad: string[] = [];
  for (const m of help.matchAll(CITATION)) {
    const path = file(m[1]!);
    if (!existsSync(path)) bad.push(`${m[0]}: no such page`);
    else if (m[2] && !anchorsOf(path).has(m[2].slice(1))) bad.push(`${m[0]}: no such heading`);
  }
  // "README "Reviewing"", "README: Snapshots off the machine", docs/x without .md: a section only a person can look for.
  for (const m of help.matchAll(/\bREADME\b(?!\.md#[\w-])[^\n]{0,40}/g)) bad.push(`${m[0]}: cite README.md#<anchor>`);
  for (const m of help.matchAll(/\bdocs\/[\w.-]+/g)) if (!m[0].replace(/\.+$/, '').endsWith('.md')) bad.push(`${m[0]}: cite docs/<page>.md`);
  return bad;
}

describe('docs/commands.md', () => {
  const program = buildProgram();
  const commands = everyCommand(program);

  it('is what the command tree of this build generates (npm run build writes it)', () => {
    expect(readFileSync(file('docs/commands.md'), 'utf8')).toBe(commandsReferenceText(buildProgram()));
  });

  it('has a section for every command and every option, those the issue found missing too', () => {
    const page = readFileSync(file('docs/commands.md'), 'utf8');
    for (const cmd of commands.slice(1)) {
      expect(page).toContain(`## memory-warden ${commandWords(cmd)}\n`);
      for (const o of cmd.options) expect(page).toContain(`\`${o.flags}\``);
    }
    for (const words of ['digest', 'schedule', 'enqueue', 'erase receipts', 'run digest', 'run erase', 'run restore']) {
      expect(page).toContain(`## memory-warden ${words}\n`);
    }
    expect(page).toContain('`--vectors-lost`');
  });

  it('every argument and option says what it is (no empty cell in its table)', () => {
    const blank = commands.flatMap((cmd) => [
      ...cmd.registeredArguments.filter((a) => a.description.trim() === '').map((a) => `${commandWords(cmd)} <${a.name()}>`),
      ...cmd.options.filter((o) => o.description.trim() === '').map((o) => `${commandWords(cmd)} ${o.flags}`),
    ]);
    expect(blank).toEqual([]);
  });

  it('every command a detail is written for exists', () => {
    const names = new Set(commands.map(commandWords));
    expect(Object.keys(COMMAND_DETAILS).filter((k) => !names.has(k))).toEqual([]);
  });
});

describe('what --help cites', () => {
  it('every page and heading a help text cites exists, for every command', () => {
    const bad: string[] = [];
    for (const cmd of everyCommand(buildProgram())) for (const b of badCitations(helpOf(cmd))) bad.push(`${commandWords(cmd) || '(root)'}: ${b}`);
    expect(bad).toEqual([]);
  });

  it('a citation of a page or a heading that is not there, or of the README by a section name, is found', () => {
    expect(badCitations('see docs/erase.md#the-erase-key')).toEqual([]);
    expect(badCitations('see docs/erase.md#no-such-heading')).toEqual(['docs/erase.md#no-such-heading: no such heading']);
    expect(badCitations('see docs/nowhere.md')).toEqual(['docs/nowhere.md: no such page']);
    expect(badCitations('loopback by default; README "Reviewing")')).toHaveLength(1);
    expect(badCitations('instead (README: Snapshots off the machine)')).toHaveLength(1);
    expect(badCitations('see README.md#the-store-it-expects')).toEqual([]);
    expect(badCitations('see README.md#reviewing')).toEqual(['README.md#reviewing: no such heading']);
  });

  it('a command\'s --help, as a person runs it, ends with its details and their citations', () => {
    const r = cli(['erase', 'key', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('docs/erase.md#the-erase-key');
    expect(r.stdout).toMatch(/JSON keys:\s+`path`,\s+`keyId`,\s+`replaced`/);
    const serve = cli(['serve', '--help']);
    expect(serve.stdout).not.toContain('README');
    expect(badCitations(serve.stdout)).toEqual([]);
  });
});

describe('enqueue JOB', () => {
  it('an unknown job is refused naming only the jobs enqueue takes (erase and restore have their own commands)', () => {
    const r = cli(['enqueue', 'teleport']);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe('memory-warden: unknown job "teleport" (enqueue takes: digest, drift, integrity, prune, snapshot; erase and restore: their own commands, with --store)\n');
  });
});
