// Private redis-server / redis-sentinel processes for the deployment tests (TLS + ACL, Sentinel, Cluster), on free
// loopback ports in temp folders; every process started here is killed by stop(), or at exit if a test failed.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { Redis, type RedisOptions } from 'ioredis';
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

/**
 * A TCP relay the replica replicates through, so a test can hold back what the primary sends it: `hold()` keeps
 * every later byte of the replication stream here, and `cut()` drops the link with them undelivered, as if the
 * primary had died before sending them (asynchronous replication losing an acknowledged write, made exact).
 */
export interface ReplicationLink {
  port: number;
  hold(): void;
  cut(): void;
  close(): Promise<void>;
}

async function replicationLink(primaryPort: number): Promise<ReplicationLink> {
  let held = false;
  const pairs: Array<[Socket, Socket]> = [];
  const server: Server = createServer((replica) => {
    const primary = createConnection({ host: '127.0.0.1', port: primaryPort });
    const kept: Buffer[] = [];
    pairs.push([replica, primary]);
    replica.on('data', (c: Buffer) => primary.write(c));
    primary.on('data', (c: Buffer) => (held ? kept.push(c) : replica.write(c)));
    for (const s of [replica, primary]) s.on('error', () => {});
    replica.on('close', () => primary.destroy());
    primary.on('close', () => replica.destroy());
  });
  const port = await new Promise<number>((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port)));
  const cut = () => {
    for (const [r, p] of pairs.splice(0)) {
      r.destroy();
      p.destroy();
    }
  };
  return {
    port,
    hold: () => void (held = true),
    cut,
    close: () => new Promise<void>((resolve) => {
      cut();
      server.close(() => resolve());
    }),
  };
}

export interface SentinelSet {
  /** Present when the set was started with `link: true`: the replica's path to the primary. */
  link?: ReplicationLink;
  primary: RedisProc;
  replica: RedisProc;
  sentinels: RedisProc[];
  masterName: string;
  /** The `redis` config section that reaches this set through its sentinels. */
  config: { url: string; sentinels: Array<{ host: string; port: number }>; name: string };
  /**
   * Bring a killed node back on its port as a replica of `primary`, as a supervisor restarting it would once
   * Sentinel has converted it (its data is gone: it syncs from the primary). Stopped by stop() like the others.
   */
  rejoin(node: RedisProc, primary: RedisProc): Promise<RedisProc>;
  stop(): Promise<void>;
}

/**
 * A primary, one replica and three sentinels (quorum 2) watching them, with short failure detection so a killed
 * primary is replaced within seconds. Every process is stopped by stop(), whichever of them already died.
 */
export async function startSentinelSet(masterName = 'mw-primary', opts: { link?: boolean } = {}): Promise<SentinelSet> {
  const procs: RedisProc[] = [];
  let link: ReplicationLink | undefined;
  try {
    const primary = await startRedisProc([]);
    procs.push(primary);
    link = opts.link ? await replicationLink(primary.port) : undefined;
    const replica = await startRedisProc([`replicaof 127.0.0.1 ${link?.port ?? primary.port}`]);
    procs.push(replica);
    const sentinels: RedisProc[] = [];
    for (let i = 0; i < 3; i++) {
      const s = await startRedisProc([
        `sentinel monitor ${masterName} 127.0.0.1 ${primary.port} 2`,
        `sentinel down-after-milliseconds ${masterName} 1000`,
        // Through a link, the replica names another master port than the primary's; Sentinel corrects such a
        // replica only after failover-timeout, so it is longer than any test then.
        `sentinel failover-timeout ${masterName} ${link ? 600_000 : 10_000}`,
        `sentinel parallel-syncs ${masterName} 1`,
      ], { sentinel: true });
      procs.push(s);
      sentinels.push(s);
    }
    return {
      link, primary, replica, sentinels, masterName,
      config: { url: 'redis://127.0.0.1:1', sentinels: sentinels.map((s) => ({ host: '127.0.0.1', port: s.port })), name: masterName },
      async rejoin(node, to) {
        await stopRedisProc(node, 'SIGKILL');
        const back = await startRedisProc([`replicaof 127.0.0.1 ${to.port}`], { port: node.port });
        procs.push(back);
        return back;
      },
      async stop() {
        for (const p of procs) await stopRedisProc(p, 'SIGKILL');
        await link?.close();
      },
    };
  } catch (err) {
    for (const p of procs) await stopRedisProc(p, 'SIGKILL');
    await link?.close();
    throw err;
  }
}

export interface ClusterSet {
  nodes: RedisProc[];
  config: { url: string; cluster: { nodes: Array<{ host: string; port: number }> } };
  stop(): Promise<void>;
}

/** Three cluster-enabled redis-servers joined by `redis-cli --cluster create` (no replicas), ready when all say ok. */
export async function startClusterSet(): Promise<ClusterSet> {
  const nodes: RedisProc[] = [];
  const stop = async () => {
    for (const n of nodes) await stopRedisProc(n, 'SIGKILL');
  };
  try {
    for (let i = 0; i < 3; i++) nodes.push(await startRedisProc(['cluster-enabled yes', 'cluster-config-file nodes.conf', 'cluster-node-timeout 5000']));
    execFileSync('redis-cli', ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'], { stdio: 'ignore', timeout: 30_000 });
    for (const n of nodes) {
      for (let i = 0; ; i++) {
        const info = execFileSync('redis-cli', ['-p', String(n.port), 'cluster', 'info'], { encoding: 'utf8' });
        if (/cluster_state:ok/.test(info)) break;
        if (i > 200) throw new Error(`cluster node ${n.port} not ok: ${info.split('\n')[0]}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    const list = nodes.map((n) => ({ host: '127.0.0.1', port: n.port }));
    return { nodes, config: { url: 'redis://127.0.0.1:1', cluster: { nodes: list } }, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** The role a node reports now, from a fresh connection (Sentinel drops every client of a node it reconfigures). */
export async function roleOf(port: number): Promise<string | null> {
  const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  c.on('error', () => {});
  try {
    await c.connect();
    return String((await c.role())[0]);
  } catch {
    return null;
  } finally {
    c.disconnect();
  }
}
