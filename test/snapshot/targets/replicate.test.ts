import { gunzipSync } from 'node:zlib';
import { chmodSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateX25519Identity, identityToRecipient } from 'age-encryption';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/log/logger.js';
import { takeSnapshot } from '../../../src/snapshot/create.js';
import { readManifest } from '../../../src/snapshot/manifest.js';
import { verifySnapshot } from '../../../src/snapshot/restore.js';
import { eraseKey } from '../../../src/erase/ledger.js';
import { idMac, userMac, type Holds } from '../../../src/snapshot/targets/holds.js';
import { fetchSnapshot, replicateStore, verifyRemote, withTarget } from '../../../src/snapshot/targets/replicate.js';
import { readAll, readRemoteManifest } from '../../../src/snapshot/targets/remote-manifest.js';
import { remoteSnapshotCopies } from '../../../src/erase/targets.js';
import type { TargetConfig } from '../../../src/snapshot/targets/config.js';
import type { Config } from '../../../src/config/config.js';
import type { WardenError } from '../../../src/core/errors.js';
import { qdrantFixture, type QdrantFixture } from '../../helpers/qdrant-store.js';
import type { Row } from '../../helpers/store.js';
import { localPlace, motoPlace, s3Place, s3rverPlace, sftpPlace, type TargetPlace } from './fixtures.js';

const T0 = Date.parse('2026-11-29T02:00:00Z');
const SECRET = 'Ada prefers tea with lemon, never coffee';
const ROWS: Row[] = [{ id: 'm_ada', subject: 'ada', fact: SECRET }, ...Array.from({ length: 8 }, (_, i) => ({ id: `m_${i}`, subject: 'bob', fact: `fact number ${i}` }))];
const failure = (p: Promise<unknown>) => p.then(() => { throw new Error('expected a failure'); }, (e: WardenError) => e);

let fx: QdrantFixture;
afterEach(async () => {
  await fx?.close();
});

const withTargets = (targets: TargetConfig[]): Config => fx.config({ snapshot: { targets } });
const snapAt = (config: Config, at: number) => takeSnapshot(config, 'agent', { now: () => at, log: silentLogger });
const replicate = (config: Config) => replicateStore(config, 'agent', { log: silentLogger, now: () => T0 });

