import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import YAML from 'yaml';
import { writeFileSync } from 'node:fs';
import { generateX25519Identity, identityToRecipient } from 'age-encryption';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CLI } from '../../helpers/cli.js';
import { ids, makeStore, type Row } from '../../helpers/store.js';
import { qdrantFixture, type QdrantFixture } from '../../helpers/qdrant-store.js';
import { s3Place, s3rverPlace, sftpPlace, type TargetPlace } from './fixtures.js';

const SECRET = 'Ada keeps her spare key under the blue flowerpot';
const ROWS: Row[] = [{ id: 'm_ada', subject: 'ada', fact: SECRET }, ...Array.from({ length: 6 }, (_, i) => ({ id: `m_${i}`, subject: 'bob', fact: `bob fact ${i}` }))];

let fx: QdrantFixture;
afterEach(async () => {
  await fx?.close();
});

/** The built CLI in a child process, asynchronously: the S3 and Qdrant test servers live in this process. */
function start(args: string[], env: Record<string, string> = {}) {
  const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, LOG_LEVEL: 'silent', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string; json(): any }>((resolve) =>
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr, json: () => { try { return JSON.parse(stdout); } catch { throw new Error(`no JSON from ${args.join(' ')} (exit ${code}): ${stderr}`); } } })),
  );
  return { child, done };
}
const cli = (args: string[], env: Record<string, string> = {}) => start(args, env).done;

/** A target config as a user writes it: credentials as ${ENV} references, their values in `env`. */
function asUserWrites(target: Record<string, unknown>): { target: Record<string, unknown>; env: Record<string, string> } {
  const env: Record<string, string> = {};
  const out = { ...target };
  for (const f of ['accessKeyId', 'secretAccessKey']) {
    if (typeof out[f] === 'string') {
      env[`MW_TEST_${f.toUpperCase()}`] = out[f] as string;
      out[f] = `\${MW_TEST_${f.toUpperCase()}}`;
    }
  }
  return { target: out, env };
}

/** Another machine: its own folder, an empty store, a new state db, no snapshot root; the same target and Qdrant. */
function freshMachine(raw: Record<string, any>): { dir: string; db: string; config: string } {
  const dir = mkdtempSync(join(tmpdir(), 'mw-fresh-'));
  const db = makeStore(join(dir, 'memory.db'));
  const config = join(dir, 'warden.yaml');
  writeFileSync(config, YAML.stringify({ ...raw, stateDb: join(dir, 'state.db'), snapshot: { ...raw.snapshot, root: join(dir, 'backups') }, stores: { agent: { ...raw.stores.agent, db } } }));
  return { dir, db, config };
}

