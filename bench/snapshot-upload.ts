/**
 * `npm run bench:upload`: what sending a snapshot off the machine costs. Builds a store (`--rows`, default
 * 1,000,000), takes one snapshot (SQLite only), then times, `--runs` times each, alternating:
 *
 * - `cp` of the snapshot's store.db to another folder, against the local target (temp file, fsync, read back and
 *   hash, rename), plain and age-encrypted;
 * - OpenSSH's `sftp` client putting the same file to a loopback sshd, against the SFTP target (ssh2 in JS, write,
 *   read back and hash, rename), plain and encrypted;
 * - the S3 target against the loopback S3 test server (in memory: the cost of the client side), plain and encrypted.
 *
 *   npm run bench:upload [-- --rows 1000000 --runs 3]
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateX25519Identity, identityToRecipient } from 'age-encryption';
import { validateConfig } from '../src/config.js';
import { silentLogger } from '../src/logger.js';
import { takeSnapshot } from '../src/snapshot/create.js';
import { targetSchema, type TargetConfig } from '../src/snapshot/targets/config.js';
import { eraseKey } from '../src/erase-ledger.js';
import { uploadSnapshot, withTarget } from '../src/snapshot/targets/replicate.js';
import { startSshd } from '../test/helpers/sshd.js';
import { startS3Server } from '../test/helpers/s3-server.js';
import { buildStore } from './store.js';

const args = process.argv.slice(2);
const arg = (name: string, fallback: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1]! : fallback;
};
const ROWS = Number(arg('rows', '1000000'));
const RUNS = Number(arg('runs', '3'));

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const secs = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'mw-bench-upload-'));
  const sshd = await startSshd();
  const s3 = await startS3Server();
  try {
    const t0 = Date.now();
    const db = join(dir, 'memory.db');
    buildStore(db, ROWS, Date.now());
    const config = validateConfig({ stateDb: join(dir, 'state.db'), snapshot: { root: join(dir, 'backups') }, stores: { agent: { db } } });
    const snap = await takeSnapshot(config, 'agent', { now: () => Date.parse('2026-11-29T02:00:00Z'), log: silentLogger });
    const file = join(snap.dir, 'store.db');
    const bytes = statSync(file).size;
    console.log(`rows ${ROWS.toLocaleString('en')}, store.db ${(bytes / 1e6).toFixed(1)} MB, built and snapshotted in ${secs(Date.now() - t0)}; node ${process.version}`);
    const key = eraseKey(config.stateDb);
    const recipient = await identityToRecipient(await generateX25519Identity());
    const batch = join(dir, 'sftp-batch');
    let n = 0;

    const tools: Record<string, () => void> = {
      cp: () => {
        const r = spawnSync('cp', [file, join(dir, `cp-${n++}.db`)]);
        if (r.status !== 0) throw new Error(`cp: ${r.stderr}`);
        spawnSync('sync');
      },
      sftp: () => {
        writeFileSync(batch, `put ${file} ${join(sshd.home, `sftp-${n++}.db`)}\n`);
        const r = spawnSync('sftp', ['-q', '-i', sshd.keyFile, '-P', String(sshd.port), '-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-b', batch, `${sshd.username}@127.0.0.1`]);
        if (r.status !== 0) throw new Error(`sftp: ${r.stderr}`);
      },
    };
    const target = (kind: 'local' | 'sftp' | 's3', encrypt: boolean): TargetConfig => {
      const enc = encrypt ? { encrypt: { recipients: [recipient] } } : {};
      if (kind === 'local') return targetSchema.parse({ type: 'local', name: 'disk', path: mkdtempSync(join(dir, 'local-')), ...enc });
      if (kind === 'sftp') return targetSchema.parse({ type: 'sftp', name: 'box', host: sshd.host, port: sshd.port, username: sshd.username, hostKeySha256: sshd.hostKeySha256, privateKeyFile: sshd.keyFile, path: join(sshd.home, `t-${n++}`), ...enc });
      return targetSchema.parse({ type: 's3', name: 'bucket', bucket: s3.bucket, endpoint: s3.endpoint, forcePathStyle: true, accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey, prefix: `b${n++}/`, ...enc });
    };
    const upload = (kind: 'local' | 'sftp' | 's3', encrypt: boolean) => async () => {
      const tcfg = target(kind, encrypt);
      await withTarget(tcfg, 'agent', (t) => uploadSnapshot(t, tcfg, snap.dir, key, { now: Date.now }));
      if (kind === 's3') s3.objects.clear();
    };
    const cases: Array<[string, () => unknown]> = [
      ['cp', tools.cp!], ['local target', upload('local', false)], ['local target, age', upload('local', true)],
      ['sftp (OpenSSH client)', tools.sftp!], ['sftp target', upload('sftp', false)], ['sftp target, age', upload('sftp', true)],
      ['s3 target (loopback)', upload('s3', false)], ['s3 target (loopback), age', upload('s3', true)],
    ];
    const times = new Map<string, number[]>(cases.map(([name]) => [name, []]));
    for (let run = 0; run < RUNS; run++) {
      for (const [name, f] of cases) {
        const start = process.hrtime.bigint();
        await f();
        times.get(name)!.push(Number(process.hrtime.bigint() - start) / 1e6);
      }
    }
    for (const [name, ts] of times) console.log(`${name.padEnd(28)} median ${secs(median(ts))} (runs ${ts.map((t) => (t / 1000).toFixed(2)).join(' / ')}), ${(bytes / 1e6 / (median(ts) / 1000)).toFixed(0)} MB/s`);
    const m = (name: string) => median(times.get(name)!);
    console.log(`ratio local target / cp: ${(m('local target') / m('cp')).toFixed(2)}x; encrypted / plain: ${(m('local target, age') / m('local target')).toFixed(2)}x`);
    console.log(`ratio sftp target / sftp: ${(m('sftp target') / m('sftp (OpenSSH client)')).toFixed(2)}x; encrypted / plain: ${(m('sftp target, age') / m('sftp target')).toFixed(2)}x`);
    console.log(`ratio s3 encrypted / plain: ${(m('s3 target (loopback), age') / m('s3 target (loopback)')).toFixed(2)}x`);
  } finally {
    await s3.stop();
    await sshd.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
