/** Erase across runs and copies, through the CLI: exit 1 while any local or remote snapshot may hold the person; no re-upload. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { gunzipSync, gzipSync } from 'node:zlib';
import { join } from 'node:path';
import YAML from 'yaml';
import { insertRows, makeStore, tempDir, type Row } from '../helpers/store.js';
import { cli } from '../helpers/cli.js';

/**
 * "Erase exits 1 while any copy remains" across runs and places: a person's rows in local snapshots and on a
 * target are found the same way (keyed hashes of ids and users) whatever the run erased from the store itself,
 * a holds file that cannot be verified cannot rule a snapshot out, and a snapshot an erase removed is never
 * uploaded again. The CLI as a real process; a real store, real snapshots and a local target.
 */
const SB = '2026-11-19T020000Z'; // bob only
const S0 = '2026-11-20T020000Z'; // holds c0, which prune deletes before the erase
const S1 = '2026-11-21T020000Z'; // holds c1
const iso = (name: string) => `${name.slice(0, 13)}:${name.slice(13, 15)}:${name.slice(15, 17)}Z`;
const PRUNED_FACT = 'Carol Wren moved to 4 Kelp Road';
const LIVE_FACT = 'Carol Wren takes insulin at 9pm';

let tmp: { dir: string; cleanup: () => void };
beforeEach(() => {
  tmp = tempDir('mw-erase-runs-');
});
afterEach(() => tmp.cleanup());

interface World {
  db: string;
  config: string;
  env: Record<string, string>;
  backups: string;
  target: string;
  run(...args: string[]): ReturnType<typeof cli>;
  erase(...args: string[]): { code: number; found: string[]; deleted: string[]; unverified: string[]; stderr: string };
  remote(): string[];
}

/**
 * Carol's pruned row c0 is only in S0; her live row c1 in S1 and the store; Bob's row everywhere. Every snapshot
 * was uploaded to the target (`withTarget`) as the snapshot job does.
 */
function world(withTarget: boolean): World {
  const db = makeStore(join(tmp.dir, 'memory.db'), [{ id: 'b1', subject: 'bob', fact: 'Bob prefers pnpm', source: 'user message' }]);
  const backups = join(tmp.dir, 'backups');
  const target = join(tmp.dir, 'target');
  const config = join(tmp.dir, 'warden.yaml');
  const stateDb = join(tmp.dir, 'state', 'state.db');
  const targets = withTarget ? [{ type: 'local', name: 'disk', path: target }] : [];
  if (withTarget) mkdirSync(target); // a local target's folder must exist (a disk that is not mounted is an error)
  writeFileSync(config, YAML.stringify({ stateDb, snapshot: { root: backups, targets }, stores: { agent: { db } } }));
  const env = { MEMORY_WARDEN_STATE: stateDb };
  const run = (...args: string[]) => cli([...args, '--config', config, '--store', 'agent'], env);
  const w: World = {
    db, config, env, backups, target, run,
    erase: (...args) => {
      const r = run('erase', ...args, '--json');
      if (r.code !== 0 && r.code !== 1) throw new Error(`erase ${args.join(' ')}: exit ${r.code}: ${r.stderr}`);
      const receipt = r.json();
      return { code: r.code, found: receipt.snapshots.found, deleted: receipt.snapshots.deleted, unverified: receipt.snapshots.unverified, stderr: r.stderr };
    },
    remote: () => (existsSync(join(target, 'agent')) ? readdirSync(join(target, 'agent')).filter((n) => !n.startsWith('.')).sort() : []),
  };
  const snap = (name: string) => expect(run('run', 'snapshot', '--now', iso(name)).code).toBe(0);
  snap(SB);
  const rows: Row[] = [{ id: 'c0', subject: 'carol', fact: PRUNED_FACT, source: 'user message', expires_at: '2026-11-20 12:00:00' }];
  const add = (r: Row[]) => {
    const h = new Database(db);
    insertRows(h, r);
    h.close();
  };
  add(rows);
  snap(S0);
  add([{ id: 'c1', subject: 'carol', fact: LIVE_FACT, source: 'user message' }]);
  expect(run('run', 'prune', '--now', '2026-11-21T01:00:00Z').code).toBe(0); // c0 expired: pruned
  snap(S1);
  if (withTarget) expect(w.remote()).toEqual([SB, S0, S1]);
  return w;
}

