/**
 * Which peers may speak for someone else: the reverse proxies config names in review.auth.trustedProxies (loopback
 * when it names none). Only their requests' user and client headers are read; anyone else's are not.
 */
import { BlockList, isIP } from 'node:net';
import { configError } from '../core/errors.js';

const MAPPED_V4 = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i;

/** An address as the connection reports it, IPv4-mapped IPv6 read as the IPv4 address it is. */
const plainAddress = (a: string) => MAPPED_V4.exec(a.trim())?.[1] ?? a.trim();

/** `10.0.0.7`, `fd00::1`, `10.0.0.0/8`, `fd00::/8`: what trustedProxies may hold (null when it is none of them). */
export function parseSubnet(text: string): { address: string; prefix: number; family: 'ipv4' | 'ipv6' } | null {
  const m = /^([^/]+)(?:\/(\d{1,3}))?$/.exec(text.trim());
  if (!m) return null;
  const address = plainAddress(m[1]!);
  const v = isIP(address);
  if (v === 0) return null;
  const max = v === 4 ? 32 : 128;
  const prefix = m[2] === undefined ? max : Number(m[2]);
  return prefix <= max ? { address, prefix, family: v === 4 ? 'ipv4' : 'ipv6' } : null;
}

const LOOPBACK = ['127.0.0.0/8', '::1'];

/** Whether a connection from `address` comes from a trusted proxy. */
export function trustedPeers(listed: readonly string[] | undefined): (address: string | undefined) => boolean {
  const peers = new BlockList();
  for (const text of listed ?? LOOPBACK) {
    const s = parseSubnet(text);
    if (!s) throw configError(`review.auth.trustedProxies: "${text}" is not an IP address or subnet (10.0.0.7, 10.0.0.0/8, fd00::/8)`);
    peers.addSubnet(s.address, s.prefix, s.family);
  }
  return (address) => {
    if (!address) return false;
    const a = plainAddress(address);
    const v = isIP(a);
    return v !== 0 && peers.check(a, v === 4 ? 'ipv4' : 'ipv6');
  };
}

/** A listen host only this machine can reach: 127.x, ::1, localhost (not 0.0.0.0, ::, or a real interface). */
export function isLoopbackHost(host: string): boolean {
  const h = plainAddress(host.replace(/^\[(.*)\]$/, '$1')).toLowerCase();
  if (h === 'localhost') return true;
  const v = isIP(h);
  return v !== 0 && isLoopbackPeer(h);
}

const isLoopbackPeer = trustedPeers(undefined);

/**
 * Headers that name someone (proxy mode's user, the client address for the sign-in limits) are only as good as
 * the peers allowed to send them: listening beyond loopback, config must name those peers, or anybody reaching
 * the port could send them.
 */
export function checkHeaderTrust(auth: { mode: string; clientHeader?: string | undefined; trustedProxies?: readonly string[] | undefined }, host: string): void {
  const readsHeaders = auth.mode === 'proxy' || auth.clientHeader !== undefined;
  if (!readsHeaders || auth.trustedProxies !== undefined || isLoopbackHost(host)) return;
  const what = auth.mode === 'proxy' ? 'proxy mode' : `review.auth.clientHeader (${auth.clientHeader})`;
  throw configError(`review.auth.trustedProxies: ${what} listening on ${host} (beyond loopback) needs the addresses of the proxies allowed to send its headers`);
}
