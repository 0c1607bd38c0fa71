import { describe, expect, it } from 'vitest';
import { parseToml } from '../../src/verifiers/toml.js';
import { parseContent, parseDotenv, formatOf } from '../../src/verifiers/formats.js';
import { select, parseSelector } from '../../src/verifiers/select.js';

describe('TOML', () => {
  it('reads tables, dotted keys, arrays of tables, strings, numbers, inline tables', () => {
    const doc = parseToml(`
# top comment
title = "app" # trailing
port = 8_080
ratio = 0.5
hex = 0xff
enabled = true
when = 2026-11-29T06:00:00Z
day = 2026-11-29

[database]
version = "15.4"
"quoted key" = 'C:\\path\\literal'
replica.host = "db2"
ports = [ 5432,
  5433, ]   # multi-line array
opts = { ssl = true, mode = "verify-full" }

[[servers]]
name = "a"
[[servers]]
name = "b"
[servers.meta]
zone = "eu"

[text]
multi = """
line one
line two"""
raw = '''no \\escapes'''
esc = "tab\\tand \\u00e9"
`);
    expect(doc).toMatchObject({
      title: 'app', port: 8080, ratio: 0.5, hex: 255, enabled: true, when: '2026-11-29T06:00:00.000Z', day: '2026-11-29',
      database: { version: '15.4', 'quoted key': 'C:\\path\\literal', replica: { host: 'db2' }, ports: [5432, 5433], opts: { ssl: true, mode: 'verify-full' } },
      servers: [{ name: 'a' }, { name: 'b', meta: { zone: 'eu' } }],
      text: { multi: 'line one\nline two', raw: 'no \\escapes', esc: 'tab\tand é' },
    });
  });

  it('says which line is wrong', () => {
    expect(() => parseToml('a = "unterminated\n')).toThrow(/^TOML line 1: /);
    expect(() => parseToml('a = 1\nb = what\n')).toThrow(/^TOML line 2: /);
    expect(() => parseToml('a = 1 2\n')).toThrow(/^TOML line 1: /);
  });

  it('refuses what TOML forbids: a key defined twice, a table repeated, a value redefined as a table', () => {
    for (const [doc, line] of [
      ['version = "15"\nversion = "16"\n', 2],
      ['[database]\nversion = "15"\n[database]\nhost = "db1"\n', 3],
      ['[database]\nversion = "15"\n\n[other]\nx = 1\n[database]\nversion = "16"\n', 6],
      ['a = 1\n[a]\nb = 2\n', 2],
      ['a.b = 1\na.b = 2\n', 2],
      ['[t]\nx = { y = 1 }\n[t.x]\nz = 2\n', 3],
      ['"k" = 1\nk = 2\n', 2],
    ] as const) {
      expect(() => parseToml(doc), doc).toThrow(new RegExp(`^TOML line ${line}: `));
    }
  });
});

describe('.env, formats, selectors', () => {
  it('reads .env lines', () => {
    expect(parseDotenv(`# c\nexport A=1\nB = "two words" \nC='lit $x'\nD=plain # comment\nE="a\\nb"\nnot a line\n`)).toEqual({ A: '1', B: 'two words', C: 'lit $x', D: 'plain', E: 'a\nb' });
  });
  it('reads a quoted value over several lines whole, as dotenv does', () => {
    const key = '-----BEGIN KEY-----\nline two\n# not a comment\nOTHER=not a key\n-----END KEY-----';
    expect(parseDotenv(`A=1\nPRIVATE_KEY="${key}"\nB='x\ny'\nC=3\n`)).toEqual({ A: '1', PRIVATE_KEY: key, B: 'x\ny', C: '3' });
    // and through the file verifier's reading of the format
    expect(select(parseContent(`NOTE="first\nsecond"\n`, 'env'), 'NOTE')).toBe('first\nsecond');
  });
  it('guesses the format from the name', () => {
    expect(['a.json', 'b.yml', 'c.YAML', 'd.toml', '.env', '.env.production', 'prod.env', 'x.txt'].map(formatOf)).toEqual(['json', 'yaml', 'yaml', 'toml', 'env', 'env', 'env', 'text']);
  });
  it('selects by path', () => {
    const doc = { a: { b: [{ c: 1 }, { 'd.e': 2 }] }, constructor: 'own' };
    expect(select(doc, '$.a.b[0].c')).toBe(1);
    expect(select(doc, "a.b[1]['d.e']")).toBe(2);
    expect(select(doc, '$')).toBe(doc);
    expect(select(doc, '$.a.x.y')).toBeUndefined();
    expect(select({}, '$.constructor')).toBeUndefined(); // own properties only
    expect(select({}, '$.__proto__')).toBeUndefined();
    expect(parseSelector('DATABASE_URL')).toEqual(['DATABASE_URL']);
    expect(() => parseSelector('$.a[*]')).toThrow(/cannot read/);
  });
});
