import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { hostKeyFingerprint } from '../../src/snapshot/targets/sftp/index.js';

/**
 * A real OpenSSH server (Debian's openssh-server, installed by .ci/run) on a free loopback port, with a host key
 * and a client key made here in a temp folder, for the current user, SFTP only. Stopped by `stop()`.
 */
export interface TestSshd {
  host: string;
  port: number;
  username: string;
  /** The client's private key file (mode 0600). */
  keyFile: string;
  hostKeySha256: string;
  /** A folder the tests may upload to. */
  home: string;
  stop(): Promise<void>;
}

const SSHD = '/usr/sbin/sshd';

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

async function waitForPort(port: number, child: ChildProcess, log: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if (child.exitCode !== null) throw new Error(`sshd exited with ${child.exitCode}: ${readFileSync(log, 'utf8')}`);
    const ok = await new Promise<boolean>((r) => {
      const c = connect(port, '127.0.0.1', () => (c.end(), r(true)));
      c.on('error', () => r(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`sshd did not listen on ${port}: ${readFileSync(log, 'utf8')}`);
}

export async function startSshd(): Promise<TestSshd> {
  if (!existsSync(SSHD)) throw new Error(`${SSHD} not found: apt-get install -y openssh-server (.ci/run does)`);
  const dir = mkdtempSync(join(tmpdir(), 'mw-sshd-'));
  chmodSync(dir, 0o755); // sshd's StrictModes: the path to authorized_keys must not be group/world writable
  const keygen = (file: string) => execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', file]);
  keygen(join(dir, 'host_key'));
  keygen(join(dir, 'client_key'));
  writeFileSync(join(dir, 'authorized_keys'), readFileSync(join(dir, 'client_key.pub')), { mode: 0o600 });
  const home = join(dir, 'home');
  mkdirSync(home, { mode: 0o700 });
  mkdirSync('/run/sshd', { recursive: true, mode: 0o755 }); // privilege separation folder sshd insists on
  const port = await freePort();
  const config = join(dir, 'sshd_config');
  writeFileSync(config, [
    `HostKey ${join(dir, 'host_key')}`,
    `ListenAddress 127.0.0.1`,
    `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
    `PasswordAuthentication no`,
    `KbdInteractiveAuthentication no`,
    `PubkeyAuthentication yes`,
    `UsePAM no`,
    `PidFile ${join(dir, 'sshd.pid')}`,
    `Subsystem sftp internal-sftp`,
    `ForceCommand internal-sftp`,
    `StrictModes no`,
    `PermitRootLogin prohibit-password`,
    `LogLevel ERROR`,
    '',
  ].join('\n'));
  const log = join(dir, 'sshd.log');
  const child = spawn(SSHD, ['-D', '-e', '-f', config, '-p', String(port), '-E', log], { stdio: 'ignore' });
  await waitForPort(port, child, log);
  const pub = readFileSync(join(dir, 'host_key.pub'), 'utf8').split(' ')[1]!;
  return {
    host: '127.0.0.1', port, username: userInfo().username, keyFile: join(dir, 'client_key'),
    hostKeySha256: hostKeyFingerprint(Buffer.from(pub, 'base64')), home,
    stop: async () => {
      if (child.exitCode === null) {
        child.kill('SIGTERM');
        await new Promise((r) => child.once('exit', r));
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
