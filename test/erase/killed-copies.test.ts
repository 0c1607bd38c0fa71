import { spawn } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DeleteObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { generateX25519Identity, identityToRecipient } from 'age-encryption';
import YAML from 'yaml';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { validateConfig } from '../../src/config/config.js';
import type { TargetConfig } from '../../src/snapshot/targets/config.js';
import { journalPath } from '../../src/snapshot/journal.js';
import { CLI } from '../helpers/cli.js';
import { makeStore, tempDir, type Row } from '../helpers/store.js';
import { localPlace, s3Place, s3rverPlace, sftpPlace, type TargetPlace } from '../snapshot/targets/fixtures.js';

/**
 * kill -9 at each step of an erase and of a restore from a target, on a local folder, a real sshd and two S3 servers:
 * after each kill, erase exits 1 exactly while a copy of Carol remains anywhere (every file of the machine's
 * folders, every object of the target), then `erase --snapshots` leaves none and exits 0, and so does the next erase.
 * Each kill is made at a named step by a preloaded hook in the killed process (test/helpers/kill-at.cjs), never by
 * timing; a step that did not happen fails the test.
 */
const CAROL = 'Carol Whitfield keeps the vault code 4471 in her left shoe';
const ROWS: Row[] = [{ id: 'm_carol', subject: 'carol', fact: CAROL }, ...Array.from({ length: 4 }, (_, i) => ({ id: `m_bob${i}`, subject: 'bob', fact: `Bob prefers tea number ${i}` }))];
const SNAP = '2026-11-29T020000Z';
const HOOK = fileURLToPath(new URL('../helpers/kill-at.cjs', import.meta.url));

interface KillAt {
  op: 'write' | 'delete';
  path: string;
  when?: 'after' | 'before' | 'during';
  nth?: number;
}

/** The CLI in a child process, asynchronously (the S3 servers live in this process), with the kill hook when asked. */
function run(args: string[], env: Record<string, string>, kill?: KillAt & { sftp?: boolean }) {
  const child = spawn(process.execPath, [...(kill ? ['--require', HOOK] : []), CLI, ...args], {
    env: { ...process.env, LOG_LEVEL: 'silent', ...env, ...(kill ? { MW_KILL_AT: JSON.stringify(kill) } : {}) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }>((resolve) =>
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr })));
}

interface World {
  encrypted: boolean;
  dir: string;
  db: string;
  file: string;
  tcfg: TargetConfig;
  env: Record<string, string>;
  place: TargetPlace;
}

let tmp: { dir: string; cleanup(): void } | undefined;
afterEach(() => tmp?.cleanup());

/** A store holding Carol's memory, snapshotted and pushed to the place's target (encrypted when asked). */
async function world(place: TargetPlace, encrypted: boolean): Promise<World> {
  tmp = tempDir('mw-killed-');
  const dir = tmp.dir;
  mkdirSync(join(dir, 'agent'));
  const db = makeStore(join(dir, 'agent', 'memory.db'), ROWS);
  const env: Record<string, string> = {};
  let encrypt = {};
  if (encrypted) {
    const identity = await generateX25519Identity();
    env.MEMORY_WARDEN_AGE_IDENTITY = identity;
    encrypt = { encrypt: { recipients: [await identityToRecipient(identity)] } };
  }
  const tcfg = { ...place.config(encrypt), name: 'off' } as TargetConfig;
  const raw = { stateDb: join(dir, 'state', 'state.db'), snapshot: { root: join(dir, 'backups'), targets: [tcfg] }, stores: { agent: { db } } };
  validateConfig(raw);
  // Credentials as a user writes them: from the environment.
  const s3 = tcfg as { accessKeyId?: string; secretAccessKey?: string };
  const written = s3.accessKeyId ? { ...tcfg, accessKeyId: '${MW_TEST_KEY}', secretAccessKey: '${MW_TEST_SECRET}' } : tcfg;
  if (s3.accessKeyId) Object.assign(env, { MW_TEST_KEY: s3.accessKeyId, MW_TEST_SECRET: s3.secretAccessKey! });
  const file = join(dir, 'warden.yaml');
  writeFileSync(file, YAML.stringify({ ...raw, snapshot: { ...raw.snapshot, targets: [written] } }));
  const taken = await run(['run', 'snapshot', '--config', file, '--store', 'agent', '--now', '2026-11-29T02:00:00Z', '--json'], env);
  expect(taken.code, taken.stderr).toBe(0);
  expect(JSON.parse(taken.stdout).targets[0].uploaded).toEqual([SNAP]);
  return { encrypted, dir, db, file, tcfg, env, place };
}