describe.each([
  ['s3, encrypted', () => s3Place(), true],
  ['s3 on s3rver', s3rverPlace, false],
  ['sftp', sftpPlace, false],
])('off the machine, through the CLI: %s', { timeout: 120_000 }, (_label, startPlace, encrypted) => {
  let place: TargetPlace;
  beforeAll(async () => {
    place = await startPlace();
  }, 60_000);
  afterAll(() => place.stop());

  it('a fresh machine restores from the target alone: store and vectors, both', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const identity = await generateX25519Identity();
    const extra = encrypted ? { encrypt: { recipients: [await identityToRecipient(identity)] } } : {};
    const { target, env } = asUserWrites({ ...place.config(extra), name: 'off' });
    const raw = fx.raw({ snapshot: { targets: [target] } });
    const configA = join(fx.dir, 'a.yaml');
    writeFileSync(configA, YAML.stringify(raw));

    const taken = await cli(['run', 'snapshot', '--config', configA, '--store', 'agent', '--now', '2026-11-29T02:00:00Z', '--json'], env);
    expect(taken.code, taken.stderr).toBe(0);
    expect(taken.json().targets).toEqual([expect.objectContaining({ target: 'off', uploaded: ['2026-11-29T020000Z'] })]);
    expect(taken.stdout + taken.stderr).not.toContain(env.MW_TEST_SECRETACCESSKEY ?? 'no-secret-here');

    // The machine is lost: its store, its snapshots, its state db; the vectors are gone too. What the operator
    // backed up besides the target: the erase ledger (the state db and the erase key).
    const ledger = join(fx.dir, 'ledger-backup');
    mkdirSync(ledger);
    for (const f of ['state.db', 'erase.key']) copyFileSync(join(fx.dir, f), join(ledger, f));
    rmSync(join(fx.dir, 'backups'), { recursive: true, force: true });
    unlinkSync(fx.dbPath);
    const gone = await fetch(`${fx.q.url}/collections/${fx.collections[0]}`, { method: 'DELETE', headers: fx.q.apiKey ? { 'api-key': fx.q.apiKey } : {} });
    expect(gone.ok).toBe(true);
    await fx.q.createCollection(fx.collections[0]!);

    const b = freshMachine(raw);
    const listed = await cli(['snapshots', 'list', '--config', b.config, '--store', 'agent', '--target', 'off', '--verify', '--json'], env);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.json().snapshots).toEqual([expect.objectContaining({ name: '2026-11-29T020000Z', verified: 'ok', rows: ROWS.length })]);

    const idEnv: Record<string, string> = encrypted ? { MEMORY_WARDEN_AGE_IDENTITY: identity } : {};
    if (encrypted) {
      const refused = await cli(['restore', 'latest', '--config', b.config, '--store', 'agent', '--target', 'off', '--force'], env);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toMatch(/encrypted; set MEMORY_WARDEN_AGE_IDENTITY/);
      expect(ids(b.db)).toEqual([]);
    }
    // Without the ledger the restore cannot keep out who was erased since: refused, nothing changed.
    const noLedger = await cli(['restore', 'latest', '--config', b.config, '--store', 'agent', '--target', 'off', '--force'], { ...env, ...idEnv });
    expect(noLedger.code).toBe(2);
    expect(noLedger.stderr).toMatch(/cannot re-apply erasures: there is no state db at .*--without-erase-ledger/);
    expect(ids(b.db)).toEqual([]);
    for (const f of ['state.db', 'erase.key']) copyFileSync(join(ledger, f), join(b.dir, f));
    const restored = await cli(['restore', 'latest', '--config', b.config, '--store', 'agent', '--target', 'off', '--force', '--json'], { ...env, ...idEnv });
    expect(restored.code, restored.stderr).toBe(0);
    expect(restored.json().from).toBe('off:2026-11-29T020000Z');
    expect(ids(b.db)).toEqual(ROWS.map((r) => r.id).sort());
    expect(await fx.pointRows()).toEqual(ROWS.map((r) => r.id).sort());
    // The download folder is gone; only the pre-restore snapshot of the empty store is left locally.
    expect(readdirSync(join(b.dir, 'backups', 'agent')).filter((n) => n.startsWith('.partial-') || n.startsWith('.fetch-'))).toEqual([]);
    rmSync(b.dir, { recursive: true, force: true });
  });

  it('erase finds the remote snapshot holding the user (through keyed hashes), and --snapshots deletes it', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const identity = await generateX25519Identity();
    const extra = encrypted ? { encrypt: { recipients: [await identityToRecipient(identity)] } } : {};
    const { target, env } = asUserWrites({ ...place.config(extra), name: 'off' });
    const config = join(fx.dir, 'a.yaml');
    writeFileSync(config, YAML.stringify(fx.raw({ snapshot: { targets: [target] } })));
    const stateEnv = { ...env, MEMORY_WARDEN_STATE: join(fx.dir, 'state.db') };
    expect((await cli(['run', 'snapshot', '--config', config, '--store', 'agent', '--now', '2026-11-29T02:00:00Z'], stateEnv)).code).toBe(0);

    const dry = await cli(['erase', '--config', config, '--store', 'agent', '--user', 'ada', '--dry-run', '--json'], stateEnv);
    expect(dry.json().snapshots.found).toContain('target:off/2026-11-29T020000Z');
    const kept = await cli(['erase', '--config', config, '--store', 'agent', '--user', 'bob-nobody', '--json'], stateEnv);
    expect(kept.json().snapshots.found.filter((f: string) => f.startsWith('target:'))).toEqual([]); // nobody's: not found
    const done = await cli(['erase', '--config', config, '--store', 'agent', '--user', 'ada', '--snapshots', '--json'], stateEnv);
    const receipt = done.json();
    expect(receipt.snapshots.deleted).toContain('target:off/2026-11-29T020000Z');
    expect(receipt.places).toContainEqual({ place: 'targets:remote snapshots', count: 1 });
    const listed = await cli(['snapshots', 'list', '--config', config, '--store', 'agent', '--target', 'off', '--json'], stateEnv);
    expect(listed.json().snapshots).toEqual([]);
  });
});

