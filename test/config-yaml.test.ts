import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseYaml } from '../src/config/read.js';
import { parseContent } from '../src/verifiers/formats.js';
import { cli } from './helpers/cli.js';
import { tempDir } from './helpers/store.js';

/**
 * Every config error is one line naming the file. The YAML library printed its own warnings as Node warnings with
 * a code frame: a `!!js/function` tag gave 7 lines of stderr after the error, a `? [a]` key 3, and an unknown
 * directive 6 lines under a command that went on and succeeded.
 */
const REFUSED: [string, string, RegExp][] = [
  ['a JavaScript function tag', 'prune:\n  batchSize: !!js/function "function(){return 1}"\n', /Unresolved tag: tag:yaml\.org,2002:js\/function at line 2, column 14/],
  ['a local tag', 'prune:\n  batchSize: !custom 5\n', /Unresolved tag: !custom at line 2, column 14/],
  ['!!binary', 'prune:\n  batchSize: !!binary aGVsbG8=\n', /Unresolved tag: tag:yaml\.org,2002:binary/],
  ['!!set, read as an empty section', 'prune: !!set {a, b}\n', /Unresolved tag: tag:yaml\.org,2002:set/],
  ['!!omap, read as an empty section', 'prune: !!omap [a: 1]\n', /Unresolved tag: tag:yaml\.org,2002:omap/],
  ['!!timestamp', 'prune: !!timestamp 2001-12-14\n', /Unresolved tag: tag:yaml\.org,2002:timestamp/],
  ['a list as a key', '? [a]\n: 1\n', /a key that is a list at line 1, column 3; config keys are names/],
  ['a mapping as a key', 'prune:\n  ? {a: 1}\n  : 2\n', /a key that is a mapping at line 2, column 5; config keys are names/],
  ['an alias of a list as a key', 'k: &k [a]\n? *k\n: 1\n', /a key that is a list at line 2, column 3/],
  ['an unknown directive', '%FOO bar\n---\nprune: {}\n', /Unknown directive %FOO at line 1, column 1/],
  ['two documents', 'prune: {batchSize: 1}\n---\nprune: {batchSize: 2}\n', /Source contains multiple documents/],
];

describe('YAML in a config file', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => {
    vi.restoreAllMocks();
    cleanup();
  });

  it.each(REFUSED)('%s: exit 2, one line naming the file, nothing else on stderr', (_, yaml, problem) => {
    const file = join(dir, 'c.yaml');
    writeFileSync(file, yaml);
    const r = cli(['config', '--config', file]);
    expect(r.code).toBe(2);
    expect(r.stderr.split('\n')).toHaveLength(2); // one line and its end
    expect(r.stderr).toMatch(new RegExp(`^memory-warden: config ${file}: not valid YAML: [^\\n]*${problem.source}[^\\n]*\\n$`));
  });

  it('the standard forms are still read: core tags, a scalar as a complex key, the YAML directive', () => {
    const warned = vi.spyOn(process, 'emitWarning');
    expect(parseYaml('prune:\n  batchSize: !!int "12"\n  !!str expired: true\n', 'c.yaml')).toEqual({ prune: { batchSize: 12, expired: true } });
    expect(parseYaml('prune: {? batchSize : 1}\n', 'c.yaml')).toEqual({ prune: { batchSize: 1 } });
    expect(parseYaml('%YAML 1.2\n---\nprune: {}\n', 'c.yaml')).toEqual({ prune: {} });
    expect(parseYaml('# nothing\n', 'c.yaml')).toEqual({});
    for (const [, yaml] of REFUSED) expect(() => parseYaml(yaml, 'c.yaml')).toThrow(/^config c\.yaml: not valid YAML: [^\n]+$/);
    expect(warned).not.toHaveBeenCalled();
  });

  it('a YAML file a verifier reads prints no warning either', () => {
    const warned = vi.spyOn(process, 'emitWarning');
    expect(parseContent('version: !custom 5\n', 'yaml')).toEqual({ version: '5' });
    expect(parseContent('? [a]\n: 1\n', 'yaml')).toEqual({ '[ a ]': 1 });
    expect(parseContent('%FOO bar\n---\nv: 1\n', 'yaml')).toEqual({ v: 1 });
    expect(warned).not.toHaveBeenCalled();
  });
});
