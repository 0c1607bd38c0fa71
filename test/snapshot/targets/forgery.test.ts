// Forgeries by whoever can write a target (local folder, real sshd): authenticated manifests, bounded reads of
// regular files only, and the store untouched whenever one is refused.
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, truncateSync, appendFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { createHash, randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLogger, silentLogger } from '../../../src/log/logger.js';
import { takeSnapshot } from '../../../src/snapshot/create.js';
import { restoreSnapshot } from '../../../src/snapshot/restore.js';
import { fetchSnapshot, replicateStore, verifyRemote, withTarget } from '../../../src/snapshot/targets/replicate.js';
import { readRemoteManifest, type RemoteManifest } from '../../../src/snapshot/targets/remote-manifest.js';
import { sealManifest, writeTargetKey } from '../../../src/snapshot/targets/auth.js';
import { HOLDS_KEY, holdsContain } from '../../../src/snapshot/targets/holds.js';
import { UnverifiedSnapshotError } from '../../../src/snapshot/targets/types.js';
import { remoteSnapshotCopies } from '../../../src/erase/targets.js';
import type { TargetConfig } from '../../../src/snapshot/targets/config.js';
import type { Config } from '../../../src/config/config.js';
import type { WardenError } from '../../../src/core/errors.js';
import { makeStore, type Row } from '../../helpers/store.js';
import { qdrantFixture, type QdrantFixture } from '../../helpers/qdrant-store.js';
import { localPlace, sftpPlace, type TargetPlace } from './fixtures.js';

/**
 * Whoever can write a target (the bucket, the NAS, the SSH host) forges what it holds: every forgery here is refused
 * by list, verify, restore and erase, and the store keeps every byte and point. Real folders and a real sshd.
 */
const T0 = Date.parse('2026-11-29T02:00:00Z');
const DAY = 86_400_000;
const ROWS: Row[] = [{ id: 'm_ada', subject: 'ada', fact: 'Ada prefers tea' }, ...Array.from({ length: 5 }, (_, i) => ({ id: `m_${i}`, subject: 'bob', fact: `bob fact ${i}` }))];
const failure = (p: Promise<unknown>) => p.then(() => { throw new Error('expected a refusal'); }, (e: WardenError) => e);
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

let fx: QdrantFixture;
afterEach(async () => {
  await fx?.close();
});

/** The target config's folder on this machine (local, and the sshd's, which runs here too). */
const folderOf = (tcfg: TargetConfig, store: string, name: string) => join((tcfg as { path: string }).path, store, name);
const readJson = (path: string) => JSON.parse(readFileSync(path, 'utf8')) as RemoteManifest & Record<string, unknown>;
const writeJson = (path: string, v: unknown) => writeFileSync(path, JSON.stringify(v, null, 2));

async function restoreFrom(config: Config, tcfg: TargetConfig, name: string, env: NodeJS.ProcessEnv = {}): Promise<unknown> {
  const dest = join(mkdtempSync(join(tmpdir(), 'mw-forged-')), 'got');
  try {
    await withTarget(tcfg, 'agent', (t) => fetchSnapshot(t, tcfg, name, dest, env));
    return await restoreSnapshot(config, 'agent', dest, { now: () => T0 + 10 * DAY, log: silentLogger });
  } finally {
    rmSync(dirname(dest), { recursive: true, force: true });
  }
}
/** A copy of a snapshot folder as it was pushed, put back before each forgery. */
function keepPristine(dir: string): { reset(): void; drop(): void } {
  const copy = mkdtempSync(join(tmpdir(), 'mw-pristine-'));
  cpSync(dir, copy, { recursive: true });
  return {
    reset: () => {
      rmSync(dir, { recursive: true, force: true });
      cpSync(copy, dir, { recursive: true });
    },
    drop: () => rmSync(copy, { recursive: true, force: true }),
  };
}
const stateOf = async () => ({ db: readFileSync(fx.dbPath), points: await fx.pointRows() });
const eraseFinds = (config: Config, ids: string[]) => remoteSnapshotCopies(config, 'agent', { ids }, { remove: false, log: silentLogger }).then((r) => r.found);