const unzip = (b: Buffer) => gunzipSync(b).toString('utf8');
const local = (w: World, name: string) => join(w.backups, 'agent', name);
const remoteLabel = (name: string) => `target:disk/${name}`;

describe('erase finds a row pruned before it in local snapshots, as on a target', () => {
  it.each([
    ['--user', ['--user', 'carol']],
    ['--ids of the pruned row', ['--ids', 'c0']],
  ])('%s: the snapshot holding only that row is listed, exit 1; --snapshots deletes it, then exit 0', (_label, sel) => {
    const w = world(false);
    const first = w.erase(...sel);
    expect(first.found).toContain(local(w, S0));
    expect(first.found).not.toContain(local(w, SB));
    expect(first.code).toBe(1);
    const second = w.erase(...sel, '--snapshots');
    expect(second.deleted).toContain(local(w, S0));
    expect(second.code).toBe(0);
    expect(existsSync(local(w, S0))).toBe(false);
    expect(existsSync(local(w, SB))).toBe(true); // Bob's alone: not hers, kept
    expect(w.erase(...sel)).toMatchObject({ code: 0, found: [] });
  });
});

describe('erase finds a target\'s copy of a local snapshot that holds the text', () => {
  it('--subject naming a row pruned before the erase: its local snapshot and that snapshot\'s upload, not the others', () => {
    const w = world(true);
    const first = w.erase('--subject', 'kelp road');
    expect([...first.found].sort()).toEqual([local(w, S0), remoteLabel(S0)].sort());
    expect(first.code).toBe(1);
    expect(w.erase('--subject', 'KELP ROAD', '--snapshots')).toMatchObject({ code: 0 });
    expect(w.remote()).toEqual([SB, S1]);
    expect(w.erase('--subject', 'kelp road')).toMatchObject({ code: 0, found: [] });
  });
});

