/** Every config path field is the config file's folder's, run from any folder; the mem0 vectorDb case of the issue. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { configJsonSchema } from '../src/config/json-schema.js';
import { CLI } from './helpers/cli.js';
import { tempDir } from './helpers/store.js';
import { sdkStore } from './layouts/mem0-sdk.js';

/**
 * A relative path in a config file is the config file's folder's, whichever folder the command runs from: every
 * field that names a file (the schema marks them, x-names-a-file), run from another folder. A relative mem0
 * `vectorDb` was the working folder's: a prune run there deleted another file's points.
 */

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = tempDir('mw-relative-')));
afterEach(() => cleanup());

const SFTP = { name: 'box', type: 'sftp', host: 'h', username: 'u', hostKeySha256: `SHA256:${'A'.repeat(43)}`, path: 'remote/b' };
const MEM0 = { layout: 'mem0', db: '/abs/h.db' };
/** Each field that names a file: a config giving it a relative value, and where `config` prints it. */
const FIELDS: { key: string; config: (rel: string) => Record<string, unknown>; at: (c: any) => unknown }[] = [
  { key: 'stateDb', config: (rel) => ({ stateDb: rel }), at: (c) => c.stateDb },
  { key: 'eraseKeyFile', config: (rel) => ({ eraseKeyFile: rel }), at: (c) => c.eraseKeyFile },
  { key: 'root', config: (rel) => ({ snapshot: { root: rel } }), at: (c) => c.snapshot.root },
  { key: 'db', config: (rel) => ({ stores: { a: { db: rel } } }), at: (c) => c.stores.a.db },
  { key: 'vectorDb', config: (rel) => ({ stores: { a: { ...MEM0, mem0: { vectorStore: 'sqlite', vectorDb: rel } } } }), at: (c) => c.stores.a.mem0.vectorDb },
  { key: 'vectorDb', config: (rel) => ({ stores: { a: { layout: 'mastra', db: '/abs/m.db', mastra: { vectorDb: rel } } } }), at: (c) => c.stores.a.mastra.vectorDb },
  { key: 'entityVectorDb', config: (rel) => ({ stores: { a: { ...MEM0, mem0: { vectorStore: 'sqlite', vectorDb: '/abs/v.db', entityVectorDb: rel } } } }), at: (c) => c.stores.a.mem0.entityVectorDb },
  { key: 'vectorPaths', config: (rel) => ({ stores: { a: { ...MEM0, mem0: { vectorPaths: [rel] } } } }), at: (c) => c.stores.a.mem0.vectorPaths[0] },
  { key: 'path', config: (rel) => ({ snapshot: { targets: [{ name: 'disk', type: 'local', path: rel }] } }), at: (c) => c.snapshot.targets[0].path },
  { key: 'privateKeyFile', config: (rel) => ({ snapshot: { targets: [{ ...SFTP, privateKeyFile: rel }] } }), at: (c) => c.snapshot.targets[0].privateKeyFile },
  { key: 'identityFile', config: (rel) => ({ snapshot: { targets: [{ name: 'disk', type: 'local', path: '/abs/b', encrypt: { recipients: ['age1abc'], identityFile: rel } }] } }), at: (c) => c.snapshot.targets[0].encrypt.identityFile },
  { key: 'authKeyFile', config: (rel) => ({ snapshot: { targets: [{ name: 'disk', type: 'local', path: '/abs/b', authKeyFile: rel }] } }), at: (c) => c.snapshot.targets[0].authKeyFile },
  { key: 'uploadJournalDir', config: (rel) => ({ snapshot: { targets: [{ name: 's3', type: 's3', bucket: 'b', uploadJournalDir: rel }] } }), at: (c) => c.snapshot.targets[0].uploadJournalDir },
  { key: 'plugins', config: (rel) => ({ verify: { plugins: [rel] } }), at: (c) => c.verify.plugins[0] },
  { key: 'cacheDir', config: (rel) => ({ verify: { cacheDir: rel } }), at: (c) => c.verify.cacheDir },
  { key: 'fileRoots', config: (rel) => ({ verify: { allow: { fileRoots: [rel] } } }), at: (c) => c.verify.allow.fileRoots[0] },
  { key: 'gitRepos', config: (rel) => ({ verify: { allow: { gitRepos: [rel] } } }), at: (c) => c.verify.allow.gitRepos[0] },
  { key: 'caFile', config: (rel) => ({ redis: { url: 'rediss://127.0.0.1:6380', tls: { caFile: rel } } }), at: (c) => c.redis.tls.caFile },
  { key: 'caFile', config: (rel) => ({ stores: { a: { engine: 'postgres', postgres: { url: '${PG_URL:-}', schema: 'a', caFile: rel } } } }), at: (c) => c.stores.a.postgres.caFile },
  { key: 'usersFile', config: (rel) => ({ review: { auth: { mode: 'users', usersFile: rel } } }), at: (c) => c.review.auth.usersFile },
];