describe('credentials', { timeout: 60_000 }, () => {
  it('come from the environment, and no log line, error or printed config shows them', async () => {
    const place = await s3Place();
    try {
      fx = await qdrantFixture(ROWS.slice(0, 2));
      const secret = 'wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY';
      const { target } = asUserWrites({ ...place.config(), name: 'off' });
      const config = join(fx.dir, 'a.yaml');
      writeFileSync(config, YAML.stringify(fx.raw({ snapshot: { targets: [target] } })));
      const env = { MW_TEST_ACCESSKEYID: place.s3!.accessKeyId, MW_TEST_SECRETACCESSKEY: secret, LOG_LEVEL: 'debug', MEMORY_WARDEN_STATE: join(fx.dir, 'state.db') };
      const runs = [
        await cli(['run', 'snapshot', '--config', config, '--store', 'agent', '--now', '2026-11-29T02:00:00Z'], env),
        await cli(['snapshots', 'push', '--config', config, '--store', 'agent'], { ...env, MW_TEST_ACCESSKEYID: 'AKWRONGKEY0000' }),
        await cli(['config', '--config', config], env),
      ];
      expect(runs.map((r) => r.code)).toEqual([0, 2, 0]);
      expect(runs[1]!.stderr).toMatch(/HTTP 403/);
      for (const r of runs) expect(r.stdout + r.stderr).not.toContain(secret);
      writeFileSync(config, YAML.stringify(fx.raw({ snapshot: { targets: [{ ...target, secretAccessKey: secret }] } })));
      const literal = await cli(['snapshots', 'push', '--config', config, '--store', 'agent'], env);
      expect(literal.code).toBe(2);
      expect(literal.stderr).toMatch(/snapshot.targets.0.secretAccessKey: a credential goes in the environment/);
      expect(literal.stderr).not.toContain(secret);
    } finally {
      await place.stop();
    }
  });
});

const BIG = Array.from({ length: 2600 }, (_, i) => ({ id: `m_${i}`, subject: 's', fact: `${i} `.repeat(1500).slice(0, 4000) }));

