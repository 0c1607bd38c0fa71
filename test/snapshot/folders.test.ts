/** Erase deletes only proven snapshots of its store; store names and snapshot roots that reach a live store are refused. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, resolve, sep } from 'node:path';
import { CLI, cli } from '../helpers/cli.js';
import { ids, makeStore, tempDir } from '../helpers/store.js';
import { writeSnapshotFolder } from '../helpers/snapshot-folder.js';

/**
 * Erase --snapshots deletes only folders proven to be snapshots of the store (src/snapshot/folders.ts), and a config
 * that would let `<snapshot.root>/<store>/` reach a live store is refused before anything runs. The CLI as a real
 * process, real folders and stores.
 */

const EVE = { id: 'e1', subject: 'eve', fact: 'Eve Park lives at 9 Birch Lane' };
const OTHER = { id: 'o1', subject: 'bob', fact: 'Bob plays chess' };

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = tempDir('mw-folders-')));
afterEach(() => cleanup());

const yaml = (o: unknown) => JSON.stringify(o) + '\n'; // JSON is YAML, every character escaped
const env = () => ({ MEMORY_WARDEN_STATE: join(dir, 'state.db') });

/** Every file under `root`, with its bytes: what must be exactly as it was after a refused command. */
function tree(root: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) out[p] = readFileSync(p).toString('hex');
    }
  };
  walk(root);
  return out;
}

describe('a snapshot root that is or contains a store\'s folder is refused at config load', () => {
  it('the issue\'s layout: root /srv, stores at /srv/agents/crm.db and /srv/agents/notes/notes.db: exit 2, nothing deleted', () => {
    const srv = join(dir, 'srv');
    mkdirSync(join(srv, 'agents', 'notes'), { recursive: true });
    const crm = makeStore(join(srv, 'agents', 'crm.db'), [EVE, OTHER]);
    const notes = makeStore(join(srv, 'agents', 'notes', 'notes.db'), [{ ...EVE, id: 'n1' }]);
    const config = join(dir, 'c.yaml');
    writeFileSync(config, yaml({ snapshot: { root: srv }, stores: { agents: { db: crm }, notes: { db: notes } } }));
    const before = tree(dir);
    for (const argv of [['erase', '--store', 'agents', '--subject', 'Eve Park', '--snapshots'], ['run', 'snapshot', '--store', 'agents'], ['snapshots', 'list', '--store', 'notes']]) {
      const r = cli([...argv, '--config', config], env());
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.stderr).toMatch(new RegExp(`^memory-warden: config ${config}: snapshot\\.root ${srv} contains the folder of store agents's file ${join(srv, 'agents', 'crm.db')}: [^\\n]*\\n$`));
    }
    expect(tree(dir)).toEqual(before);
    expect(ids(notes)).toEqual(['n1']);
  });

  it.each([
    ['equal to the store\'s folder', (live: string) => live],
    ['two folders above it', (live: string) => join(live, '..', '..')],
    ['the same folder written with ./ and ..', (live: string) => join(live, 'x', '..', '.')],
    ['a link to the store\'s folder', (live: string) => {
      symlinkSync(live, join(dir, 'link'));
      return join(dir, 'link');
    }],
    ['a link to a folder above it', (live: string) => {
      symlinkSync(join(live, '..'), join(dir, 'up'));
      return join(dir, 'up');
    }],
  ])('root %s: exit 2, naming snapshot.root and the store', (_, rootOf) => {
    const live = join(dir, 'a', 'live');
    mkdirSync(live, { recursive: true });
    const db = makeStore(join(live, 'm.db'), [EVE]);
    const config = join(dir, 'c.yaml');
    writeFileSync(config, yaml({ snapshot: { root: rootOf(live) }, stores: { m: { db } } }));
    const r = cli(['run', 'snapshot', '--config', config], env());
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^memory-warden: config .*: snapshot\.root .* (is|contains) the folder of store m's file .*\n$/);
    expect(readdirSync(live)).toEqual(['m.db']);
  });

  it('a relative root next to the store (the config file\'s folder, ".") is refused; "./backups" there is fine', () => {
    const db = makeStore(join(dir, 'm.db'), [EVE]);
    const config = join(dir, 'c.yaml');
    writeFileSync(config, yaml({ snapshot: { root: '.' }, stores: { m: { db: './m.db' } } }));
    expect(cli(['config', '--config', config], env()).code).toBe(2);
    writeFileSync(config, yaml({ snapshot: { root: './backups' }, stores: { m: { db: './m.db' } } }));
    const ok = cli(['run', 'snapshot', '--config', config, '--json'], env());
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.json().dir.startsWith(join(dir, 'backups', 'm') + sep)).toBe(true);
    expect(ids(db)).toEqual(['e1']);
  });

  it('a mem0 store\'s vector files count as its files: a root holding their folder is refused', () => {
    mkdirSync(join(dir, 'h'));
    mkdirSync(join(dir, 'vec'));
    const history = makeStore(join(dir, 'h', 'history.db'));
    const config = join(dir, 'c.yaml');
    writeFileSync(config, yaml({ snapshot: { root: dir }, stores: { m: { layout: 'mem0', db: history, mem0: { vectorStore: 'sqlite', vectorDb: join(dir, 'vec', 'v.db') } } } }));
    const r = cli(['config', '--config', config], env());
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/snapshot\.root .* contains the folder of store m's file .*h\/history\.db/);
    writeFileSync(config, yaml({ snapshot: { root: join(dir, 'vec') }, stores: { m: { layout: 'mem0', db: history, mem0: { vectorStore: 'sqlite', vectorDb: join(dir, 'vec', 'v.db') } } } }));
    expect(cli(['config', '--config', config], env()).stderr).toMatch(/snapshot\.root .* is the folder of store m's file .*vec\/v\.db/);
  });

  it('a Mastra store\'s separate vector file counts as its file: a root that is or holds its folder is refused', () => {
    mkdirSync(join(dir, 'm'));
    mkdirSync(join(dir, 'vec'));
    const store = { layout: 'mastra', db: join(dir, 'm', 'mastra.db'), mastra: { vectorDb: join(dir, 'vec', 'vectors.db') } };
    const config = join(dir, 'c.yaml');
    for (const root of [join(dir, 'vec'), join(dir, 'vec', '..', 'vec')]) {
      writeFileSync(config, yaml({ snapshot: { root }, stores: { m: store } }));
      const r = cli(['config', '--config', config], env());
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/snapshot\.root .* is the folder of store m's file .*vec\/vectors\.db/);
    }
  });

  it('--db with no config file: a store in ./backups/<name>/ from the default root is refused too', () => {
    mkdirSync(join(dir, 'backups', 'x'), { recursive: true });
    const db = makeStore(join(dir, 'backups', 'x', 'x.db'), [EVE]);
    const r = spawnSync(process.execPath, [CLI, 'run', 'snapshot', '--db', db], { cwd: dir, encoding: 'utf8', env: { ...process.env, LOG_LEVEL: 'silent', ...env() } });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/^memory-warden: config: snapshot\.root \.\/backups contains the folder of store x's file/);
    expect(readdirSync(join(dir, 'backups', 'x'))).toEqual(['x.db']);
  });
});

