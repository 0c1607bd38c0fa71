import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import YAML from 'yaml';
import { CLI } from './helpers/cli.js';
import { startS3Server, type TestS3 } from './helpers/s3-server.js';
import { makeStore, tempDir } from './helpers/store.js';

/**
 * No dependency's warning reaches the terminal of someone running memory-warden: the AWS SDK's notice about the
 * Node versions it will support, a deprecation, an experimental feature. Each command runs as a user runs it (no
 * NODE_OPTIONS, no AWS_SDK_* variable set) and must leave stderr empty.
 */
function run(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; stderr: string }> {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(AWS_|NODE_OPTIONS$|NODE_NO_WARNINGS$)/.test(k)));
  const child = spawn(process.execPath, [CLI, ...args], { env: { ...clean, LOG_LEVEL: 'silent', ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stderr })));
}

describe(`no dependency warning on the terminal (node ${process.version})`, () => {
  let s3: TestS3;
  let dir: string;
  let cleanup: () => void;
  let config: string;
  let credentials: Record<string, string>;
  beforeAll(async () => {
    s3 = await startS3Server();
    ({ dir, cleanup } = tempDir());
    const db = makeStore(join(dir, 'memory.db'), [{ id: 'm1' }]);
    const target = {
      type: 's3', name: 'bucket', bucket: s3.bucket, endpoint: s3.endpoint, forcePathStyle: true, prefix: 'w/',
      accessKeyId: '${MW_TEST_KEY_ID}', secretAccessKey: '${MW_TEST_SECRET}', maxAttempts: 1,
    };
    credentials = { MW_TEST_KEY_ID: s3.accessKeyId, MW_TEST_SECRET: s3.secretAccessKey };
    config = join(dir, 'warden.yaml');
    writeFileSync(config, YAML.stringify({ stateDb: join(dir, 'state.db'), stores: { agent: { db } }, snapshot: { root: join(dir, 'backups'), targets: [target] } }));
  });
  afterAll(async () => {
    await s3?.stop();
    cleanup?.();
  });

  const commands: [string, () => string[]][] = [
    ['--help', () => ['--help']],
    ['config', () => ['config', '--config', config]],
    ['check', () => ['check', '--config', config, '--store', 'agent']],
    ['run prune', () => ['run', 'prune', '--config', config, '--store', 'agent']],
    ['digest --preview', () => ['digest', '--preview', '--config', config]],
    ['snapshots list on the S3 target (the AWS SDK loaded and a client made)', () => ['snapshots', 'list', '--config', config, '--store', 'agent', '--target', 'bucket']],
    ['run snapshot, uploaded to S3', () => ['run', 'snapshot', '--config', config, '--store', 'agent']],
  ];
  for (const [what, args] of commands) {
    it(what, async () => {
      const r = await run(args(), credentials);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
    });
  }
});
