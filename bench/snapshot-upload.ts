/**
 * `npm run bench:upload`: what sending a snapshot off the machine costs. Builds a store (`--rows`, default
 * 1,000,000), takes one snapshot (SQLite only), then runs, `--runs` times each, alternating, every case as a whole
 * process under `/usr/bin/time -v` (wall time, user+sys CPU, peak RSS):
 *
 * - `cp` of the snapshot's store.db to another folder then `sync` of the copy, against the local target (temp file
 *   hashed as it is written, fsync, size check, rename), plain and age-encrypted;
 * - OpenSSH's `sftp` client putting the same file to a loopback sshd (`put -f`: fsync), against the SFTP target
 *   (ssh2 in JS, pipelined writes hashed as they are sent, fsync, size check, rename), plain and encrypted;
 * - `curl --aws-sigv4` PUT of the same file (one request, no checksum; and again with the file's sha256 for the server
 *   to check, made beforehand) to the loopback S3 test server, against the
 *   S3 target (multipart, sha256 per part, HEAD check), plain and encrypted. The server is in this process, in
 *   memory: the figures are the client side's cost, and this process's CPU meanwhile (the server's work for each
 *   case, on the same two cores) is printed beside them.
 *
 * `node start (no upload)` is a child that loads everything an upload loads and stops: the fixed cost in every
 * target figure. `holds.json.gz only` makes the snapshot's holds (keyed hashes of every id, for erase) from its
 * copy and drops them: what taking a snapshot now does once (an upload sends the file made then), and what a push
 * of a snapshot from before holds files were made still does.
 *
 * Ratios are medians of the ratios paired within a round (each target against the tool run just before it).
 * `--before DIR` (another checkout, built) also runs each target case with DIR's code, in the same rounds, paired
 * against the same baseline and against this code's run beside it.
 *
 *   npm run bench:upload [-- --rows 1000000 --runs 3 --only local --before ../main]
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TargetConfig } from '../src/snapshot/targets/config.js';

const args = process.argv.slice(2);
const arg = (name: string, fallback: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1]! : fallback;
};

/** What one child process uploads: `--child <spec.json>`. */
interface ChildSpec {
  snapDir: string;
  keyHex: string;
  target: TargetConfig;
}

async function child(specFile: string, mode: string | undefined): Promise<void> {
  // Only what an upload loads (the parent's store builder, test servers and snapshot code stay out of the child).
  const [{ targetSchema }, { uploadSnapshot, withTarget }] = await Promise.all([import('../src/snapshot/targets/config.js'), import('../src/snapshot/targets/replicate.js')]);
  const spec = JSON.parse(readFileSync(specFile, 'utf8')) as ChildSpec;
  const tcfg = targetSchema.parse(spec.target);
  if (mode === '--noop') return; // the process's start alone: node and the modules every upload loads
  if (mode === '--holds') { // and holds.json.gz made from the copy: what the snapshot now does once, and a push of an older one
    const { holdsStream } = await import('../src/snapshot/targets/holds.js');
    for await (const _ of holdsStream(join(spec.snapDir, 'store.db'), Buffer.from(spec.keyHex, 'hex'))) void _;
    return;
  }
  await withTarget(tcfg, 'agent', (t) => uploadSnapshot(t, tcfg, spec.snapDir, Buffer.from(spec.keyHex, 'hex'), { now: Date.now }));
}

interface Sample {
  wallMs: number;
  cpuS: number;
  rssMb: number;
  /** CPU of this process meanwhile: the S3 test server's work for the case (the other cases' servers are processes of their own). */
  serverS?: number;
}