describe('store names are plain folder names', () => {
  const BAD = ['.', '..', '...', 'a/b', 'a\\b', '', 'a\0b', '-rf', '--store', '.hidden', 'a.', 'a b', 'x'.repeat(101), 'é'];
  it.each(BAD.map((n) => [JSON.stringify(n), n]))('%s: exit 2, one line naming the store, nothing made', (_, name) => {
    const db = makeStore(join(dir, 'm.db'), [EVE]);
    const config = join(dir, 'c.yaml');
    writeFileSync(config, yaml({ snapshot: { root: join(dir, 'backups') }, stores: { [name]: { db } } }));
    // A name the command line cannot carry (empty, a NUL) is tried through `config` only.
    for (const argv of name === '' || name.includes('\0') ? [['config']] : [['config'], ['run', 'snapshot', '--store', name]]) {
      const r = cli([...argv, '--config', config], env());
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.stderr).toBe(`memory-warden: config ${config}: stores: ${JSON.stringify(name)}: a store name: letters, digits, _ . - (at most 100), starting with a letter, digit or _, not ending with .\n`);
    }
    expect(readdirSync(dir).sort()).toEqual(['c.yaml', 'm.db']);
  });

  it('names that differ only in case are refused: one snapshot folder on a case-insensitive file system', () => {
    const db = makeStore(join(dir, 'm.db'));
    const other = makeStore(join(dir, 'n.db'));
    const config = join(dir, 'c.yaml');
    writeFileSync(config, yaml({ snapshot: { root: join(dir, 'backups') }, stores: { Agent: { db }, agent: { db: other } } }));
    const r = cli(['config', '--config', config], env());
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^memory-warden: config .*: stores\.agent: differs from store "Agent" only in case[^\n]*\n$/);
  });

  it('good names still pass: a_b, A-1, v1.2, _x, 100 characters', () => {
    const db = makeStore(join(dir, 'm.db'));
    const config = join(dir, 'c.yaml');
    const names = ['a_b', 'A-1', 'v1.2', '_x', 'y'.repeat(100)];
    writeFileSync(config, yaml({ snapshot: { root: join(dir, 'backups') }, stores: Object.fromEntries(names.map((n) => [n, { db }])) }));
    const r = cli(['config', '--config', config], env());
    expect(r.code, r.stderr).toBe(0);
    expect(Object.keys(r.json().stores)).toEqual(names);
  });

  it.each([['..db'], ['...db'], ['-rf.db'], ['.hidden.db'], ['a..db']])('--db %s: named so its snapshots stay inside the root', (file) => {
    const db = makeStore(join(dir, file), [EVE]);
    const r = spawnSync(process.execPath, [CLI, 'run', 'snapshot', '--db', db, '--json'], { cwd: dir, encoding: 'utf8', env: { ...process.env, LOG_LEVEL: 'silent', ...env() } });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { store: string; dir: string };
    expect(out.store).toMatch(/^[A-Za-z0-9_]/);
    expect(resolve(dir, out.dir)).toBe(join(dir, 'backups', out.store, out.dir.split(sep).at(-1)!));
    expect(readdirSync(join(dir, 'backups'))).toEqual([out.store]);
  });
});

