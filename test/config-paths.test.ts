import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from '../src/config/config.js';
import { isPathField } from '../src/config/read.js';
import { configJsonSchema } from '../src/config/json-schema.js';
import { CLI, cli } from './helpers/cli.js';
import { makeStore, tempDir } from './helpers/store.js';

/**
 * Every path field is text that can name a file or folder. `stores: {a: {db: ""}}` passed validation and resolved
 * to the config file's own folder; blank text named a file of spaces; a NUL byte reached the system calls.
 */
const SFTP = { name: 'box', type: 'sftp', host: 'h', username: 'u', hostKeySha256: `SHA256:${'A'.repeat(43)}`, privateKeyFile: '/k', path: 'b' };
const FIELDS: [string, (bad: string) => unknown][] = [
  ['stateDb', (bad) => ({ stateDb: bad })],
  ['snapshot.root', (bad) => ({ snapshot: { root: bad } })],
  ['stores.a.db', (bad) => ({ stores: { a: { db: bad } } })],
  ['stores.a.postgres.caFile', (bad) => ({ stores: { a: { engine: 'postgres', postgres: { url: '${PG_URL:-}', schema: 'a', caFile: bad } } } })],
  ['stores.a.mem0.vectorDb', (bad) => ({ stores: { a: { db: '/h.db', layout: 'mem0', mem0: { vectorStore: 'sqlite', vectorDb: bad } } } })],
  ['stores.a.mem0.entityVectorDb', (bad) => ({ stores: { a: { db: '/h.db', layout: 'mem0', mem0: { entityVectorDb: bad } } } })],
  ['stores.a.mem0.vectorPaths.0', (bad) => ({ stores: { a: { db: '/h.db', layout: 'mem0', mem0: { vectorPaths: [bad] } } } })],
  ['snapshot.targets.0.path', (bad) => ({ snapshot: { targets: [{ name: 'disk', type: 'local', path: bad }] } })],
  ['snapshot.targets.0.path', (bad) => ({ snapshot: { targets: [{ ...SFTP, path: bad }] } })],
  ['snapshot.targets.0.privateKeyFile', (bad) => ({ snapshot: { targets: [{ ...SFTP, privateKeyFile: bad }] } })],
  ['snapshot.targets.0.encrypt.identityFile', (bad) => ({ snapshot: { targets: [{ name: 'disk', type: 'local', path: '/b', encrypt: { recipients: ['age1abc'], identityFile: bad } }] } })],
  ['verify.plugins.0', (bad) => ({ verify: { plugins: [bad] } })],
  ['verify.cacheDir', (bad) => ({ verify: { cacheDir: bad } })],
  ['verify.allow.fileRoots.0', (bad) => ({ verify: { allow: { fileRoots: [bad] } } })],
  ['verify.allow.gitRepos.0', (bad) => ({ verify: { allow: { gitRepos: [bad] } } })],
  ['review.auth.usersFile', (bad) => ({ review: { auth: { mode: 'users', usersFile: bad } } })],
];
const BAD: [string, string][] = [
  ['', 'a path, not empty text'],
  [' ', 'a path, not only spaces'],
  ['\t \n', 'a path, not only spaces'],
  ['store\0.db', 'a path, without a NUL character'],
];

describe('path fields', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it.each(FIELDS)('%s: empty, blank or with a NUL byte, refused naming the field', (field, make) => {
    for (const [bad, message] of BAD) {
      const file = join(dir, 'c.yaml');
      writeFileSync(file, JSON.stringify(make(bad)) + '\n'); // JSON is YAML, with every character escaped
      expect(() => loadConfig({ file, env: {} }), JSON.stringify(bad)).toThrow(`config ${file}: ${field}: ${message}`);
    }
  });

  it('the CLI: exit 2, one line naming the field, nothing opened or made', () => {
    makeStore(join(dir, 'm.db'));
    const before = readdirSync(dir).sort();
    for (const [bad, message] of BAD) {
      writeFileSync(join(dir, 'c.yaml'), JSON.stringify({ stateDb: join(dir, 'state.db'), stores: { a: { db: bad } } }) + '\n');
      for (const argv of [['config'], ['run', 'integrity'], ['check']]) {
        const r = cli([...argv, '--config', join(dir, 'c.yaml')]);
        expect(r.code, `${argv[0]} ${JSON.stringify(bad)}`).toBe(2);
        expect(r.stderr).toBe(`memory-warden: config ${join(dir, 'c.yaml')}: stores.a.db: ${message}\n`);
      }
    }
    expect(readdirSync(dir).filter((f) => f !== 'c.yaml').sort()).toEqual(before);
  });

  it('MEMORY_WARDEN_STATE of spaces is refused too, on the path that needs no config file', () => {
    const store = makeStore(join(dir, 'm.db'));
    // Run in the temp folder: a blank state db was a file of spaces in the working folder.
    const r = spawnSync(process.execPath, [CLI, 'run', 'integrity', '--db', store], { cwd: dir, encoding: 'utf8', env: { ...process.env, LOG_LEVEL: 'silent', MEMORY_WARDEN_STATE: '  ' } });
    expect(r.status).toBe(2);
    expect(r.stderr).toBe('memory-warden: config: stateDb: a path, not only spaces\n');
    expect(readdirSync(dir)).toEqual(['m.db']);
  });

  it('a relative path is still the config file\'s folder\'s', () => {
    const file = join(dir, 'c.yaml');
    writeFileSync(file, 'stores:\n  a:\n    db: ./m.db\nsnapshot:\n  root: " backups"\n');
    const config = loadConfig({ file, env: {} });
    expect(config.stores.a!.db).toBe(join(dir, 'm.db'));
    expect(config.snapshot.root).toBe(join(dir, ' backups')); // spaces in a name are the user's to choose
  });
});

describe('which fields name a file, as environment expansion tells them', () => {
  /** Every property of the config's JSON schema: its key, and whether it (or each item of it) is a pathField. */
  function properties(node: unknown, out: { key: string; names: boolean }[] = []): { key: string; names: boolean }[] {
    if (Array.isArray(node)) node.forEach((n) => properties(n, out));
    else if (node && typeof node === 'object') {
      const o = node as Record<string, unknown>;
      const marked = (s: unknown): boolean => {
        if (!s || typeof s !== 'object') return false;
        const x = s as Record<string, unknown>;
        return x['x-names-a-file'] === true || marked(x.items) || ((x.anyOf as unknown[] | undefined)?.some(marked) ?? false);
      };
      if (o.properties && typeof o.properties === 'object') {
        for (const [key, sub] of Object.entries(o.properties as Record<string, unknown>)) out.push({ key, names: marked(sub) });
      }
      for (const v of Object.values(o)) properties(v, out);
    }
    return out;
  }

  it('a path from the environment is shown in errors exactly in the fields made with pathField', () => {
    const all = properties(configJsonSchema());
    expect(all.filter((p) => p.names).length).toBeGreaterThan(10);
    // Both ways: a path field taken for another would hide its file in errors; another taken for a path field
    // would show a token shaped like a path.
    const wrong = all.filter((p) => p.names !== isPathField([p.key])).map((p) => `${p.key}: ${p.names ? 'names a file' : 'does not'}`);
    expect([...new Set(wrong)]).toEqual([]);
  });
});
