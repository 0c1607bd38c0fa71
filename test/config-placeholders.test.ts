import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expandEnv } from '../src/config/config.js';
import { cli } from './helpers/cli.js';
import { makeStore, tempDir } from './helpers/store.js';

/**
 * `${…}` placeholders: `${NAME}`, `${NAME:-fallback}` with a fallback that may hold another, `$${` for a literal
 * `${`. A malformed one was taken as text: `stateDb: ${UNSET:-${ALSO_UNSET}}` made a file named `${ALSO_UNSET}`,
 * and `${}`, `${A B}`, `${PATH` (no closing brace) made files of those names.
 */
const MALFORMED: [string, string][] = [
  ['${}', '"${}" is not a placeholder'],
  ['${A B}', '"${A B}" is not a placeholder'],
  ['${PATH', '"${PATH" is not a placeholder: it has no closing }'],
  ['x-${HOME', '"${HOME" is not a placeholder: it has no closing }'],
  ['${1A}', '"${1A}" is not a placeholder'],
  ['${A-x}', '"${A-x}" is not a placeholder'],
  ['${A:=x}', '"${A:=x}" is not a placeholder'],
  ['${A:?unset}', '"${A:?unset}" is not a placeholder'],
  ['${A:+x}', '"${A:+x}" is not a placeholder'],
  ['${A:-x', '"${A:-x" is not a placeholder: it has no closing }'],
  ['${A:-${B}', '"${A:-${B}" is not a placeholder: it has no closing }'],
  ['${A:-${B C}}', '"${B C}" is not a placeholder'],
  ['${UNSET:-${ALSO_UNSET}}', 'environment variable ALSO_UNSET is not set'],
];

describe('expandEnv', () => {
  const env = { SET: 'v', OTHER: 'o' };
  const expand = (text: string) => (expandEnv({ stateDb: text }, env) as { stateDb: string }).stateDb;

  it('${NAME}, ${NAME:-fallback}, fallbacks within fallbacks (read only when needed), $${ for a literal ${', () => {
    expect(expand('${SET}/x')).toBe('v/x');
    expect(expand('${UNSET:-${OTHER}}')).toBe('o');
    expect(expand('${UNSET:-${ALSO:-deep}}.db')).toBe('deep.db');
    expect(expand('${SET:-${NEVER_READ}}')).toBe('v');
    expect(expand('${UNSET:-}')).toBe('');
    expect(expand('a$${SET}b')).toBe('a${SET}b');
    expect(expand('${UNSET:-$${x}}')).toBe('${x}');
    expect(expand('$SET {} } $')).toBe('$SET {} } $');
  });

  it.each(MALFORMED)('%s: one error naming the field', (text, problem) => {
    expect(() => expandEnv({ stores: { a: { db: text } } }, {})).toThrow(`config stores.a.db: ${problem}`);
    expect(() => expandEnv({ stores: { a: { db: text } } }, {})).toThrow(/^[^\n]+$/);
  });
});

describe('the CLI with a malformed placeholder', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it.each(MALFORMED)('stateDb, a store\'s db and snapshot.root %s: exit 2, one line, no file made', (text, problem) => {
    makeStore(join(dir, 'm.db'));
    const before = readdirSync(dir).sort();
    const configs: [string, string][] = [
      ['stateDb', `stateDb: "${dir}/${text}"\nstores:\n  a:\n    db: ${dir}/m.db\n`],
      ['stores.a.db', `stateDb: ${dir}/state.db\nstores:\n  a:\n    db: "${dir}/${text}"\n`],
      ['snapshot.root', `stateDb: ${dir}/state.db\nsnapshot:\n  root: "${dir}/${text}"\nstores:\n  a:\n    db: ${dir}/m.db\n`],
    ];
    for (const [field, yaml] of configs) {
      writeFileSync(join(dir, 'c.yaml'), yaml);
      for (const argv of [['config'], ['run', 'snapshot']]) {
        const r = cli([...argv, '--config', join(dir, 'c.yaml')]);
        expect(r.code, `${field}: ${argv[0]}`).toBe(2);
        expect(r.stderr, `${field}: ${argv[0]}`).toBe(`memory-warden: config ${join(dir, 'c.yaml')}: ${field}: ${problem}${problem.includes('is not set') ? '' : `; write \${NAME} or \${NAME:-fallback}, and $\${ for a literal \${`}\n`);
      }
    }
    expect(readdirSync(dir).filter((f) => f !== 'c.yaml').sort()).toEqual(before);
  });

  it('an unset variable: one line naming the file and the field, as every config error, exit 2', () => {
    const store = makeStore(join(dir, 'm.db'));
    writeFileSync(join(dir, 'c.yaml'), `stateDb: ${dir}/state.db\nstores:\n  a:\n    db: ${store}\nsmtp: { host: smtp.example.org, password: "\${MW_TEST_UNSET_SMTP}" }\n`);
    const r = cli(['check', '--config', join(dir, 'c.yaml'), '--store', 'a'], { MW_TEST_UNSET_SMTP: '' });
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`memory-warden: config ${join(dir, 'c.yaml')}: smtp.password: environment variable MW_TEST_UNSET_SMTP is not set\n`);
  });

  it('a nested default is used: the state db is made where it says', () => {
    const store = makeStore(join(dir, 'm.db'));
    writeFileSync(join(dir, 'c.yaml'), `stateDb: "${dir}/\${UNSET_A:-\${UNSET_B:-nested}}.db"\nstores:\n  a:\n    db: ${store}\n`);
    expect(cli(['run', 'integrity', '--config', join(dir, 'c.yaml')]).code).toBe(0);
    expect(readdirSync(dir)).toContain('nested.db');
  });
});