describe.each([
  ['local', localPlace],
  ['s3', () => s3Place()],
  ['s3 (s3rver)', s3rverPlace],
  ['s3 (moto)', motoPlace],
  ['sftp', sftpPlace],
])('snapshots off the machine: %s', (_label, start) => {
  let place: TargetPlace;
  beforeAll(async () => {
    place = await start();
  }, 60_000);
  afterAll(() => place.stop());

  it('uploads each snapshot whole, manifest last; fetched back it is the same verified folder', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const tcfg = place.config();
    const config = withTargets([tcfg]);
    const local = await snapAt(config, T0);
    const [run] = await replicate(config);
    expect(run).toMatchObject({ target: tcfg.name, uploaded: [local.name], pruned: [] });
    expect((await replicate(config))[0]!.uploaded).toEqual([]); // already there: nothing sent twice
    await withTarget(tcfg, 'agent', async (t) => {
      expect(await t.list()).toEqual([local.name]);
      const m = await verifyRemote(t, local.name);
      expect(m.files).toEqual(readManifest(local.dir).files);
      const dest = join(mkdtempSync(join(tmpdir(), 'mw-fetch-')), 'got');
      await fetchSnapshot(t, tcfg, local.name, dest);
      expect((await verifySnapshot(dest)).files).toEqual(m.files);
      for (const rel of Object.keys(m.files)) expect(readFileSync(join(dest, rel)).equals(readFileSync(join(local.dir, rel)))).toBe(true);
      rmSync(dest, { recursive: true, force: true });
    });
  });

  it('encrypted with age: the target never holds the text; restorable only with the identity', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const identity = await generateX25519Identity();
    const other = await generateX25519Identity();
    const tcfg = place.config({ encrypt: { recipients: [await identityToRecipient(identity), await identityToRecipient(other)] } });
    const config = withTargets([tcfg]);
    const local = await snapAt(config, T0);
    expect(readFileSync(join(local.dir, 'store.db')).includes(Buffer.from(SECRET))).toBe(true); // the plaintext has it
    await replicate(config);
    await withTarget(tcfg, 'agent', async (t) => {
      const m = await readRemoteManifest(t, local.name);
      for (const [rel, o] of Object.entries(m.remote.objects)) {
        expect(o).toMatchObject({ key: `${rel}.age`, encrypted: { recipients: tcfg.encrypt!.recipients } });
        const stored = await readAll(await t.get(local.name, o.key), 1 << 30);
        expect(stored.subarray(0, 21).toString()).toBe('age-encryption.org/v1');
        expect(stored.includes(Buffer.from(SECRET))).toBe(false);
        expect(stored.includes(Buffer.from('Ada prefers'))).toBe(false);
      }
      // Erase finds it through keyed hashes of ids and users, not through the text.
      const holds = JSON.parse(gunzipSync(await readAll(await t.get(local.name, 'holds.json.gz'))).toString('utf8')) as Holds;
      const key = eraseKey(config);
      expect(holds.ids).toContain(idMac(key, 'm_ada'));
      expect(holds.users).toContain(userMac(key, 'ada'));
      expect(JSON.stringify(holds)).not.toContain('m_ada');

      const dir = mkdtempSync(join(tmpdir(), 'mw-fetch-'));
      expect((await failure(fetchSnapshot(t, tcfg, local.name, join(dir, 'a'), {}))).message).toMatch(/encrypted; set MEMORY_WARDEN_AGE_IDENTITY/);
      const stranger = await generateX25519Identity();
      expect((await failure(fetchSnapshot(t, tcfg, local.name, join(dir, 'b'), { MEMORY_WARDEN_AGE_IDENTITY: stranger }))).message).toMatch(/decrypt .*\.age: /);
      const idFile = join(dir, 'identity.txt');
      writeFileSync(idFile, `# created: test\n${other}\n`, { mode: 0o644 });
      const fromFile = { ...tcfg, encrypt: { ...tcfg.encrypt!, identityFile: idFile } };
      expect((await failure(fetchSnapshot(t, fromFile, local.name, join(dir, 'c'), {}))).message).toMatch(/readable by others.*chmod 600/);
      chmodSync(idFile, 0o600);
      await fetchSnapshot(t, fromFile, local.name, join(dir, 'd'), {}); // the second recipient's identity, from a file
      await fetchSnapshot(t, tcfg, local.name, join(dir, 'e'), { MEMORY_WARDEN_AGE_IDENTITY: identity });
      for (const d of ['d', 'e']) expect(readFileSync(join(dir, d, 'store.db')).equals(readFileSync(join(local.dir, 'store.db')))).toBe(true);
      rmSync(dir, { recursive: true, force: true });
    });
  });

  it('keeps `keep` scheduled snapshots per target, independently of the local keep', async () => {
    fx = await qdrantFixture(ROWS.slice(0, 3));
    await fx.seedPoints(ROWS.slice(0, 3));
    const tcfg = place.config({ keep: 2 });
    const config = withTargets([tcfg]);
    const names: string[] = [];
    for (let i = 0; i < 3; i++) {
      names.push((await snapAt(config, T0 + i * 86_400_000)).name);
      await replicate(config);
    }
    await withTarget(tcfg, 'agent', async (t) => expect(await t.list()).toEqual(names.slice(1)));
  });
});