/** Run a command under /usr/bin/time -v; its wall time (measured here), user+sys CPU and peak RSS. */
async function timed(cmd: string, argv: string[]): Promise<Sample> {
  const start = process.hrtime.bigint();
  const p = spawn('/usr/bin/time', ['-v', cmd, ...argv], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  p.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = await new Promise<number | null>((r) => p.on('close', r));
  const wallMs = Number(process.hrtime.bigint() - start) / 1e6;
  if (code !== 0) throw new Error(`${cmd} ${argv.join(' ')} exited ${code}: ${err.slice(-2000)}`);
  const num = (label: string) => Number(new RegExp(`${label}: ([\\d.]+)`).exec(err)?.[1] ?? NaN);
  return { wallMs, cpuS: num('User time \\(seconds\\)') + num('System time \\(seconds\\)'), rssMb: num('Maximum resident set size \\(kbytes\\)') / 1024 };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
/** `BENCH_NODE_FLAGS`: flags for every upload child's node, e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof` (NODE_OPTIONS refuses --cpu-prof). */
/** curl's PUT sending the file's sha256 for the server to check (x-amz-checksum-sha256), as the S3 target does. */
const CURL_CHECKED = 'curl PUT, sha256 checked (loopback S3)';
const nodeFlags = (process.env.BENCH_NODE_FLAGS ?? '').split(' ').filter(Boolean);
const load = () => loadavg().map((x) => x.toFixed(2)).join(' ');

async function main(): Promise<void> {
  const { generateX25519Identity, identityToRecipient } = await import('age-encryption');
  const { validateConfig } = await import('../src/config/config.js');
  const { silentLogger } = await import('../src/log/logger.js');
  const { takeSnapshot } = await import('../src/snapshot/create.js');
  const { targetSchema } = await import('../src/snapshot/targets/config.js');
  const { eraseKey } = await import('../src/erase/ledger.js');
  const { startSshd } = await import('../test/helpers/sshd.js');
  const { startS3Server } = await import('../test/helpers/s3-server.js');
  const { buildStore } = await import('./store.js');
  const ROWS = Number(arg('rows', '1000000'));
  const RUNS = Number(arg('runs', '3'));
  const only = arg('only', ''); // e.g. --only sftp: just the cases whose name contains it
  const dir = mkdtempSync(join(tmpdir(), 'mw-bench-upload-'));
  const sshd = await startSshd();
  const s3 = await startS3Server();
  const self = fileURLToPath(import.meta.url);
  try {
    const t0 = Date.now();
    const db = join(dir, 'memory.db');
    buildStore(db, ROWS, Date.now());
    const config = validateConfig({ stateDb: join(dir, 'state.db'), snapshot: { root: join(dir, 'backups') }, stores: { agent: { db } } });
    const snap = await takeSnapshot(config, 'agent', { now: () => Date.parse('2026-11-29T02:00:00Z'), log: silentLogger });
    const file = join(snap.dir, 'store.db');
    const bytes = statSync(file).size;
    const MB = bytes / 1e6;
    console.log(`rows ${ROWS.toLocaleString('en')}, store.db ${MB.toFixed(1)} MB, built and snapshotted in ${((Date.now() - t0) / 1000).toFixed(1)} s; node ${process.version}; load average ${load()}`);
    const keyHex = eraseKey(config).toString('hex');
    const recipient = await identityToRecipient(await generateX25519Identity());
    let n = 0;
    const out = () => join(dir, `out-${n++}`);

    const target = (kind: 'local' | 'sftp' | 's3', encrypt: boolean, path: string): TargetConfig => {
      const enc = encrypt ? { encrypt: { recipients: [recipient] } } : {};
      if (kind === 'local') return targetSchema.parse({ type: 'local', name: 'disk', path, ...enc });
      if (kind === 'sftp') return targetSchema.parse({ type: 'sftp', name: 'box', host: sshd.host, port: sshd.port, username: sshd.username, hostKeySha256: sshd.hostKeySha256, privateKeyFile: sshd.keyFile, path, ...enc });
      return targetSchema.parse({ type: 's3', name: 'bucket', bucket: s3.bucket, endpoint: s3.endpoint, forcePathStyle: true, accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey, prefix: `${path}/`, ...enc });
    };
    /** Each case: run it once (timed), then remove what it stored (not timed). */
    const before = arg('before', '');
    const upload = (kind: 'local' | 'sftp' | 's3', encrypt: boolean, mode?: '--noop' | '--holds', script = self) => async () => {
      const where = kind === 'local' ? mkdtempSync(join(dir, 'local-')) : kind === 'sftp' ? join(sshd.home, `t-${n++}`) : `b${n++}`;
      const spec = join(dir, `spec-${n++}.json`);
      writeFileSync(spec, JSON.stringify({ snapDir: snap.dir, keyHex, target: target(kind, encrypt, where) } satisfies ChildSpec));
      try {
        return await timed(process.execPath, [...nodeFlags, script, '--child', spec, ...(mode ? [mode] : [])]);
      } finally {
        if (kind === 's3') s3.objects.clear();
        else rmSync(where, { recursive: true, force: true });
      }
    };
    const cp = async () => {
      const dest = out();
      try {
        return await timed('sh', ['-c', 'cp "$1" "$2" && sync "$2"', 'cp', file, dest]);
      } finally {
        rmSync(dest, { force: true });
      }
    };
    const sftp = async () => {
      const dest = join(sshd.home, `sftp-${n++}.db`);
      const batch = join(dir, 'sftp-batch');
      writeFileSync(batch, `put -f ${file} ${dest}\n`); // -f: fsync, as the target asks the server to
      try {
        return await timed('sftp', ['-q', '-i', sshd.keyFile, '-P', String(sshd.port), '-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-b', batch, `${sshd.username}@127.0.0.1`]);
      } finally {
        rmSync(dest, { force: true });
      }
    };
    // The file's sha256, made here once (not timed): for a curl PUT that asks the server to check it, as the S3
    // target's parts do. curl signs with the x-amz-content-sha256 it is given.
    const fileSha = createHash('sha256');
    for await (const chunk of createReadStream(file)) fileSha.update(chunk as Buffer);
    const sha = fileSha.digest();
    const curlPut = (headers: string[]) => async () => {
      const key = `curl-${n++}/store.db`;
      try {
        return await timed('curl', ['-sS', '-f', '-o', '/dev/null', '--aws-sigv4', 'aws:amz:us-east-1:s3', '--user', `${s3.accessKeyId}:${s3.secretAccessKey}`,
          ...headers.flatMap((h) => ['-H', h]), '-T', file, `${s3.endpoint}/${s3.bucket}/${key}`]);
      } finally {
        s3.objects.clear();
      }
    };
    const curl = curlPut(['x-amz-content-sha256: UNSIGNED-PAYLOAD']);
    const curlChecked = curlPut([`x-amz-content-sha256: ${sha.toString('hex')}`, `x-amz-checksum-sha256: ${sha.toString('base64')}`]);
    // [name, run, baseline it is paired with]
    const cases: Array<[string, () => Promise<Sample>, string?]> = [
      ['node start (no upload)', upload('local', false, '--noop')], ['holds.json.gz only', upload('local', false, '--holds')], ['cp + sync', cp], ['local target', upload('local', false), 'cp + sync'], ['local target, age', upload('local', true), 'cp + sync'],
      ['sftp (OpenSSH client)', sftp], ['sftp target', upload('sftp', false), 'sftp (OpenSSH client)'], ['sftp target, age', upload('sftp', true), 'sftp (OpenSSH client)'],
      ['curl PUT (loopback S3)', curl], [CURL_CHECKED, curlChecked], ['s3 target', upload('s3', false), 'curl PUT (loopback S3)'], ['s3 target, age', upload('s3', true), 'curl PUT (loopback S3)'],
    ] as never;
    if (before) { // each target case again with the code before, right after this code's
      const script = join(before, 'dist/bench/snapshot-upload.js');
      for (let i = cases.length - 1; i >= 0; i--) {
        const [name, , base] = cases[i]!;
        if (!base) continue;
        const [kind, enc] = [name.split(' ')[0] as 'local' | 'sftp' | 's3', name.endsWith(', age')];
        cases.splice(i + 1, 0, [`${name} (before)`, upload(kind, enc, undefined, script), base]);
      }
    }
    // --only: the cases whose name (or baseline's) contains it, and the baselines they are paired with.
    const picked = new Set(cases.filter(([name, , base]) => !only || name.includes(only) || base?.includes(only)).flatMap(([name, , base]) => [name, ...(base ? [base] : [])]));
    if (picked.has('curl PUT (loopback S3)')) picked.add(CURL_CHECKED);
    cases.splice(0, cases.length, ...cases.filter(([name]) => picked.has(name)));
    const samples = new Map<string, Sample[]>(cases.map(([name]) => [name, []]));
    const loads: string[] = [];
    for (let run = 0; run < RUNS; run++) {
      for (const [name, f] of cases) {
        const c0 = process.cpuUsage();
        const x = await f();
        const c = process.cpuUsage(c0);
        x.serverS = (c.user + c.system) / 1e6;
        samples.get(name)!.push(x);
        console.log(`  ${name}: ${(x.wallMs / 1000).toFixed(2)} s, CPU ${x.cpuS.toFixed(2)} s, peak RSS ${x.rssMb.toFixed(0)} MB${name.includes('S3') || name.startsWith('s3') ? `, the S3 server's CPU ${x.serverS.toFixed(2)} s` : ''}`);
      }
      loads.push(load());
      console.log(`round ${run + 1}/${RUNS} done, load average ${loads.at(-1)}`);
    }
    const pad = 24;
    console.log(`\n${'case'.padEnd(pad)} ${'wall (median, runs)'.padEnd(30)} ${'MB/s'.padStart(5)} ${'CPU s'.padStart(6)} ${'peak RSS'.padStart(9)}  paired ratio (wall, CPU)`);
    for (const [name, , base] of cases) {
      const s = samples.get(name)!;
      const wall = median(s.map((x) => x.wallMs));
      const runs = s.map((x) => (x.wallMs / 1000).toFixed(2)).join(' / ');
      let ratio = '';
      if (base && samples.has(base)) {
        const b = samples.get(base)!;
        const rw = median(s.map((x, i) => x.wallMs / b[i]!.wallMs));
        const rc = median(s.map((x, i) => x.cpuS / b[i]!.cpuS));
        ratio = `${rw.toFixed(2)}x, ${rc.toFixed(2)}x vs ${base}`;
      }
      const server = name.includes('S3') || name.startsWith('s3') ? `; the S3 server's CPU ${median(s.map((x) => x.serverS!)).toFixed(2)} s` : '';
      console.log(`${name.padEnd(pad)} ${`${(wall / 1000).toFixed(2)} s (${runs})`.padEnd(30)} ${(MB / (wall / 1000)).toFixed(0).padStart(5)} ${median(s.map((x) => x.cpuS)).toFixed(2).padStart(6)} ${`${median(s.map((x) => x.rssMb)).toFixed(0)} MB`.padStart(9)}  ${ratio}${server}`);
    }
    const enc = (plain: string, age: string) => {
      if (!samples.has(plain) || !samples.has(age)) return;
      const p = samples.get(plain)!;
      const a = samples.get(age)!;
      console.log(`encryption, ${plain}: wall ${median(a.map((x, i) => x.wallMs / p[i]!.wallMs)).toFixed(2)}x, CPU ${median(a.map((x, i) => x.cpuS / p[i]!.cpuS)).toFixed(2)}x (paired medians)`);
    };
    console.log('');
    enc('local target', 'local target, age');
    enc('sftp target', 'sftp target, age');
    enc('s3 target', 's3 target, age');
    enc('local target (before)', 'local target, age (before)');
    enc('sftp target (before)', 'sftp target, age (before)');
    enc('s3 target (before)', 's3 target, age (before)');
    const after = (name: string) => {
      if (!samples.has(name) || !samples.has(`${name} (before)`)) return;
      const a = samples.get(name)!;
      const b = samples.get(`${name} (before)`)!;
      console.log(`${name} against the code before: wall ${median(a.map((x, i) => x.wallMs / b[i]!.wallMs)).toFixed(2)}x, CPU ${median(a.map((x, i) => x.cpuS / b[i]!.cpuS)).toFixed(2)}x (paired medians)`);
    };
    for (const [name, , base] of cases) if (base && !name.endsWith('(before)')) after(name);
    // The S3 cases against a PUT whose checksum the server checks too: the same work on the server's side.
    for (const name of ['s3 target', 's3 target, age', 's3 target (before)']) {
      if (!samples.has(name) || !samples.has(CURL_CHECKED)) continue;
      const a = samples.get(name)!;
      const b = samples.get(CURL_CHECKED)!;
      console.log(`${name} against ${CURL_CHECKED}: wall ${median(a.map((x, i) => x.wallMs / b[i]!.wallMs)).toFixed(2)}x, CPU ${median(a.map((x, i) => x.cpuS / b[i]!.cpuS)).toFixed(2)}x (paired medians)`);
    }
    console.log(`load average after each round: ${loads.join('; ')}`);
  } finally {
    await s3.stop();
    await sshd.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (args[0] === '--child') await child(args[1]!, args[2]);
else await main();
