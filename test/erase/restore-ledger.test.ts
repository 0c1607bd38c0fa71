import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import YAML from 'yaml';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { CLI } from '../helpers/cli.js';
import { tempDir } from '../helpers/store.js';
import { expectEveryPair, kindsFor, makeKind, type KindName, type KindStore } from '../helpers/store-kinds.js';

/**
 * Every restore re-applies the erase ledger (src/erase/restore-ledger.ts), through the CLI as an operator runs it:
 * for every (engine, layout) pair (test/helpers/store-kinds.ts), a snapshot taken while Carol's memories were live is restored after `erase --user carol` by every
 * path a restore takes (a local snapshot by name, local `latest`, a target's snapshot by name and `latest`, the
 * pre-restore snapshot a restore left), and none of it brings her back; each says how many erased memories it kept
 * out. Then the attacks: a deleted remote snapshot put back (its MAC genuine), a machine that lost the ledger, and a
 * clock stepped back (`latest` is the newest by sequence number, and a target's writer deleting it is noticed).
 */
const CAROL = 'Carol Whitfield keeps the vault code 4471 in her left shoe';
const CAROL2 = 'Carol Whitfield flies to Lisbon on the ninth';
const BOB = 'Bob Lindqvist grows chillies on his balcony';
const DAY = 86_400_000;
const T0 = Date.parse('2026-11-29T02:00:00Z');

function run(args: string[], env: Record<string, string> = {}) {
  const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, LOG_LEVEL: 'silent', ...world?.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise<{ code: number | null; stdout: string; stderr: string; json(): any }>((resolve) =>
    child.on('close', (code) => resolve({
      code, stdout, stderr,
      json: () => {
        try {
          return JSON.parse(stdout);
        } catch {
          throw new Error(`no JSON from ${args.join(' ')} (exit ${code}): ${stderr}`);
        }
      },
    })),
  );
}

interface World {
  dir: string;
  config: string;
  stateDb: string;
  /** `<snapshot.root>/agent` */
  root: string;
  /** The local target's folder for the store. */
  nas: string;
  /** The store, of its kind (test/helpers/store-kinds.ts). */
  kind: KindStore;
  /** Carol's and Bob's memories written the way the kind's writer writes them (the writer let go after). */
  fill(texts: { carol: string[]; bob: string[] }): Promise<void>;
  /** Everything the store holds, as text: its rows or files and its vector payloads. */
  dump(): Promise<string>;
  /** Whether any byte of the text is left in the store (its files or relation files, its vectors). */
  holds(text: string): Promise<boolean>;
  /** Flags every restore of this world needs. */
  flags: string[];
  /** The environment the config's references need. */
  env: Record<string, string>;
  close(): Promise<void>;
}

function base(dir: string, store: Record<string, unknown>): { config: string; stateDb: string; root: string; nas: string } {
  const keyFile = join(dir, 'target.key');
  writeFileSync(keyFile, randomBytes(32).toString('hex'), { mode: 0o600 });
  mkdirSync(join(dir, 'nas'));
  const stateDb = join(dir, 'state', 'state.db');
  const config = join(dir, 'warden.yaml');
  writeFileSync(config, YAML.stringify({
    stateDb,
    snapshot: { root: join(dir, 'backups'), targets: [{ type: 'local', name: 'nas', path: join(dir, 'nas'), authKeyFile: keyFile }] },
    stores: { agent: store },
  }));
  return { config, stateDb, root: join(dir, 'backups', 'agent'), nas: join(dir, 'nas', 'agent') };
}

async function worldOf(name: KindName, dir: string): Promise<World> {
  const kind = await makeKind(name, dir, { now: T0 });
  return {
    dir, ...base(dir, kind.fileStore), kind,
    async fill({ carol, bob }) {
      for (const text of carol) await kind.add({ text, user: 'carol', at: T0 - DAY });
      for (const text of bob) await kind.add({ text, user: 'bob', at: T0 - DAY });
      kind.settle();
    },
    dump: () => kind.dump(),
    holds: (t) => kind.holds(t),
    flags: kind.restoreFlags,
    env: kind.env,
    close: () => kind.close(),
  };
}

let tmp: ReturnType<typeof tempDir> | undefined;
let world: World | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
  tmp?.cleanup();
  tmp = undefined;
});

async function make(kind: KindName): Promise<World> {
  tmp = tempDir(`mw-restore-ledger-${kind.replace('×', '-')}-`);
  world = await worldOf(kind, tmp.dir);
  return world;
}

