import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { targetSchema, type TargetConfig } from '../../../src/snapshot/targets/config.js';
import { startS3Server, type S3ServerOptions, type TestS3 } from '../../helpers/s3-server.js';
import { startS3rver, type TestS3rver } from '../../helpers/s3rver.js';
import { startMotoS3 } from '../../helpers/moto-s3.js';
import { startSshd, type TestSshd } from '../../helpers/sshd.js';

/**
 * One running place per target type, for the contract suite and the snapshot tests: a temp folder, the loopback
 * S3 server, s3rver and moto (S3-compatible servers written elsewhere: s3rver implements less, moto nearly all),
 * a real sshd on loopback; and a real S3-compatible endpoint when S3_ENDPOINT (+ S3_BUCKET, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) is set.
 */
export interface TargetPlace {
  label: string;
  /** A target config for a fresh, empty place (its own prefix/folder). */
  config(extra?: Partial<Record<string, unknown>>): TargetConfig;
  s3?: TestS3;
  s3rver?: TestS3rver;
  sshd?: TestSshd;
  stop(): Promise<void>;
}

let n = 0;
const unique = () => `t${process.pid}-${Date.now().toString(36)}-${n++}`;

export async function localPlace(): Promise<TargetPlace> {
  const dir = mkdtempSync(join(tmpdir(), 'mw-target-local-'));
  return {
    label: 'local',
    config: (extra = {}) => targetSchema.parse({ type: 'local', name: 'disk', path: mkdtempSync(join(dir, 'p-')), ...extra }),
    stop: async () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** A place on an S3-compatible server running here: a fresh prefix per config, the upload journal in a temp folder. */
function s3ServerPlace(label: string, server: { endpoint: string; bucket: string; accessKeyId: string; secretAccessKey: string; stop(): Promise<void> }): TargetPlace {
  const journals = mkdtempSync(join(tmpdir(), 'mw-s3-journal-'));
  return {
    label,
    config: (extra = {}) => targetSchema.parse({
      type: 's3', name: 'bucket', bucket: server.bucket, endpoint: server.endpoint, forcePathStyle: true, prefix: `${unique()}/`,
      accessKeyId: server.accessKeyId, secretAccessKey: server.secretAccessKey, partSizeMb: 5, maxAttempts: 1, timeoutMs: 10_000, uploadJournalDir: journals, ...extra,
    }),
    stop: async () => {
      await server.stop();
      rmSync(journals, { recursive: true, force: true });
    },
  };
}

export async function s3Place(options: S3ServerOptions = {}): Promise<TargetPlace> {
  const s3 = await startS3Server(options);
  return { ...s3ServerPlace('s3 (loopback)', s3), s3 };
}

export async function s3rverPlace(): Promise<TargetPlace> {
  const s3rver = await startS3rver();
  return { ...s3ServerPlace('s3 (s3rver)', s3rver), s3rver };
}

export async function motoPlace(): Promise<TargetPlace> {
  return s3ServerPlace('s3 (moto)', await startMotoS3());
}

export async function realS3Place(): Promise<TargetPlace> {
  const env = process.env;
  const journals = mkdtempSync(join(tmpdir(), 'mw-s3-journal-'));
  return {
    label: `s3 (${env.S3_ENDPOINT})`,
    config: (extra = {}) => targetSchema.parse({
      type: 's3', name: 'real', bucket: env.S3_BUCKET ?? 'memory-warden-test', endpoint: env.S3_ENDPOINT, region: env.AWS_REGION ?? 'us-east-1',
      forcePathStyle: env.S3_FORCE_PATH_STYLE !== 'false', prefix: `mw-test/${unique()}/`, partSizeMb: 5,
      accessKeyId: env.AWS_ACCESS_KEY_ID, secretAccessKey: env.AWS_SECRET_ACCESS_KEY, uploadJournalDir: journals, ...extra,
    }),
    stop: async () => rmSync(journals, { recursive: true, force: true }),
  };
}

export async function sftpPlace(): Promise<TargetPlace> {
  const sshd = await startSshd();
  return {
    label: 'sftp (real sshd)',
    sshd,
    config: (extra = {}) => targetSchema.parse({
      type: 'sftp', name: 'box', host: sshd.host, port: sshd.port, username: sshd.username, hostKeySha256: sshd.hostKeySha256,
      privateKeyFile: sshd.keyFile, path: join(sshd.home, unique()), timeoutMs: 10_000, ...extra,
    }),
    stop: () => sshd.stop(),
  };
}

/** Every place the contract suite runs against: one per registered type, plus a real S3 when configured. */
export const PLACES: Array<[string, () => Promise<TargetPlace>]> = [
  ['local', localPlace],
  ['s3', () => s3Place()],
  ['s3 (s3rver)', s3rverPlace],
  ['s3 (moto)', motoPlace],
  ['s3 (a storage with none of the optional calls)', () => s3Place({ lacks: ['checksum-headers', 'list-uploads', 'abort-upload', 'multipart'], ignoresContentMd5: true })],
  ['sftp', sftpPlace],
  ...(process.env.S3_ENDPOINT ? [['s3-real', realS3Place] as [string, () => Promise<TargetPlace>]] : []),
];