describe('erase keeps its exit code across runs', () => {
  it('--subject: a run that deleted the local copies but could not reach the target is followed by runs that find the remote copy until it is gone', () => {
    const w = world(true);
    renameSync(w.target, `${w.target}.unmounted`);
    const first = w.erase('--subject', 'insulin', '--snapshots');
    expect(first.deleted).toEqual([local(w, S1)]);
    expect(first.found).toContainEqual(expect.stringMatching(/^target:disk \(unreachable: /));
    expect(first.unverified).toEqual(first.found.filter((f) => f.startsWith('target:')));
    expect(first.code).toBe(1);
    renameSync(`${w.target}.unmounted`, w.target);

    // The rows and their texts are gone; the ids it erased are what the next runs look for.
    for (let i = 0; i < 2; i++) expect(w.erase('--subject', 'INSULIN')).toMatchObject({ code: 1, found: [remoteLabel(S1)], deleted: [] });
    expect(w.erase('--subject', 'insulin', '--snapshots')).toMatchObject({ code: 0, found: [remoteLabel(S1)], deleted: [remoteLabel(S1)] });
    expect(w.remote()).toEqual([SB, S0]); // S0 holds only the pruned row, which has no insulin in it
    expect(w.erase('--subject', 'insulin')).toMatchObject({ code: 0, found: [] });
  });

  it('--ids: the re-run with --snapshots that erase advises deletes the copies, local and remote, though the rows are gone', () => {
    const w = world(true);
    const first = w.erase('--ids', 'c1');
    expect(first.found.sort()).toEqual([local(w, S1), remoteLabel(S1)].sort());
    expect(first.code).toBe(1);
    const second = w.erase('--ids', 'c1', '--snapshots');
    expect(second.deleted.sort()).toEqual([local(w, S1), remoteLabel(S1)].sort());
    expect(second.code).toBe(0);
    expect(w.remote()).toEqual([SB, S0]);
  });

  it('--user: the second run finds what the first left, whichever the run', () => {
    const w = world(true);
    const first = w.erase('--user', 'carol');
    const all = [local(w, S0), local(w, S1), remoteLabel(S0), remoteLabel(S1)].sort();
    expect([...first.found].sort()).toEqual(all);
    expect(first.code).toBe(1);
    expect([...w.erase('--user', 'carol').found].sort()).toEqual(all);
    expect(w.erase('--user', 'carol', '--snapshots')).toMatchObject({ code: 0 });
    expect(w.remote()).toEqual([SB]);
    expect(readdirSync(join(w.backups, 'agent')).filter((n) => !n.startsWith('.'))).toEqual([SB]);
  });
});

describe('a holds file that cannot be verified cannot rule a snapshot out', () => {
  type Holds = { ids: string[]; users: string[] };
  const forgeries: [string, (hers: Holds, bobs: Buffer) => Buffer][] = [
    ['a valid, empty holds file', () => gzipSync('{"ids":[],"users":[]}')],
    ['the holds file of a snapshot that does not hold her', (_hers, bobs) => bobs],
    ['her holds file with her hashes taken out', (hers, bobs) => {
      const bob = JSON.parse(unzip(bobs)) as Holds;
      return gzipSync(JSON.stringify({ ids: hers.ids.filter((x) => bob.ids.includes(x)), users: bob.users }));
    }],
  ];
  it.each(forgeries)('%s in place of hers: listed, exit 1; --snapshots deletes it', (_label, forge) => {
    const w = world(true);
    const saved = join(tmp.dir, 'saved-remote');
    cpSync(join(w.target, 'agent', S0), saved, { recursive: true });
    // Her local copies are gone already: only the target's copies can keep the exit code at 1.
    expect(w.erase('--user', 'carol', '--snapshots').code).toBe(0);
    // Her snapshot is put back on the target by whoever can write there, with its holds replaced.
    cpSync(saved, join(w.target, 'agent', S0), { recursive: true });
    const hers = JSON.parse(unzip(readFileSync(join(saved, 'holds.json.gz')))) as Holds;
    writeFileSync(join(w.target, 'agent', S0, 'holds.json.gz'), forge(hers, readFileSync(join(w.target, 'agent', SB, 'holds.json.gz'))));
    const r = w.erase('--user', 'carol');
    expect(r).toMatchObject({ code: 1, found: [remoteLabel(S0)], unverified: [remoteLabel(S0)] });
    const printed = w.run('erase', '--user', 'carol');
    expect(printed.stdout).toContain(`snapshot cannot be ruled out, may still contain it: ${remoteLabel(S0)}`);
    expect(w.erase('--user', 'carol', '--snapshots')).toMatchObject({ code: 0, deleted: [remoteLabel(S0)] });
    expect(w.remote()).toEqual([SB]);
  });
});

describe('a snapshot an erase removed is never uploaded again', () => {
  it('its folder put back (a copy of the backup folder restored): the push skips it; erase still finds it', () => {
    const w = world(true);
    const saved = join(tmp.dir, 'saved');
    cpSync(join(w.backups, 'agent'), saved, { recursive: true });
    expect(w.erase('--user', 'carol', '--snapshots').code).toBe(0);
    expect(existsSync(local(w, S0))).toBe(false);
    expect(w.remote()).toEqual([SB]);

    for (const n of [S0, S1]) cpSync(join(saved, n), local(w, n), { recursive: true });
    const push = w.run('snapshots', 'push', '--json');
    expect(push.code, push.stderr).toBe(0);
    expect(push.json().targets).toEqual([expect.objectContaining({ target: 'disk', uploaded: [] })]);
    expect(w.remote()).toEqual([SB]);
    const again = w.erase('--user', 'carol');
    expect([...again.found].sort()).toEqual([local(w, S0), local(w, S1)]);
    expect(again.code).toBe(1);
    // A snapshot taken after the erase is uploaded as usual.
    expect(w.run('run', 'snapshot', '--now', '2026-11-22T02:00:00Z').code).toBe(0);
    expect(w.remote()).toEqual([SB, '2026-11-22T020000Z']);
  });
});