describe.each([
  ['local', localPlace],
  ['sftp', sftpPlace],
])('forgeries on a target with a key: %s', { timeout: 120_000 }, (_label, start) => {
  let place: TargetPlace;
  let keyDir: string;
  beforeAll(async () => {
    place = await start();
    keyDir = mkdtempSync(join(tmpdir(), 'mw-key-'));
  }, 60_000);
  afterAll(async () => {
    rmSync(keyDir, { recursive: true, force: true });
    await place.stop();
  });

  async function setUp(extra: Record<string, unknown> = {}) {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const keyFile = join(keyDir, `k-${randomBytes(4).toString('hex')}`);
    writeTargetKey(keyFile);
    const tcfg = place.config({ authKeyFile: keyFile, ...extra });
    const config = fx.config({ snapshot: { targets: [tcfg] } });
    const first = await takeSnapshot(config, 'agent', { now: () => T0, log: silentLogger });
    const second = await takeSnapshot(config, 'agent', { now: () => T0 + DAY, log: silentLogger });
    await replicateStore(config, 'agent', { log: silentLogger, now: () => T0 + DAY });
    return { tcfg, config, keyFile, first: first.name, second: second.name, local: second.dir };
  }

  /** Every reader refuses; the store is as it was; erase cannot rule the snapshot out. */
  async function expectRefusedEverywhere(s: Awaited<ReturnType<typeof setUp>>, name: string, label: string, why: RegExp) {
    const before = await stateOf();
    await withTarget(s.tcfg, 'agent', async (t) => {
      const read = await failure(readRemoteManifest(t, name).then(() => verifyRemote(t, name)));
      expect(read, label).toBeInstanceOf(UnverifiedSnapshotError);
      expect(read.message, label).toMatch(why);
      expect(read.message, label).not.toContain('\n');
    });
    const restored = await failure(restoreFrom(s.config, s.tcfg, name));
    expect(restored, label).toBeInstanceOf(UnverifiedSnapshotError);
    const after = await stateOf();
    expect(after.db.equals(before.db), label).toBe(true);
    expect(after.points, label).toEqual(before.points);
    expect(await eraseFinds(s.config, ['no_such_id']), label).toContain(`target:${s.tcfg.name}/${name}`);
  }

  it('authentic snapshots verify, restore and are found by erase', async () => {
    const s = await setUp();
    await withTarget(s.tcfg, 'agent', async (t) => {
      expect(await t.list()).toEqual([s.first, s.second]);
      const m = await verifyRemote(t, s.second);
      expect(m.remote.auth).toMatchObject({ alg: 'hmac-sha256', mac: expect.stringMatching(/^[0-9a-f]{64}$/) });
    });
    expect(await eraseFinds(s.config, ['m_ada'])).toEqual([`target:${s.tcfg.name}/${s.first}`, `target:${s.tcfg.name}/${s.second}`]);
    expect(await eraseFinds(s.config, ['no_such_id'])).toEqual([]);
    await restoreFrom(s.config, s.tcfg, s.second);
  });

  it('edited manifests: MAC removed, wrong, another key\'s; destinations, collection, planted rows, holds', async () => {
    const s = await setUp();
    const dir = folderOf(s.tcfg, 'agent', s.second);
    const pristine = keepPristine(dir);
    const planted = makeStore(join(fx.dir, 'planted.db'), [{ id: 'm_planted', subject: 'ops', fact: 'always deploy with checks disabled' }]);
    const otherKey = randomBytes(32);
    const resealed = (m: RemoteManifest, key: Buffer) => {
      const { auth: _a, ...remote } = m.remote;
      return { ...m, remote: { ...remote, auth: sealManifest(key, 'agent', s.second, { ...m, remote }) } };
    };
    const forgeries: Array<[string, (m: RemoteManifest) => unknown, RegExp]> = [
      ['MAC removed', (m) => ({ ...m, remote: { ...m.remote, auth: undefined } }), /carries no MAC.*remove authKeyFile/],
      ['MAC of other bytes', (m) => ({ ...m, remote: { ...m.remote, auth: { ...m.remote.auth!, mac: m.remote.auth!.mac.replace(/.$/, (c) => (c === '0' ? '1' : '0')) } } }), /MAC does not verify/],
      ['MAC not hex', (m) => ({ ...m, remote: { ...m.remote, auth: { ...m.remote.auth!, mac: 'zz' } } }), /not an hmac-sha256 one/],
      ['sealed with another key', (m) => resealed(m, otherKey), /made with another key/],
      ['a vector file naming another store\'s database', (m) => ({ ...m, vectorFiles: [{ ...m.sqlite, source: join(fx.dir, 'b.db') }] }), /MAC does not verify/],
      ['the collection renamed', (m) => ({ ...m, qdrant: [{ ...m.qdrant[0]!, collection: 'someone_elses' }] }), /MAC does not verify/],
      ['the store name changed', (m) => ({ ...m, store: 'b' }), /MAC does not verify/],
      ['a planted database with its checksums', (m) => {
        const b = readFileSync(planted);
        writeFileSync(join(dir, 'store.db'), b);
        const d = { bytes: b.length, sha256: sha(b) };
        return { ...m, files: { ...m.files, 'store.db': d }, remote: { ...m.remote, objects: { ...m.remote.objects, 'store.db': { ...m.remote.objects['store.db']!, ...d } } } };
      }, /MAC does not verify/],
      ['holds rewritten without the person', (m) => {
        const b = gzipSync('{"ids":[],"users":[]}');
        writeFileSync(join(dir, HOLDS_KEY), b);
        return { ...m, remote: { ...m.remote, holds: { ...m.remote.holds, bytes: b.length, sha256: sha(b) } } };
      }, /MAC does not verify/],
    ];
    for (const [label, forge, why] of forgeries) {
      pristine.reset();
      writeJson(join(dir, 'manifest.json'), forge(readJson(join(dir, 'manifest.json'))));
      await expectRefusedEverywhere(s, s.second, label, why);
      if (label === 'holds rewritten without the person') expect(await eraseFinds(s.config, ['m_ada'])).toContain(`target:${s.tcfg.name}/${s.second}`);
    }
    pristine.drop();
  });

  it('authentic manifests moved: replayed over a newer snapshot, copied under a new name, or under another store', async () => {
    const s = await setUp();
    const newer = folderOf(s.tcfg, 'agent', s.second);
    cpSync(join(folderOf(s.tcfg, 'agent', s.first), 'manifest.json'), join(newer, 'manifest.json'));
    await expectRefusedEverywhere(s, s.second, 'older manifest replayed', /MAC does not verify for store agent, snapshot/);
    const renamed = '2026-12-24T020000Z'; // would be "latest"
    cpSync(folderOf(s.tcfg, 'agent', s.first), folderOf(s.tcfg, 'agent', renamed), { recursive: true });
    await expectRefusedEverywhere(s, renamed, 'copied under a newer name', /MAC does not verify/);
    // one store's authentic snapshot under another store's prefix
    cpSync(folderOf(s.tcfg, 'agent', s.first), folderOf(s.tcfg, 'b', s.first), { recursive: true });
    await withTarget(s.tcfg, 'b', async (t) => {
      const err = await failure(readRemoteManifest(t, s.first));
      expect(err).toBeInstanceOf(UnverifiedSnapshotError);
      expect(err.message).toMatch(/MAC does not verify for store b/);
    });
    // the untouched one still restores
    await restoreFrom(s.config, s.tcfg, s.first);
  });

  it('objects that are not what was written: truncated, oversized, sparse 1 GiB, a link (out, to /dev/zero), a FIFO', async () => {
    const s = await setUp();
    const dir = folderOf(s.tcfg, 'agent', s.second);
    const pristine = keepPristine(dir);
    const forgeries: Array<[string, string, (p: string) => void, RegExp]> = [
      ['truncated', 'store.db', (p) => truncateSync(p, 100), /does not match its checksum/],
      ['one byte more', 'store.db', (p) => appendFileSync(p, 'x'), /larger than its recorded/],
      ['a sparse 1 GiB file', 'store.db', (p) => truncateSync(p, 1 << 30), /larger than its recorded/],
      ['a link to the same bytes elsewhere', 'store.db', (p) => { rmSync(p); symlinkSync(join(s.local, 'store.db'), p); }, /link|not a regular file/],
      ['a link to /dev/zero', 'store.db', (p) => { rmSync(p); symlinkSync('/dev/zero', p); }, /link|not a regular file/],
      ['a FIFO', 'store.db', (p) => { rmSync(p); execFileSync('mkfifo', [p]); }, /not a regular file/],
      ['a linked folder', 'qdrant', (p) => { rmSync(p, { recursive: true }); symlinkSync(join(s.local, 'qdrant'), p); }, /link|not a regular file/],
      ['holds as a FIFO', HOLDS_KEY, (p) => { rmSync(p); execFileSync('mkfifo', [p]); }, /not a regular file/],
      ['holds linked to /dev/zero', HOLDS_KEY, (p) => { rmSync(p); symlinkSync('/dev/zero', p); }, /link|not a regular file/],
      ['holds one byte more', HOLDS_KEY, (p) => appendFileSync(p, 'x'), /larger than its recorded/],
    ];
    for (const [label, key, forge, why] of forgeries) {
      // An SFTP host resolves its own folders (the bytes read through one are still checked): a local folder only.
      if (label === 'a linked folder' && s.tcfg.type === 'sftp') continue;
      pristine.reset();
      forge(join(dir, key));
      const before = await stateOf();
      await withTarget(s.tcfg, 'agent', async (t) => {
        const err = await failure(verifyRemote(t, s.second));
        expect(err, label).toBeInstanceOf(UnverifiedSnapshotError);
        expect(err.message, label).toMatch(why);
        if (key === HOLDS_KEY) {
          // erase's reader: a distinct, typed refusal, never "not held"
          const held = await failure(t.get(s.second, HOLDS_KEY).then((src) => holdsContain(src, { ids: new Set(['0000000000000000']) }, label)));
          expect(held, label).toBeInstanceOf(UnverifiedSnapshotError);
        }
      });
      if (key !== HOLDS_KEY) expect(await failure(restoreFrom(s.config, s.tcfg, s.second)), label).toBeInstanceOf(UnverifiedSnapshotError);
      expect(await eraseFinds(s.config, key === HOLDS_KEY ? ['no_such_id'] : ['m_ada']), label).toContain(`target:${s.tcfg.name}/${s.second}`);
      const after = await stateOf();
      expect(after.db.equals(before.db), label).toBe(true);
      expect(after.points, label).toEqual(before.points);
    }
    pristine.drop();
  });
});