describe('kill -9 during an upload', { timeout: 120_000 }, () => {
  let s3: TargetPlace;
  let s3NoList: TargetPlace;
  let rver: TargetPlace;
  let sftp: TargetPlace;
  beforeAll(async () => {
    s3 = await s3Place();
    s3NoList = await s3Place({ lacks: ['list-uploads'] });
    rver = await s3rverPlace();
    sftp = await sftpPlace();
  }, 60_000);
  afterAll(async () => {
    await s3.stop();
    await s3NoList.stop();
    await rver.stop();
    await sftp.stop();
  });

  it('SFTP: the temp file is not a snapshot; the next run removes it and uploads whole', async () => {
    fx = await qdrantFixture(BIG);
    const target = { ...sftp.config(), name: 'box' } as Record<string, unknown> & { path: string };
    const config = join(fx.dir, 'a.yaml');
    writeFileSync(config, YAML.stringify(fx.raw({ snapshot: { targets: [target] } })));
    const env = { MEMORY_WARDEN_STATE: join(fx.dir, 'state.db') };
    const remote = join(target.path, 'agent', '2026-11-29T020000Z');
    const run = start(['run', 'snapshot', '--config', config, '--store', 'agent', '--now', '2026-11-29T02:00:00Z'], env);
    let exited = false;
    void run.done.then(() => (exited = true));
    // Killed the moment the store file's temp file shows on the server (sshd is on this machine: its folder is
    // readable here); claim.json, written first, is there already.
    let seen: string | undefined;
    while (!seen && !exited) {
      seen = existsSync(remote) ? readdirSync(remote).find((n) => n.startsWith('.tmp-') && n.endsWith('-store.db')) : undefined;
      if (!seen) await new Promise((r) => setTimeout(r, 2));
    }
    run.child.kill('SIGKILL');
    expect(seen, 'the upload finished before a temp file was seen').toBeDefined();
    expect((await run.done).signal).toBe('SIGKILL');
    expect(existsSync(join(remote, 'manifest.json'))).toBe(false);
    expect((await cli(['snapshots', 'list', '--config', config, '--store', 'agent', '--target', 'box', '--json'], env)).json().snapshots).toEqual([]);

    const pushed = await cli(['snapshots', 'push', '--config', config, '--store', 'agent', '--json'], env);
    expect(pushed.code, pushed.stderr).toBe(0);
    expect(pushed.json().targets[0]).toMatchObject({ cleaned: [`box:2026-11-29T020000Z/${seen}`, 'box:2026-11-29T020000Z/'], uploaded: ['2026-11-29T020000Z'] });
    expect(readdirSync(remote).filter((n) => n.startsWith('.tmp-'))).toEqual([]);
    expect((await cli(['snapshots', 'verify', '--config', config, '--store', 'agent', '--target', 'box', '--json'], env)).json().snapshots)
      .toEqual([expect.objectContaining({ name: '2026-11-29T020000Z', verified: 'ok' })]);
  });

  it.each([
    ['', () => s3],
    [' (a storage without ListMultipartUploads: aborted by the id the journal kept)', () => s3NoList],
  ])('S3: the unfinished multipart upload is invisible, then aborted by the next run, which uploads whole%s', async (_label, which) => {
    const place = which();
    fx = await qdrantFixture(BIG);
    const { target, env } = asUserWrites({ ...place.config(), name: 'off' });
    const config = join(fx.dir, 'a.yaml');
    writeFileSync(config, YAML.stringify(fx.raw({ snapshot: { targets: [target] } })));
    const prefix = (target as { prefix: string }).prefix;
    const stateEnv = { ...env, MEMORY_WARDEN_STATE: join(fx.dir, 'state.db') };

    const run = start(['run', 'snapshot', '--config', config, '--store', 'agent', '--now', '2026-11-29T02:00:00Z'], stateEnv);
    let killed = false;
    place.s3!.faults.push({
      match: (r) => r.key.startsWith(prefix) && r.method === 'PUT' && r.query.get('partNumber') === '2',
      action: () => {
        run.child.kill('SIGKILL');
        killed = true;
      },
    });
    const end = await run.done;
    expect(killed).toBe(true);
    expect(end.signal).toBe('SIGKILL');
    const mine = () => [...place.s3!.uploads.values()].filter((u) => u.key.startsWith(prefix));
    expect(mine()).toHaveLength(1);
    expect([...place.s3!.objects.keys()].filter((k) => k.startsWith(prefix) && k.endsWith('manifest.json'))).toEqual([]);
    const listed = await cli(['snapshots', 'list', '--config', config, '--store', 'agent', '--target', 'off', '--json'], stateEnv);
    expect(listed.json().snapshots).toEqual([]);

    const pushed = await cli(['snapshots', 'push', '--config', config, '--store', 'agent', '--json'], stateEnv);
    expect(pushed.code, pushed.stderr).toBe(0);
    const [r] = pushed.json().targets;
    expect(r.cleaned).toContain('off:2026-11-29T020000Z/store.db (multipart upload)');
    expect(r.uploaded).toEqual(['2026-11-29T020000Z']);
    expect(mine()).toEqual([]);
    expect(readdirSync((target as { uploadJournalDir: string }).uploadJournalDir)).toEqual([]);
    const verified = await cli(['snapshots', 'verify', '--config', config, '--store', 'agent', '--target', 'off', '--json'], stateEnv);
    expect(verified.code, verified.stderr).toBe(0);
    expect(verified.json().snapshots).toEqual([expect.objectContaining({ name: '2026-11-29T020000Z', verified: 'ok' })]);
    expect(existsSync(join(fx.dir, 'backups', 'agent', '2026-11-29T020000Z', 'manifest.json'))).toBe(true);
  });

  it('S3 on s3rver (no ListMultipartUploads, no AbortMultipartUpload): the killed upload is said not removed; the next run uploads whole', async () => {
    fx = await qdrantFixture(BIG);
    const { target, env } = asUserWrites({ ...rver.config(), name: 'off' });
    const config = join(fx.dir, 'a.yaml');
    writeFileSync(config, YAML.stringify(fx.raw({ snapshot: { targets: [target] } })));
    const stateEnv = { ...env, MEMORY_WARDEN_STATE: join(fx.dir, 'state.db') };
    const run = start(['run', 'snapshot', '--config', config, '--store', 'agent', '--now', '2026-11-29T02:00:00Z'], stateEnv);
    let exited = false;
    void run.done.then(() => (exited = true));
    // Killed the moment s3rver holds a part of an upload (its folder is on this machine).
    const parts = () => (readdirSync(rver.s3rver!.dir, { recursive: true }) as string[]).filter((p) => /_S3rver_uploads\/[0-9a-f]+\/1$/.test(p));
    let seen = false;
    while (!seen && !exited) {
      seen = parts().length > 0;
      if (!seen) await new Promise((r) => setTimeout(r, 2));
    }
    run.child.kill('SIGKILL');
    expect(seen, 'the upload finished before a part was seen').toBe(true);
    expect((await run.done).signal).toBe('SIGKILL');

    const pushed = await cli(['snapshots', 'push', '--config', config, '--store', 'agent', '--json'], stateEnv);
    expect(pushed.code, pushed.stderr).toBe(0);
    const [r] = pushed.json().targets;
    expect(r.cleaned).toContainEqual(expect.stringMatching(/^off:2026-11-29T020000Z\/store\.db \(multipart upload \w+ not removed: the storage does not abort multipart uploads; its parts may stay stored; journal \S+ kept: delete it once they are gone\)$/));
    expect(r.uploaded).toEqual(['2026-11-29T020000Z']);
    // Its parts stay on the storage: the entry stays, and erase cannot rule the upload out until a person deletes it.
    expect(readdirSync((target as { uploadJournalDir: string }).uploadJournalDir)).toHaveLength(1);
    const verified = await cli(['snapshots', 'verify', '--config', config, '--store', 'agent', '--target', 'off', '--json'], stateEnv);
    expect(verified.json().snapshots).toEqual([expect.objectContaining({ name: '2026-11-29T020000Z', verified: 'ok' })]);
  });
});

