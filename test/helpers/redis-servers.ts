// Private redis-server / redis-sentinel processes for the deployment tests (TLS + ACL, Sentinel, Cluster), on free
// loopback ports in temp folders; every process started here is killed by stop(), or at exit if a test failed.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RedisOptions } from 'ioredis';
import { freePort, reachable } from './redis.js';

const started = new Set<ChildProcess>();
process.once('exit', () => {
  for (const p of started) p.kill('SIGKILL');
});

export interface RedisProc {
  port: number;
  proc: ChildProcess;
  dir: string;
}

/** Start one redis-server (or redis-sentinel with `sentinel: true`) from a config file; resolves once it answers. */
export async function startRedisProc(lines: string[], opts: { sentinel?: boolean; port?: number; probe?: RedisOptions } = {}): Promise<RedisProc> {
  const port = opts.port ?? (await freePort());
  const dir = mkdtempSync(join(tmpdir(), 'mw-redis-'));
  const conf = join(dir, 'redis.conf');
  writeFileSync(conf, [`bind 127.0.0.1`, `port ${port}`, `dir ${dir}`, `save ""`, `appendonly no`, ...lines, ''].join('\n'));
  const proc = spawn(opts.sentinel ? 'redis-sentinel' : 'redis-server', [conf], { stdio: 'ignore' });
  started.add(proc);
  proc.once('exit', () => started.delete(proc));
  const failed = new Promise<never>((_, reject) => proc.once('error', (err) => reject(new Error(`cannot start ${opts.sentinel ? 'redis-sentinel' : 'redis-server'} (${err.message}); install it`))));
  for (let i = 0; i < 200; i++) {
    if (await Promise.race([reachable({ host: '127.0.0.1', port, ...opts.probe }), failed])) return { port, proc, dir };
    await new Promise((r) => setTimeout(r, 50));
  }
  await stopRedisProc({ port, proc, dir });
  throw new Error(`redis on port ${port} did not answer`);
}

export async function stopRedisProc(p: RedisProc, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (p.proc.exitCode === null && p.proc.signalCode === null) {
    const exited = new Promise((r) => p.proc.once('exit', r));
    p.proc.kill(signal);
    await exited;
  }
  rmSync(p.dir, { recursive: true, force: true });
}

export interface TlsFiles {
  dir: string;
  ca: string;
  cert: string;
  key: string;
  /** A second CA that signed nothing here: the "wrong CA". */
  otherCa: string;
}

/** A CA and a server certificate for 127.0.0.1 signed by it, plus an unrelated CA, made with openssl. */
export function makeTlsFiles(): TlsFiles {
  const dir = mkdtempSync(join(tmpdir(), 'mw-tls-'));
  const f = (n: string) => join(dir, n);
  const ssl = (...args: string[]) => execFileSync('openssl', args, { stdio: 'ignore' });
  for (const ca of ['ca', 'other-ca']) {
    ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', `/CN=memory-warden test ${ca}`, '-keyout', f(`${ca}.key`), '-out', f(`${ca}.pem`));
  }
  ssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=127.0.0.1', '-keyout', f('server.key'), '-out', f('server.csr'));
  writeFileSync(f('san.ext'), 'subjectAltName=IP:127.0.0.1\n');
  ssl('x509', '-req', '-in', f('server.csr'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'), '-CAcreateserial', '-days', '2', '-extfile', f('san.ext'), '-out', f('server.pem'));
  return { dir, ca: f('ca.pem'), cert: f('server.pem'), key: f('server.key'), otherCa: f('other-ca.pem') };
}

/**
 * A redis-server that speaks only TLS on its port and knows one ACL user (the default user is off), as managed
 * Redis offerings are set up.
 */
export async function startTlsRedis(tls: TlsFiles, user: string, password: string): Promise<RedisProc> {
  const port = await freePort();
  return startRedisProc(
    ['port 0', `tls-port ${port}`, `tls-cert-file ${tls.cert}`, `tls-key-file ${tls.key}`, `tls-ca-cert-file ${tls.ca}`, 'tls-auth-clients no', 'user default off', `user ${user} on >${password} ~* &* +@all`],
    { port, probe: { username: user, password, tls: { ca: readFileSync(tls.ca) } } },
  );
}