const at = (ms: number) => new Date(ms).toISOString();
const names = (dir: string) => (existsSync(dir) ? readdirSync(dir).filter((n) => /^\d{4}-/.test(n)).sort() : []);

it('every (engine, layout) pair the config accepts is in this suite, or a gap named in test/helpers/store-kinds.ts', () => {
  expectEveryPair('restore-ledger');
});

describe.each(kindsFor('restore-ledger'))('a %s store: no restore brings an erased person back', { timeout: 600_000 }, (kind) => {
  it('a local snapshot by name and as latest, a target\'s by name and as latest, and a pre-restore snapshot', async () => {
    const w = await make(kind);
    const c = ['--config', w.config, '--store', 'agent'];
    await w.fill({ carol: [CAROL, CAROL2], bob: [BOB] });
    const snap = await run(['run', 'snapshot', ...c, '--now', at(T0), '--json']);
    expect(snap.code, snap.stderr).toBe(0);
    const [name] = names(w.root);
    expect(names(w.nas)).toEqual([name]); // pushed to the target too
    // A restore while Carol is live leaves a pre-restore snapshot that holds her.
    const first = await run(['restore', name!, ...c, ...w.flags, '--now', at(T0 + 1000), '--json']);
    expect(first.code, first.stderr).toBe(0);
    expect(first.json().erasedKeptOut).toBe(0);
    const undo: string = first.json().undo;
    expect(undo).toMatch(/-pre-restore$/);

    const erased = await run(['erase', '--user', 'carol', ...c, '--json']);
    expect(erased.code, erased.stderr).toBe(1); // her snapshots are still there: found, kept
    expect(erased.json().memories).toBeGreaterThanOrEqual(2);
    expect(await w.holds(CAROL)).toBe(false);

    const ways: [label: string, args: string[]][] = [
      ['local folder', ['restore', join(w.root, name!)]],
      ['local by name', ['restore', name!]],
      ['local latest', ['restore', 'latest']],
      ['target by name', ['restore', name!, '--target', 'nas']],
      ['target latest', ['restore', 'latest', '--target', 'nas']],
      ['the pre-restore snapshot', ['restore', undo]],
    ];
    let t = T0 + 10_000;
    for (const [label, args] of ways) {
      const r = await run([...args, ...c, ...w.flags, '--now', at((t += 1000)), '--json']);
      expect(r.code, `${label}: ${r.stderr}`).toBe(0);
      expect(await w.holds(CAROL), label).toBe(false);
      expect(await w.holds(CAROL2), label).toBe(false);
      expect(await w.holds(BOB), label).toBe(true);
      expect(r.json().erasedKeptOut, label).toBeGreaterThanOrEqual(2);
    }
    // The text output says it too.
    const said = await run(['restore', 'latest', ...c, ...w.flags, '--now', at((t += 1000))]);
    expect(said.code, said.stderr).toBe(0);
    expect(said.stdout).toMatch(/erased memories kept out: [1-9]\d* \(erase ledger: /);
    expect(said.stdout).toMatch(/re-applied the erase ledger \(\d+ erased id\(s\), 1 erased person\(s\)\): kept out/);
    expect(await w.holds(CAROL)).toBe(false);
  });
});

describe('a deleted remote snapshot put back by whoever can write the target (its MAC genuine)', { timeout: 180_000 }, () => {
  it('is listed as erased, is never latest, and restored by name keeps the person out', async () => {
    const w = await make('sqlite×warden');
    const c = ['--config', w.config, '--store', 'agent'];
    await w.fill({ carol: [CAROL], bob: [BOB] });
    expect((await run(['run', 'snapshot', ...c, '--now', at(T0)])).code).toBe(0);
    const [older] = names(w.nas);
    await w.fill({ carol: [CAROL2], bob: [] });
    expect((await run(['run', 'snapshot', ...c, '--now', at(T0 + DAY)])).code).toBe(0);
    const [, newest] = names(w.nas);
    const kept = join(w.dir, 'attacker-copy');
    cpSync(join(w.nas, newest!), kept, { recursive: true });

    const erased = await run(['erase', '--user', 'carol', '--snapshots', ...c, '--json']);
    expect(erased.code, erased.stderr).toBe(0);
    expect(names(w.nas)).toEqual([]);
    // Put back, object for object: the manifest's MAC is genuine.
    cpSync(kept, join(w.nas, newest!), { recursive: true });
    const listed = await run(['snapshots', 'list', ...c, '--target', 'nas', '--json']);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.json().snapshots).toEqual([expect.objectContaining({ name: newest, problem: null, erased: expect.any(String) })]);
    const text = await run(['snapshots', 'list', ...c, '--target', 'nas']);
    expect(text.stdout).toMatch(new RegExp(`${newest}  .*ERASED \\(an erase removed it `));

    const latest = await run(['restore', 'latest', ...c, '--target', 'nas', '--now', at(T0 + 2 * DAY)]);
    expect(latest.code).toBe(2);
    expect(latest.stderr).toMatch(/has no complete snapshot \(none an erase removed\)/);
    const byName = await run(['restore', newest!, ...c, '--target', 'nas', '--now', at(T0 + 2 * DAY), '--json']);
    expect(byName.code, byName.stderr).toBe(0);
    expect(byName.json().erasedKeptOut).toBeGreaterThanOrEqual(2);
    expect(byName.json().steps.join('\n')).toMatch(new RegExp(`${newest} is a snapshot an erase removed`));
    const left = await w.dump();
    expect(left).not.toContain(CAROL);
    expect(left).not.toContain(CAROL2);
    expect(left).toContain(BOB);

    // The same locally: a folder an operator copied back is marked, and latest passes it by.
    cpSync(kept, join(w.root, newest!), { recursive: true });
    const local = await run(['snapshots', 'list', ...c, '--json']);
    expect(local.json().snapshots.find((s: { name: string }) => s.name === newest)).toMatchObject({ erased: expect.any(String) });
    expect(older).toBeDefined();
    const localLatest = await run(['restore', 'latest', ...c, '--now', at(T0 + 3 * DAY), '--json']);
    expect(localLatest.code).toBe(2); // the older one went with --snapshots too; the copied-back one is not offered
    expect(localLatest.stderr).toMatch(/no usable scheduled snapshot .*none an erase removed/);
  });
});