describe('an authenticated target through the CLI (local folder)', { timeout: 120_000 }, () => {
  it('keygen, push with the MAC, verify; a manifest stripped of it is refused by verify and restore; no key: a warning', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const keyFile = join(fx.dir, 'keys', 'target.key');
    mkdirSync(dirname(keyFile), { mode: 0o700 });
    const made = await cli(['snapshots', 'keygen', keyFile, '--json']);
    expect(made.code, made.stderr).toBe(0);
    expect(made.json()).toEqual({ file: keyFile, keyId: expect.stringMatching(/^[0-9a-f]{16}$/) });
    expect(statSync(keyFile).mode & 0o777).toBe(0o600);
    const again = await cli(['snapshots', 'keygen', keyFile]);
    expect(again.code).toBe(2);
    expect(again.stderr.trim()).toMatch(/^[^\n]*target\.key: exists already; a key is never overwritten$/);

    const nas = join(fx.dir, 'nas');
    mkdirSync(nas);
    const config = join(fx.dir, 'a.yaml');
    const target = { type: 'local', name: 'nas', path: nas, authKeyFile: keyFile };
    writeFileSync(config, YAML.stringify(fx.raw({ snapshot: { targets: [target] } })));
    expect((await cli(['run', 'snapshot', '--config', config, '--store', 'agent', '--now', '2026-11-29T02:00:00Z'])).code).toBe(0);
    const verified = await cli(['snapshots', 'verify', '--config', config, '--store', 'agent', '--target', 'nas', '--json']);
    expect(verified.code, verified.stderr).toBe(0);
    expect(verified.json().snapshots).toEqual([expect.objectContaining({ name: '2026-11-29T020000Z', verified: 'ok' })]);

    const manifest = join(nas, 'agent', '2026-11-29T020000Z', 'manifest.json');
    const m = JSON.parse(readFileSync(manifest, 'utf8'));
    delete m.remote.auth;
    writeFileSync(manifest, JSON.stringify(m));
    const bad = await cli(['snapshots', 'verify', '--config', config, '--store', 'agent', '--target', 'nas']);
    expect(bad.code).toBe(1);
    expect(bad.stdout).toMatch(/2026-11-29T020000Z {2}NOT USABLE: .*carries no MAC/);
    const before = readFileSync(fx.dbPath);
    const refused = await cli(['restore', 'latest', '--config', config, '--store', 'agent', '--target', 'nas', '--force']);
    expect(refused.code).toBe(2);
    expect(refused.stderr.trim().split('\n')).toEqual([expect.stringMatching(/carries no MAC, and target nas has authKeyFile set: refused/)]);
    expect(readFileSync(fx.dbPath).equals(before)).toBe(true);

    writeFileSync(config, YAML.stringify(fx.raw({ snapshot: { targets: [{ ...target, authKeyFile: undefined }] } })));
    const unkeyed = await cli(['snapshots', 'list', '--config', config, '--store', 'agent', '--target', 'nas'], { LOG_LEVEL: 'warn' });
    expect(unkeyed.code, unkeyed.stderr).toBe(0);
    expect(unkeyed.stderr).toMatch(/no authKeyFile: whoever can write it can forge a snapshot that verifies/);
  });
});