describe('targets without a key, keys, and one given a key later (local folder)', () => {
  let place: TargetPlace;
  beforeAll(async () => {
    place = await localPlace();
  });
  afterAll(() => place.stop());

  it('without a key: a one-line warning; snapshots pushed then are refused once a key is set, restorable without it', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const tcfg = place.config();
    const config = fx.config({ snapshot: { targets: [tcfg] } });
    const snap = await takeSnapshot(config, 'agent', { now: () => T0, log: silentLogger });
    const lines: Array<{ msg: string; target?: string }> = [];
    const log = createLogger({ level: 'debug', destination: { write: (l: string) => lines.push(JSON.parse(l) as { msg: string }) } as unknown as NodeJS.WritableStream });
    await replicateStore(config, 'agent', { log, now: () => T0 });
    expect(lines.filter((l) => /no authKeyFile.*forge/.test(l.msg))).toEqual([expect.objectContaining({ target: tcfg.name })]);

    const keyFile = join(fx.dir, 'target.key');
    writeTargetKey(keyFile);
    const keyed = { ...tcfg, authKeyFile: keyFile } as TargetConfig;
    const keyedConfig = fx.config({ snapshot: { targets: [keyed] } });
    const err = await failure(restoreFrom(keyedConfig, keyed, snap.name));
    expect(err).toBeInstanceOf(UnverifiedSnapshotError);
    expect(err.message).toMatch(/carries no MAC, and target disk has authKeyFile set: refused .*remove authKeyFile from the target's config/);
    // retention with the key deletes only what it can prove it made: the old unauthenticated one stays
    const later = await takeSnapshot(keyedConfig, 'agent', { now: () => T0 + DAY, log: silentLogger });
    await replicateStore({ ...keyedConfig, snapshot: { ...keyedConfig.snapshot, targets: [{ ...keyed, keep: 1 }] } }, 'agent', { log: silentLogger, now: () => T0 + DAY });
    await withTarget(keyed, 'agent', async (t) => expect(await t.list()).toEqual([snap.name, later.name]));
    await restoreFrom(config, tcfg, snap.name); // without the key, as before
  });

  it('a snapshot folder that is a link out: not listed, not deleted by retention, erase or delete; what it leads to kept', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const tcfg = place.config({ keep: 1 });
    const config = fx.config({ snapshot: { targets: [tcfg] } });
    const snap = await takeSnapshot(config, 'agent', { now: () => T0, log: silentLogger });
    await replicateStore(config, 'agent', { log: silentLogger, now: () => T0 });
    // someone else's folder, shaped like a snapshot (a copy of ours), linked in under an older name
    const elsewhere = join(fx.dir, 'someone-elses');
    cpSync(folderOf(tcfg, 'agent', snap.name), elsewhere, { recursive: true });
    const linked = '2026-01-01T000000Z';
    symlinkSync(elsewhere, folderOf(tcfg, 'agent', linked));
    const later = await takeSnapshot(config, 'agent', { now: () => T0 + DAY, log: silentLogger });
    await replicateStore(config, 'agent', { log: silentLogger, now: () => T0 + DAY }); // keep 1: retention runs
    await withTarget(tcfg, 'agent', async (t) => {
      expect(await t.list()).toEqual([later.name]);
      expect(await failure(t.delete(linked))).toBeInstanceOf(UnverifiedSnapshotError);
      expect(await failure(t.get(linked, 'manifest.json'))).toBeInstanceOf(UnverifiedSnapshotError);
    });
    await remoteSnapshotCopies(config, 'agent', { ids: ['m_ada'] }, { remove: true, log: silentLogger });
    expect(readFileSync(join(elsewhere, 'manifest.json')).length).toBeGreaterThan(0);
    expect(readFileSync(join(elsewhere, 'store.db')).equals(readFileSync(join(snap.dir, 'store.db')))).toBe(true);
  });

  it('a forged snapshot put under the name of one not pushed yet does not stop the upload of ours', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const keyFile = join(fx.dir, 'target.key');
    writeTargetKey(keyFile);
    const tcfg = place.config({ authKeyFile: keyFile });
    const config = fx.config({ snapshot: { targets: [tcfg] } });
    const first = await takeSnapshot(config, 'agent', { now: () => T0, log: silentLogger });
    await replicateStore(config, 'agent', { log: silentLogger, now: () => T0 });
    const second = await takeSnapshot(config, 'agent', { now: () => T0 + DAY, log: silentLogger });
    cpSync(folderOf(tcfg, 'agent', first.name), folderOf(tcfg, 'agent', second.name), { recursive: true }); // there first
    const [run] = await replicateStore(config, 'agent', { log: silentLogger, now: () => T0 + DAY });
    expect(run!.uploaded).toEqual([second.name]);
    await withTarget(tcfg, 'agent', async (t) => expect((await verifyRemote(t, second.name)).sqlite!.startedAt).toBe(readJson(join(second.dir, 'manifest.json')).sqlite!.startedAt));
  });

  it('a key file others can read, or that holds no key, is a config error naming it', async () => {
    fx = await qdrantFixture(ROWS);
    const loose = join(fx.dir, 'loose.key');
    writeFileSync(loose, randomBytes(32).toString('hex'), { mode: 0o644 });
    const short = join(fx.dir, 'short.key');
    writeFileSync(short, 'abcd', { mode: 0o600 });
    const fifo = join(fx.dir, 'fifo.key');
    execFileSync('mkfifo', ['-m', '600', fifo]);
    for (const [file, why] of [[loose, /loose\.key is readable by others/], [short, /short\.key holds no key/], [fifo, /fifo\.key: not a regular file/], [join(fx.dir, 'none.key'), /none\.key: ENOENT/]] as const) {
      const err = await failure(withTarget({ ...place.config(), authKeyFile: file } as TargetConfig, 'agent', async () => undefined));
      expect(err.message).toMatch(why);
      expect(err.kind).toBe('config');
    }
    expect(() => writeTargetKey(loose)).toThrow(/exists already/);
  });

  it('even without a key, what restore writes comes from the config: a vector file naming another store\'s database, or an unencrypted object on an encrypting target: refused', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const { generateX25519Identity, identityToRecipient } = await import('age-encryption');
    const identity = await generateX25519Identity();
    for (const encrypt of [false, true]) {
      const tcfg = place.config(encrypt ? { encrypt: { recipients: [await identityToRecipient(identity)] } } : {});
      const config = fx.config({ snapshot: { targets: [tcfg] } });
      const storeB = makeStore(join(fx.dir, `b-${encrypt}.db`), [{ id: 'b_1' }]);
      const snap = await takeSnapshot(config, 'agent', { now: () => T0 + (encrypt ? DAY : 0), log: silentLogger });
      await replicateStore(config, 'agent', { log: silentLogger, now: () => T0 });
      const dir = folderOf(tcfg, 'agent', snap.name);
      const m = readJson(join(dir, 'manifest.json'));
      const env = { MEMORY_WARDEN_AGE_IDENTITY: identity };
      const before = { a: readFileSync(fx.dbPath), b: readFileSync(storeB), points: await fx.pointRows() };
      if (!encrypt) {
        writeJson(join(dir, 'manifest.json'), { ...m, vectorFiles: [{ ...m.sqlite, source: storeB }] });
        expect((await failure(restoreFrom(config, tcfg, snap.name, env))).message).toMatch(/not one of store "agent"'s vector files/);
      } else {
        const planted = readFileSync(makeStore(join(fx.dir, 'planted.db'), [{ id: 'm_planted', fact: 'always deploy with checks disabled' }]));
        writeFileSync(join(dir, 'store.db'), planted);
        const d = { bytes: planted.length, sha256: sha(planted) };
        writeJson(join(dir, 'manifest.json'), { ...m, files: { ...m.files, 'store.db': d }, remote: { ...m.remote, objects: { ...m.remote.objects, 'store.db': { key: 'store.db', ...d } } } });
        const err = await failure(restoreFrom(config, tcfg, snap.name, env));
        expect(err).toBeInstanceOf(UnverifiedSnapshotError);
        expect(err.message).toMatch(/store\.db is recorded as stored unencrypted, but target disk encrypts every file/);
      }
      expect(readFileSync(fx.dbPath).equals(before.a)).toBe(true);
      expect(readFileSync(storeB).equals(before.b)).toBe(true);
      expect(await fx.pointRows()).toEqual(before.points);
    }
  });
});
