/** Proxy mode: the user header read only from trusted proxies; serve refuses beyond loopback without them. */
import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, silentLogger } from '../../src/log/logger.js';
import { validateConfig } from '../../src/config/config.js';
import { startReviewServer } from '../../src/review-web/server.js';
import { checkHeaderTrust, isLoopbackHost, parseSubnet, trustedPeers } from '../../src/review-web/proxies.js';
import { cli } from '../helpers/cli.js';
import { NOW, startSite, type Site } from './fixtures.js';
import { linkToken } from './http.js';

/**
 * Proxy mode reads who decides from a header, so only the proxy may send it: a direct client naming itself
 * the-cto is nobody. Clients on this host are told apart by their loopback addresses (all of 127/8 is local;
 * IPv4 clients of a server on `::` arrive IPv4-mapped, ::ffff:127.0.0.x).
 */
interface Sent {
  status: number;
  cookie: string | undefined;
  text: string;
}

function send(port: number, to: string, from: string, path: string, headers: Record<string, string> = {}): Promise<Sent> {
  return new Promise((resolve, reject) => {
    const req = request({ host: to, port, path, method: 'GET', localAddress: from, headers }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, cookie: res.headers['set-cookie']?.[0]?.split(';')[0], text }));
    });
    req.on('error', reject);
    req.end();
  });
}

const ROWS = [{ id: 'm_pnpm', fact: 'prefers pnpm', confirmed_at: '2026-01-01 00:00:00' }];
const portOf = (site: Site) => Number(new URL(site.url).port);
const open = `/open?t=${linkToken('agent', NOW)}`;