describe('a machine that lost the erase ledger', { timeout: 180_000 }, () => {
  it('no state db, no erase key, or a new state db: the restore says it cannot re-apply erasures and changes nothing; --without-erase-ledger restores anyway, saying so', async () => {
    const w = await make('sqlite×warden');
    const c = ['--config', w.config, '--store', 'agent'];
    await w.fill({ carol: [CAROL], bob: [BOB] });
    expect((await run(['run', 'snapshot', ...c, '--now', at(T0)])).code).toBe(0);
    const [name] = names(w.root);
    expect((await run(['erase', '--user', 'carol', ...c])).code).toBe(1);
    const before = await w.dump();
    const keyFile = join(w.dir, 'state', 'erase.key');
    expect(existsSync(keyFile)).toBe(true);

    // The erase key gone, the state db kept.
    renameSync(keyFile, `${keyFile}.away`);
    const noKey = await run(['restore', name!, ...c, '--now', at(T0 + DAY)]);
    expect(noKey.code).toBe(2);
    expect(noKey.stderr.trim().split('\n')).toEqual([expect.stringMatching(/^.*restore: cannot re-apply erasures: erase key: .*erase\.key is missing.*--without-erase-ledger/)]);
    expect(await w.dump()).toBe(before);
    renameSync(`${keyFile}.away`, keyFile);

    // The state db gone (and what holds it): a dry run says so too.
    renameSync(join(w.dir, 'state'), join(w.dir, 'state-away'));
    for (const args of [['restore', name!], ['restore', 'latest'], ['restore', name!, '--target', 'nas'], ['restore', name!, '--dry-run']]) {
      const r = await run([...args, ...c, '--now', at(T0 + DAY)]);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr, args.join(' ')).toMatch(/cannot re-apply erasures: there is no state db at .*state\.db .*Put the state db and the erase key back from your backup .*--without-erase-ledger/);
      expect(await w.dump()).toBe(before);
      expect(existsSync(join(w.dir, 'state', 'state.db'))).toBe(false);
    }
    // A new state db (another job made one): it is not the one bound to the snapshot's erase key.
    const fresh = await run(['erase', 'receipts', ...c]);
    expect(fresh.code, fresh.stderr).toBe(0);
    expect(existsSync(join(w.dir, 'state', 'state.db'))).toBe(true);
    const other = await run(['restore', name!, ...c, '--now', at(T0 + DAY)]);
    expect(other.code).toBe(2);
    expect(other.stderr).toMatch(/cannot re-apply erasures: the snapshot was taken under erase key [0-9a-f]{16}, and state db .* has never been used with an erase key/);
    expect(await w.dump()).toBe(before);

    const anyway = await run(['restore', name!, ...c, '--without-erase-ledger', '--now', at(T0 + DAY), '--json']);
    expect(anyway.code, anyway.stderr).toBe(0);
    expect(anyway.json().erasedKeptOut).toBe(0);
    expect(anyway.json().eraseLedger).toMatch(/^NOT re-applied \(--without-erase-ledger\): /);
    expect(anyway.json().steps.join('\n')).toMatch(/did NOT re-apply the erase ledger/);
    expect(await w.dump()).toContain(CAROL); // what the flag means: she is back

    // With the real ledger back, the next restore takes her out again.
    rmSync(join(w.dir, 'state'), { recursive: true });
    renameSync(join(w.dir, 'state-away'), join(w.dir, 'state'));
    const again = await run(['restore', name!, ...c, '--now', at(T0 + 2 * DAY), '--json']);
    expect(again.code, again.stderr).toBe(0);
    expect(again.json().erasedKeptOut).toBeGreaterThanOrEqual(1);
    expect(await w.dump()).not.toContain(CAROL);
  });
});