describe('erase --snapshots deletes only verified snapshots of the store', () => {
  it('a real snapshot goes; forged, another store\'s, damaged, unlisted, linked and manifest-less folders stay, found, exit 1', () => {
    const live = join(dir, 'live');
    mkdirSync(live);
    const db = makeStore(join(live, 'agents.db'), [EVE, OTHER]);
    const copy = join(dir, 'copy.db');
    copyFileSync(db, copy);
    const root = join(dir, 'backups');
    const config = join(dir, 'c.yaml');
    writeFileSync(config, yaml({ snapshot: { root }, stores: { agents: { db }, other: { db: makeStore(join(dir, 'other.db')) } } }));
    const real = cli(['run', 'snapshot', '--config', config, '--store', 'agents', '--now', '2026-11-28T06:00:00Z', '--json'], env());
    expect(real.code, real.stderr).toBe(0);
    const at = (name: string) => join(root, 'agents', name);

    // Each holds Eve's text; none is a snapshot of store agents that memory-warden can prove it made.
    writeSnapshotFolder(root, 'agents', '2026-11-01T000000Z', { 'store.db': copy }, { store: 'other' });
    writeSnapshotFolder(root, 'agents', '2026-11-02T000000Z', { 'store.db': copy }, { name: '2026-11-28T060000Z' });
    writeSnapshotFolder(root, 'agents', '2026-11-03T000000Z-pre-restore', { 'store.db': copy }, { reason: 'scheduled' });
    writeSnapshotFolder(root, 'agents', '2026-11-04T000000Z', { 'store.db': copy }, { files: { 'store.db': { bytes: readFileSync(copy).length, sha256: '0'.repeat(64) } } });
    writeSnapshotFolder(root, 'agents', '2026-11-05T000000Z', { 'store.db': copy });
    copyFileSync(copy, join(at('2026-11-05T000000Z'), 'notes.db')); // a file the manifest does not list
    writeSnapshotFolder(root, 'agents', '2026-11-06T000000Z', { 'store.db': copy });
    writeFileSync(join(at('2026-11-06T000000Z'), 'manifest.json'), '{"format":"memory-warden-snapshot/1"}'); // forged, not a manifest
    mkdirSync(at('2026-11-07T000000Z'));
    copyFileSync(copy, join(at('2026-11-07T000000Z'), 'store.db')); // no manifest
    symlinkSync(live, at('2026-11-08T000000Z')); // a link named like a snapshot, to the live store's folder

    const kept = ['2026-11-01T000000Z', '2026-11-02T000000Z', '2026-11-03T000000Z-pre-restore', '2026-11-04T000000Z', '2026-11-05T000000Z', '2026-11-06T000000Z', '2026-11-07T000000Z'];
    const before = tree(root);
    const r = cli(['erase', '--config', config, '--store', 'agents', '--subject', 'Eve Park', '--snapshots', '--json'], env());
    expect(r.code, r.stderr).toBe(1); // folders still hold the text
    const receipt = r.json();
    expect(receipt.snapshots.deleted).toEqual([real.json().dir]);
    expect(receipt.snapshots.found.sort()).toEqual([real.json().dir, ...kept.map(at)].sort());
    expect(existsSync(real.json().dir)).toBe(false);
    for (const [file, bytes] of Object.entries(before)) if (!file.startsWith(real.json().dir + sep)) expect(readFileSync(file).toString('hex'), file).toBe(bytes);
    expect(readdirSync(live).filter((n) => !n.endsWith('.warden-lock'))).toEqual(['agents.db']);
    expect(ids(db)).toEqual(['o1']);
    expect(readdirSync(join(root, 'agents')).filter((n) => n.startsWith('.partial-'))).toEqual([]);
  });

  it('a snapshot of store a is not store b\'s to delete, even copied under b\'s folder whole', () => {
    const a = makeStore(join(dir, 'a.db'), [EVE]);
    const b = makeStore(join(dir, 'b.db'), [{ ...EVE, id: 'b1' }]);
    const root = join(dir, 'backups');
    const config = join(dir, 'c.yaml');
    writeFileSync(config, yaml({ snapshot: { root }, stores: { a: { db: a }, b: { db: b } } }));
    const snap = cli(['run', 'snapshot', '--config', config, '--store', 'a', '--json'], env()).json();
    const name = snap.dir.split(sep).at(-1);
    mkdirSync(join(root, 'b', name), { recursive: true });
    for (const f of readdirSync(snap.dir)) copyFileSync(join(snap.dir, f), join(root, 'b', name, f));
    const r = cli(['erase', '--config', config, '--store', 'b', '--subject', 'Eve Park', '--snapshots', '--json'], env());
    expect(r.code).toBe(1);
    expect(r.json().snapshots).toMatchObject({ found: [join(root, 'b', name)], deleted: [] });
    expect(existsSync(join(root, 'b', name, 'store.db'))).toBe(true);
    expect(existsSync(join(snap.dir, 'store.db'))).toBe(true);
  });
});