describe('proxy mode trusts its user header only from the proxies config names', { timeout: 60_000 }, () => {
  let site: Site;
  afterEach(async () => {
    await site?.close();
  });

  it('a client that is not a listed proxy is not signed in, whatever it says; the proxy is', async () => {
    site = await startSite({
      rows: ROWS,
      review: { listen: { host: '::', port: 0 }, auth: { mode: 'proxy', userHeader: 'X-Forwarded-User', trustedProxies: ['127.0.0.2', 'fd00::/8'] } },
    });
    const port = portOf(site);
    const cto = { 'X-Forwarded-User': 'the-cto' };
    // Direct clients: IPv4 (IPv4-mapped on the server's side), another loopback address, IPv6 loopback.
    for (const [to, from] of [['127.0.0.1', '127.0.0.1'], ['127.0.0.3', '127.0.0.3'], ['::1', '::1']] as const) {
      const r = await send(port, to, from, open, cto);
      expect(r.status, from).toBe(401);
      expect(r.cookie, from).toBeUndefined();
      expect(r.text).not.toContain('the-cto');
    }
    const viaProxy = await send(port, '127.0.0.1', '127.0.0.2', open, cto);
    expect(viaProxy.status).toBe(200);
    expect(viaProxy.text).toContain('Signed in as the-cto');
    // The proxy's session cookie, replayed directly with the header, opens nothing either.
    const replay = await send(port, '127.0.0.1', '127.0.0.3', '/store/agent', { ...cto, cookie: viaProxy.cookie! });
    expect(replay.status).toBe(401);
    expect((await send(port, '127.0.0.1', '127.0.0.2', '/store/agent', { ...cto, cookie: viaProxy.cookie! })).status).toBe(200);
  });

  it('proxy mode without a user header: only requests through a trusted proxy open the page', async () => {
    site = await startSite({ rows: ROWS, review: { listen: { host: '::', port: 0 }, auth: { mode: 'proxy', trustedProxies: ['127.0.0.2'] } } });
    const port = portOf(site);
    expect((await send(port, '127.0.0.1', '127.0.0.4', open)).status).toBe(401);
    expect((await send(port, '::1', '::1', open)).status).toBe(401);
    expect((await send(port, '127.0.0.1', '127.0.0.2', open)).status).toBe(200);
  });

  it('without trustedProxies: loopback is the proxy, and listening beyond loopback is refused before it starts', async () => {
    const config = (host: string, auth: Record<string, unknown>) =>
      validateConfig({ stores: { agent: { db: '/nonexistent/agent.db' } }, review: { listen: { host, port: 0 }, auth } });
    for (const host of ['0.0.0.0', '::', '192.0.2.10', '::ffff:0.0.0.0', '2001:db8::1']) {
      for (const auth of [{ mode: 'proxy', userHeader: 'X-Forwarded-User' }, { mode: 'proxy' }, { mode: 'password', clientHeader: 'X-Forwarded-For' }]) {
        const c = config(host, auth);
        await expect(startReviewServer({ config: c, log: silentLogger, env: { MEMORY_WARDEN_REVIEW_KEY: 'k'.repeat(40), MEMORY_WARDEN_REVIEW_PASSWORD: 'x'.repeat(12) } }), `${host} ${JSON.stringify(auth)}`)
          .rejects.toThrow(/^review\.auth\.trustedProxies: .*\(beyond loopback\)/);
      }
    }
    for (const host of ['127.0.0.1', '127.1.2.3', '::1', '[::1]', 'localhost', '::ffff:127.0.0.1']) {
      expect(isLoopbackHost(host), host).toBe(true);
      expect(() => checkHeaderTrust(config('127.0.0.1', { mode: 'proxy' }).review.auth, host)).not.toThrow();
    }
    // Password mode without a client header reads no header: it may listen anywhere.
    expect(() => checkHeaderTrust(config('0.0.0.0', { mode: 'password' }).review.auth, '0.0.0.0')).not.toThrow();
    const loopback = trustedPeers(undefined);
    expect(['127.0.0.1', '127.9.9.9', '::1', '::ffff:127.0.0.1'].map(loopback)).toEqual([true, true, true, true]);
    expect(['10.0.0.1', '::ffff:10.0.0.1', '::', '0.0.0.0', 'fe80::1', undefined, 'garbage'].map(loopback)).toEqual(Array(7).fill(false));
  });

  it('serve in proxy mode on 0.0.0.0 without trustedProxies: exit 2, one line naming the field', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mw-proxy-serve-'));
    try {
      const file = `${dir}/warden.yaml`;
      writeFileSync(file, `stateDb: ./state.db\nstores:\n  agent:\n    db: ./agent.db\nreview:\n  listen: { host: 0.0.0.0, port: 0 }\n  auth: { mode: proxy, userHeader: X-Forwarded-User }\n`);
      const r = cli(['serve', '--config', file], { MEMORY_WARDEN_REVIEW_KEY: 'k'.repeat(40) });
      expect(r.code).toBe(2);
      expect(r.stderr.trim().split('\n')).toEqual([
        'memory-warden: review.auth.trustedProxies: proxy mode listening on 0.0.0.0 (beyond loopback) needs the addresses of the proxies allowed to send its headers',
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('trustedProxies holds addresses and subnets only: anything else is a config error naming the field', () => {
    for (const good of ['10.0.0.7', '10.0.0.0/8', 'fd00::/8', '::1', '::ffff:10.0.0.7', '0.0.0.0/0']) expect(parseSubnet(good), good).not.toBeNull();
    for (const bad of ['', 'proxy.internal', '10.0.0.0/33', 'fd00::/129', '10.0.0.7/', '10.0.0', '*', ' ']) {
      expect(parseSubnet(bad), bad).toBeNull();
      expect(() => validateConfig({ review: { auth: { mode: 'proxy', trustedProxies: [bad] } } }), bad).toThrow(/review\.auth\.trustedProxies\.0/);
    }
  });

  it('listening beyond loopback says so in the log; on loopback it does not', async () => {
    for (const [host, warned] of [['::', true], ['0.0.0.0', true], ['127.0.0.1', false], ['::1', false]] as const) {
      const lines: { msg: string; level: number }[] = [];
      const log = createLogger({ level: 'debug', destination: { write: (s: string) => lines.push(JSON.parse(s) as { msg: string; level: number }) } as unknown as NodeJS.WritableStream });
      site = await startSite({ rows: ROWS, log, review: { listen: { host, port: 0 } } });
      expect(lines.some((l) => l.level === 40 && l.msg.startsWith('review page listening beyond loopback over plain HTTP')), host).toBe(warned);
      await site.close();
    }
  });
});