function* filesUnder(dir: string): Generator<string> {
  if (!existsSync(dir)) return;
  for (const n of readdirSync(dir)) {
    const p = join(dir, n);
    const st = lstatSync(p);
    if (st.isDirectory()) yield* filesUnder(p);
    else if (st.isFile()) yield p;
  }
}

/** Every place Carol's text is, as bytes: the machine's folders (store, snapshots, state, upload journal) and the target's storage. */
function plaintext(w: World): string[] {
  const needle = Buffer.from(CAROL);
  const hits: string[] = [];
  const scan = (dir: string) => {
    for (const f of filesUnder(dir)) if (readFileSync(f).includes(needle)) hits.push(f);
  };
  scan(w.dir);
  const t = w.tcfg as { type: string; path?: string; prefix?: string; uploadJournalDir?: string };
  if (t.uploadJournalDir) scan(t.uploadJournalDir);
  if (t.type === 'local' || t.type === 'sftp') scan(t.path!);
  if (w.place.s3) {
    for (const [k, o] of w.place.s3.objects) if (k.startsWith(t.prefix!) && o.body.includes(needle)) hits.push(`s3:${k}`);
    for (const [id, u] of w.place.s3.uploads) if (u.key.startsWith(t.prefix!) && [...u.parts.values()].some((p) => p.body.includes(needle))) hits.push(`s3 upload ${id}`);
  }
  if (w.place.s3rver) scan(w.place.s3rver.dir); // every test has its own prefix there, and Carol only in this one's
  return hits;
}

/** Every object the target's storage holds under the store's prefix, complete or not, read there directly. */
function remoteObjects(w: World): string[] {
  const t = w.tcfg as { type: string; path?: string; prefix?: string };
  if (t.type === 'local' || t.type === 'sftp') return [...filesUnder(join(t.path!, 'agent'))];
  if (w.place.s3) return [...w.place.s3.objects.keys(), ...[...w.place.s3.uploads.values()].map((u) => `${u.key} (upload)`)].filter((k) => k.startsWith(`${t.prefix}agent/`));
  return [...filesUnder(w.place.s3rver!.dir)].filter((f) => f.includes(`/${t.prefix}agent/`));
}

/** A copy remains: her text anywhere here or there, or, on an encrypting target (not searchable), anything left there. */
function copiesRemain(w: World): string[] {
  return [...plaintext(w), ...(w.encrypted ? remoteObjects(w) : [])];
}

const erase = async (w: World, ...flags: string[]) => run(['erase', '--config', w.file, '--store', 'agent', '--user', 'carol', '--json', ...flags], w.env);

/** After the kill: exit 1 exactly while a copy remains; --snapshots removes the last; then 0 and 0. */
async function eraseUntilGone(w: World): Promise<void> {
  let first = await erase(w);
  const pending = /restore of store "agent" from (\S+) was interrupted/.exec(first.stderr);
  if (pending) {
    // A half-done restore is finished first, as the refusal says: erase never runs on a store half one snapshot.
    expect(first.code).toBe(2);
    expect(existsSync(journalPath(w.db))).toBe(true);
    const finish = await run(['restore', pending[1]!, '--config', w.file, '--store', 'agent'], w.env);
    expect(finish.code, finish.stderr).toBe(0);
    first = await erase(w);
  }
  const remain = copiesRemain(w);
  expect(first.code, `${first.stderr}\ncopies: ${remain.join(', ')}\n${first.stdout}`).toBe(remain.length > 0 ? 1 : 0);
  const all = await erase(w, '--snapshots');
  expect(all.code, `${all.stderr}\n${all.stdout}`).toBe(0);
  expect(plaintext(w)).toEqual([]);
  expect(remoteObjects(w), 'nothing left of the snapshot on the target').toEqual([]);
  expect((await erase(w)).code).toBe(0);
}

/** A snapshot pushed before claims existed: its claim.json taken away, as an older version left it. */
async function dropClaim(w: World): Promise<void> {
  const t = w.tcfg as { type: string; path?: string; prefix?: string; bucket?: string; endpoint?: string; accessKeyId?: string; secretAccessKey?: string };
  if (t.type !== 's3') return rmSync(join(t.path!, 'agent', SNAP, 'claim.json'));
  const client = new S3Client({ endpoint: t.endpoint, forcePathStyle: true, region: 'us-east-1', credentials: { accessKeyId: t.accessKeyId!, secretAccessKey: t.secretAccessKey! } });
  try {
    await client.send(new DeleteObjectCommand({ Bucket: t.bucket, Key: `${t.prefix}agent/${SNAP}/claim.json` }));
  } finally {
    client.destroy();
  }
}

const remote = (file: string) => String.raw`/agent/${SNAP}/${file.replace(/\./g, '\\.')}$`;