describe('snapshots off the machine: storage faults (loopback S3)', () => {
  let place: TargetPlace;
  beforeAll(async () => {
    place = await s3Place();
  });
  afterAll(() => place.stop());
  const objectsOf = (tcfg: TargetConfig, name: string) => [...place.s3!.objects.keys()].filter((k) => k.startsWith(`${(tcfg as { prefix: string }).prefix}agent/${name}/`));

  it('a 503 on the manifest upload: nothing looks complete, nothing is left, the next run uploads it', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const tcfg = place.config();
    const config = withTargets([tcfg]);
    const local = await snapAt(config, T0);
    place.s3!.faults.push({ match: (r) => r.method === 'PUT' && r.key.endsWith('/manifest.json'), action: { status: 503 } });
    const err = await failure(replicate(config));
    expect(err.transient).toBe(true);
    expect(err.message).toMatch(/target bucket: upload .* HTTP 503/);
    expect(objectsOf(tcfg, local.name)).toEqual([]);
    await withTarget(tcfg, 'agent', async (t) => expect(await t.list()).toEqual([]));
    expect((await replicate(config))[0]!.uploaded).toEqual([local.name]);
    expect(objectsOf(tcfg, local.name).length).toBe(5); // claim, store.db, one collection, holds, manifest
  });

  it('storage that reports another checksum for a file: not counted, next run retries', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const tcfg = place.config();
    const config = withTargets([tcfg]);
    const local = await snapAt(config, T0);
    place.s3!.faults.push({ match: (r) => r.method === 'PUT' && r.key.endsWith('/store.db'), action: 'wrong-checksum' });
    expect((await failure(replicate(config))).transient).toBe(true);
    await withTarget(tcfg, 'agent', async (t) => expect(await t.list()).toEqual([]));
    expect((await replicate(config))[0]!.uploaded).toEqual([local.name]);
  });

  it('an object corrupted on the server: verify and fetch fail naming it; the snapshot is not restored from', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const tcfg = place.config();
    const config = withTargets([tcfg]);
    const local = await snapAt(config, T0);
    await replicate(config);
    const key = objectsOf(tcfg, local.name).find((k) => k.endsWith('/store.db'))!;
    place.s3!.corrupt(key);
    await withTarget(tcfg, 'agent', async (t) => {
      expect((await failure(verifyRemote(t, local.name))).message).toMatch(/bucket:.*\/store\.db does not match its checksum/);
      const dest = join(mkdtempSync(join(tmpdir(), 'mw-fetch-')), 'got');
      expect((await failure(fetchSnapshot(t, tcfg, local.name, dest))).message).toMatch(/store\.db.*does not match its checksum/);
    });
  });

  it('one target down does not stop the others; the run fails as transient afterwards', async () => {
    fx = await qdrantFixture(ROWS.slice(0, 2));
    const good = place.config();
    const down = { ...place.config(), name: 'down', endpoint: 'http://127.0.0.1:9' } as TargetConfig;
    const config = withTargets([down, good]);
    const local = await snapAt(config, T0);
    const err = await failure(replicate(config));
    expect(err.transient).toBe(true);
    expect(err.message).toMatch(/target down/);
    await withTarget(good, 'agent', async (t) => expect(await t.list()).toEqual([local.name]));
    expect(readdirSync(join(fx.dir, 'backups', 'agent'))).toContain(local.name);
  });
});

describe('erase over targets (through keyed holds)', () => {
  let place: TargetPlace;
  beforeAll(async () => {
    place = await localPlace();
  });
  afterAll(() => place.stop());
  const look = (config: Config, erased: { ids: string[]; user?: string }, remove = false) =>
    remoteSnapshotCopies(config, 'agent', erased, { remove, log: silentLogger });

  it('finds by id or user, not others; cannot rule out another key or an unreachable target; deletes with remove', async () => {
    fx = await qdrantFixture(ROWS);
    const tcfg = place.config();
    const config = withTargets([tcfg]);
    const local = await snapAt(config, T0);
    await replicate(config);
    const label = `target:disk/${local.name}`;
    expect((await look(config, { ids: ['m_ada'] })).found).toEqual([label]);
    expect((await look(config, { ids: ['m_3', 'no_such'] })).found).toEqual([label]);
    expect((await look(config, { ids: [], user: 'ada' })).found).toEqual([label]);
    expect((await look(config, { ids: ['no_such'], user: 'carol' })).found).toEqual([]);
    expect((await look(config, { ids: ['m_ada '], user: 'Ada' })).found).toEqual([]); // exact ids and users only

    // Another installation (its own state db and key): the holds can no longer be read, so the snapshot cannot be ruled out.
    const other = { ...config, stateDb: join(fx.dir, 'other', 'state.db') };
    expect(await look(other, { ids: ['no_such'] })).toEqual({ found: [label], deleted: [], unverified: [label], cleaned: [] });

    const gone = { ...tcfg, path: join(fx.dir, 'unmounted') } as TargetConfig;
    expect((await look(withTargets([gone]), { ids: ['m_ada'] })).found).toEqual([expect.stringMatching(/^target:disk \(unreachable: .*not mounted/)]);

    expect(await look(config, { ids: ['m_ada'] }, true)).toEqual({ found: [label], deleted: [label], unverified: [], cleaned: [] });
    await withTarget(tcfg, 'agent', async (t) => expect(await t.list()).toEqual([]));
  });
});