describe('latest is the newest by sequence number, not by name', { timeout: 180_000 }, () => {
  it('after a clock step back the newest snapshot has the oldest name: latest restores it, locally and from the target; the target\'s writer deleting it is noticed', async () => {
    const w = await make('sqlite×warden');
    const c = ['--config', w.config, '--store', 'agent'];
    const FIRST = 'Bob Lindqvist planted tomatoes in May';
    await w.fill({ carol: [], bob: [FIRST] });
    expect((await run(['run', 'snapshot', ...c, '--now', '2026-11-30T02:00:00Z'])).code).toBe(0);
    await w.fill({ carol: [], bob: [BOB] });
    // The clock stepped back a day: the snapshot taken last gets the older name.
    expect((await run(['run', 'snapshot', ...c, '--now', '2026-11-29T02:00:00Z'])).code).toBe(0);
    expect(names(w.nas)).toEqual(['2026-11-29T020000Z', '2026-11-30T020000Z']);
    // Empty the store: what latest brings back tells which snapshot it was.
    const d = new Database(join(w.dir, 'agent.db'));
    d.exec('DELETE FROM memory');
    d.close();

    const remote = await run(['restore', 'latest', ...c, '--target', 'nas', '--now', '2026-11-29T03:00:00Z', '--json']);
    expect(remote.code, remote.stderr).toBe(0);
    expect(remote.json().from).toBe('nas:2026-11-29T020000Z');
    expect(await w.dump()).toContain(BOB);
    const local = await run(['restore', 'latest', ...c, '--now', '2026-11-29T04:00:00Z', '--json']);
    expect(local.code, local.stderr).toBe(0);
    expect(local.json().from).toBe(join(w.root, '2026-11-29T020000Z'));
    // Listed in that order, with their sequence numbers.
    const listed = await run(['snapshots', 'list', ...c, '--target', 'nas', '--json']);
    expect(listed.json().snapshots.map((s: { name: string; seq: number }) => [s.name, s.seq])).toEqual([['2026-11-30T020000Z', 0], ['2026-11-29T020000Z', 1]]);
    const here = await run(['snapshots', 'list', ...c, '--json']);
    expect(here.json().snapshots.filter((s: { reason: string }) => s.reason === 'scheduled').map((s: { name: string; seq: number }) => [s.name, s.seq])).toEqual([['2026-11-30T020000Z', 0], ['2026-11-29T020000Z', 1]]);

    // Whoever writes the target deletes the true newest: latest would now be the other one, and that is noticed.
    rmSync(join(w.nas, '2026-11-29T020000Z'), { recursive: true });
    const before = await w.dump();
    const refused = await run(['restore', 'latest', ...c, '--target', 'nas', '--now', '2026-11-29T05:00:00Z']);
    expect(refused.code).toBe(2);
    expect(refused.stderr.trim().split('\n')).toEqual([expect.stringMatching(/the newest snapshot of agent on target nas is 2026-11-30T020000Z, older than 2026-11-29T020000Z, which this machine pushed there/)]);
    expect(await w.dump()).toBe(before);
  });
});
