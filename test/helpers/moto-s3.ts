/**
 * moto 5.2.1's S3 server (`moto_server`, brought by scripts/test-services.sh) on a loopback port with one bucket: an S3
 * written elsewhere, close to AWS (checksums kept, uploads listed and aborted; a multipart sha256 without `-N`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './redis.js';

export interface TestMotoS3 {
  endpoint: string;
  bucket: string;
  accessKeyId: string;
  secretAccessKey: string;
  stop(): Promise<void>;
}

const MOTO = 'moto_server';

export async function startMotoS3(opts: { bucket?: string } = {}): Promise<TestMotoS3> {
  const bucket = opts.bucket ?? 'mw-moto';
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'mw-moto-'));
  const log = join(dir, 'moto.log');
  const out = openSync(log, 'w');
  const child: ChildProcess = spawn(MOTO, ['-H', '127.0.0.1', '-p', String(port)], { stdio: ['ignore', out, out] });
  const spawnError = new Promise<Error>((resolve) => child.once('error', resolve));
  const endpoint = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitForMoto(endpoint, child, spawnError, log);
    const made = await fetch(`${endpoint}/${bucket}`, { method: 'PUT' });
    if (!made.ok) throw new Error(`moto_server: create bucket ${bucket}: HTTP ${made.status}`);
  } catch (err) {
    await stop();
    throw err;
  }
  return { endpoint, bucket, accessKeyId: 'AKMOTOTEST', secretAccessKey: 'moto-test-secret', stop };
}

/** Until it answers HTTP: moto takes a few seconds to import. */
async function waitForMoto(endpoint: string, child: ChildProcess, spawnError: Promise<Error>, log: string): Promise<void> {
  const failed = spawnError.then((e) => { throw new Error(`${MOTO} could not be started (pip install 'moto[server]'): ${e.message}`); });
  for (let i = 0; i < 300; i++) {
    if (child.exitCode !== null) throw new Error(`${MOTO} exited with ${child.exitCode}: ${readFileSync(log, 'utf8')}`);
    const up = await Promise.race([fetch(endpoint).then(() => true, () => false), failed]);
    if (up) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${MOTO} did not answer on ${endpoint}: ${readFileSync(log, 'utf8')}`);
}