describe('restore latest from a target that withholds newer snapshots (local folder)', { timeout: 120_000 }, () => {
  it('refused when the newest there is older than the newest this machine pushed; by name it restores', async () => {
    fx = await qdrantFixture(ROWS);
    await fx.seedPoints(ROWS);
    const nas = join(fx.dir, 'nas');
    mkdirSync(nas);
    const config = join(fx.dir, 'a.yaml');
    writeFileSync(config, YAML.stringify(fx.raw({ snapshot: { targets: [{ type: 'local', name: 'nas', path: nas }] } })));
    for (const at of ['2026-11-29T02:00:00Z', '2026-11-30T02:00:00Z']) expect((await cli(['run', 'snapshot', '--config', config, '--store', 'agent', '--now', at])).code).toBe(0);
    rmSync(join(nas, 'agent', '2026-11-30T020000Z'), { recursive: true }); // deleted or withheld by whoever holds the NAS
    const before = readFileSync(fx.dbPath);
    const refused = await cli(['restore', 'latest', '--config', config, '--store', 'agent', '--target', 'nas', '--force']);
    expect(refused.code).toBe(2);
    expect(refused.stderr.trim().split('\n')).toEqual([expect.stringMatching(/is 2026-11-29T020000Z, older than 2026-11-30T020000Z, which this machine pushed there: .*restore 2026-11-29T020000Z by name/)]);
    expect(readFileSync(fx.dbPath).equals(before)).toBe(true);
    const byName = await cli(['restore', '2026-11-29T020000Z', '--config', config, '--store', 'agent', '--target', 'nas', '--force', '--json']);
    expect(byName.code, byName.stderr).toBe(0);
    expect(byName.json().from).toBe('nas:2026-11-29T020000Z');
  });
});