/** The steps of `erase --snapshots`: the local snapshot retired, then the remote one deleted, manifest first, claim last. */
const ERASE_STEPS: [string, KillAt & { legacy?: boolean }][] = [
  ['the local snapshot renamed to its retired name', { op: 'write', path: String.raw`\.partial-${SNAP}-retired$` }],
  ['the retired folder half removed', { op: 'delete', path: String.raw`\.partial-${SNAP}-retired$`, when: 'during', nth: 2 }],
  ['the claim written on a snapshot an older version pushed', { op: 'write', path: remote('claim.json'), legacy: true }],
  ['the remote manifest deleted', { op: 'delete', path: remote('manifest.json') }],
  ['the remote holds deleted', { op: 'delete', path: remote('holds.json.gz') }],
  ['the remote store.db deleted', { op: 'delete', path: remote('store.db') }],
  ['the remote claim deleted, last', { op: 'delete', path: remote('claim.json') }],
];

/** The steps of `restore --target` on an encrypting target: download, stage, pre-restore snapshot, journal, swap. */
const RESTORE_STEPS: [string, KillAt][] = [
  ['the download begun (store.db decrypted, no manifest yet)', { op: 'write', path: String.raw`/\.fetch-[^/]+/store\.db$` }],
  ['the download complete', { op: 'write', path: String.raw`/\.fetch-[^/]+/manifest\.json$` }],
  ['the snapshot staged beside the store', { op: 'write', path: String.raw`/\.memory\.db\.restore-\d+$` }],
  ['the pre-restore snapshot half built', { op: 'write', path: String.raw`/\.partial-[^/]+/manifest\.json$`, when: 'before' }],
  ['the pre-restore snapshot published', { op: 'write', path: String.raw`-pre-restore$` }],
  ['the restore journal written', { op: 'write', path: String.raw`\.warden-restore\.json$` }],
  ['the store file swapped', { op: 'write', path: String.raw`/agent/memory\.db$` }],
];

/** Where the target is; the restore's steps are this machine's, so one S3 server is enough for them. */
const PLACES: [string, () => Promise<TargetPlace>, { restore: boolean }][] = [
  ['local folder', localPlace, { restore: true }],
  ['SFTP (real sshd)', sftpPlace, { restore: true }],
  ['S3 (loopback server)', () => s3Place(), { restore: true }],
  ['S3 (s3rver)', s3rverPlace, { restore: false }],
];

describe.each(PLACES)('kill -9 during erase and restore: %s', { timeout: 120_000 }, (label, start, which) => {
  let place: TargetPlace;
  beforeAll(async () => {
    place = await start();
  }, 60_000);
  afterAll(() => place.stop());
  const sftp = label.startsWith('SFTP');

  it.each(ERASE_STEPS)('erase --snapshots killed after %s', async (_step, kill) => {
    const w = await world(place, false);
    if (kill.legacy) await dropClaim(w);
    const k = await run(['erase', '--config', w.file, '--store', 'agent', '--user', 'carol', '--snapshots', '--json'], w.env, { ...kill, sftp });
    expect(k.signal, `the step did not happen: ${k.stderr}`).toBe('SIGKILL');
    await eraseUntilGone(w);
  });

  it.each(which.restore ? RESTORE_STEPS : [])('restore --target (encrypted) killed after %s', async (_step, kill) => {
    const w = await world(place, true);
    const k = await run(['restore', SNAP, '--config', w.file, '--store', 'agent', '--target', 'off', '--now', '2026-11-29T03:00:00Z'], w.env, kill);
    expect(k.signal, `the step did not happen: ${k.stderr}`).toBe('SIGKILL');
    await eraseUntilGone(w);
  });
});

describe('restore --target says where its plaintext copy is', { timeout: 120_000 }, () => {
  it('its first step names the download folder, decrypted; its last says it was removed', async () => {
    const place = await localPlace();
    try {
      const w = await world(place, true);
      const r = await run(['restore', SNAP, '--config', w.file, '--store', 'agent', '--target', 'off', '--now', '2026-11-29T03:00:00Z', '--json'], w.env);
      expect(r.code, r.stderr).toBe(0);
      const steps = JSON.parse(r.stdout).steps as string[];
      const dir = new RegExp(`^downloaded off:${SNAP} into (${join(w.dir, 'backups', 'agent').replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/\\.fetch-${SNAP}-\\d+-[0-9a-f]{8}) and verified it, decrypted: a plaintext copy while it exists$`).exec(steps[0]!);
      expect(dir, steps[0]).not.toBeNull();
      expect(steps.at(-1)).toBe(`removed the download ${dir![1]}`);
      expect(existsSync(dir![1]!)).toBe(false);
    } finally {
      await place.stop();
    }
  });
});