/** The CLI in a child process, run from `cwd`. */
function cliIn(cwd: string, args: string[]) {
  const r = spawnSync(process.execPath, [CLI, ...args], { cwd, encoding: 'utf8', env: { ...process.env, LOG_LEVEL: 'silent', MEMORY_WARDEN_STATE: join(dir, 'state.db') } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Property names the config's JSON schema marks as naming a file. */
function markedKeys(node: unknown, out = new Set<string>()): Set<string> {
  if (Array.isArray(node)) node.forEach((n) => markedKeys(n, out));
  else if (node && typeof node === 'object') {
    const o = node as Record<string, unknown>;
    const marked = (s: unknown): boolean => {
      const x = s as Record<string, unknown> | undefined;
      return !!x && typeof x === 'object' && (x['x-names-a-file'] === true || marked(x.items) || ((x.anyOf as unknown[] | undefined)?.some(marked) ?? false));
    };
    if (o.properties && typeof o.properties === 'object') for (const [k, v] of Object.entries(o.properties as object)) if (marked(v)) out.add(k);
    for (const v of Object.values(o)) markedKeys(v, out);
  }
  return out;
}

describe('every path field is the config file\'s folder\'s, run from another folder', () => {
  it('the table covers every field the schema marks', () => {
    expect([...markedKeys(configJsonSchema())].sort()).toEqual([...new Set(FIELDS.map((f) => f.key))].sort());
  });

  it.each(FIELDS.map((f) => [f.key, f] as const))('%s', (_, f) => {
    const home = join(dir, 'home');
    const elsewhere = join(dir, 'elsewhere');
    mkdirSync(home);
    mkdirSync(elsewhere);
    const file = join(home, 'c.yaml');
    writeFileSync(file, JSON.stringify(f.config('sub/thing')) + '\n');
    for (const cwd of [elsewhere, home, '/']) {
      const r = cliIn(cwd, ['config', '--config', file]);
      expect(r.code, r.stderr).toBe(0);
      expect(f.at(JSON.parse(r.stdout)), `run from ${cwd}`).toBe(join(home, 'sub', 'thing'));
    }
  });

  it('snapshot.root left to its default is the config file\'s ./backups too; a remote (sftp) path is the remote\'s, as written', () => {
    const file = join(dir, 'c.yaml');
    writeFileSync(file, JSON.stringify({ snapshot: { targets: [{ ...SFTP, privateKeyFile: '/k' }] } }) + '\n');
    const c = JSON.parse(cliIn('/', ['config', '--config', file]).stdout);
    expect(c.snapshot.root).toBe(join(dir, 'backups'));
    expect(c.snapshot.targets[0].path).toBe('remote/b');
  });
});

describe('the issue\'s case: mem0 vectorDb relative, prune run from a folder holding another vector_store.db', () => {
  it('prunes the config file\'s vector file; the other file and its history are untouched', async () => {
    const home = join(dir, 'agent');
    mkdirSync(home);
    const s = await sdkStore('sqlite', home);
    const m = await s.open();
    for (let i = 0; i < 3; i++) await m.add(`Temporary fact ${i}`, { userId: 'u', infer: false, expirationDate: '2026-12-20' });
    await m.add('Lasting fact', { userId: 'u', infer: false });
    s.close(m);
    // Another folder with mem0's older default file name, holding the same (expired) memories.
    const elsewhere = join(dir, 'elsewhere');
    mkdirSync(elsewhere);
    copyFileSync(s.vectorDb, join(elsewhere, 'vector_store.db'));
    const other = sha(join(elsewhere, 'vector_store.db'));
    const file = join(home, 'warden.yaml');
    writeFileSync(file, JSON.stringify({ stores: { m: { layout: 'mem0', db: './memory.db', mem0: { vectorStore: 'sqlite', vectorDb: 'vector_store.db' } } } }) + '\n');

    const r = cliIn(elsewhere, ['run', 'prune', '--config', file, '--now', '2027-09-01T00:00:00Z', '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).deleted).toBe(3);
    expect(sha(join(elsewhere, 'vector_store.db'))).toBe(other);
    const points = new Database(s.vectorDb, { readonly: true });
    expect((points.prepare('SELECT count(*) AS n FROM vectors').get() as { n: number }).n).toBe(1);
    points.close();
    const h = new Database(s.historyPath, { readonly: true });
    expect((h.prepare("SELECT count(*) AS n FROM memory_history WHERE action = 'DELETE'").get() as { n: number }).n).toBe(3);
    h.close();
  }, 60_000);
});

const sha = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');
