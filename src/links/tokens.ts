import { createHmac, timingSafeEqual } from 'node:crypto';
import { configError } from '../core/errors.js';
import type { Instant } from '../time/instants.js';

/**
 * Signed links: `base64url(payload).base64url(HMAC-SHA256(key, "memory-warden review link v1\n" + payload))`.
 * The payload names the store, the item the link points at (or `*`) and when it stops opening the page. Nothing
 * in it is secret; everything in it is bound by the signature, so a changed store, item or expiry fails.
 */
export interface LinkClaims {
  store: string;
  /** The memory the link points at, or `*` for the store's whole page. */
  item: string;
  /** Milliseconds since the epoch; the link opens nothing from then on. */
  expires: Instant;
}

export type TokenCheck = { ok: true; claims: LinkClaims } | { ok: false; reason: 'malformed' | 'bad-signature' | 'expired'; expires?: Instant };

const CONTEXT = 'memory-warden review link v1\n';
export const MIN_KEY_CHARS = 32;

/** The signing key from the environment variable config names; a missing or short key is a config error. */
export function reviewKey(envName: string, env: NodeJS.ProcessEnv = process.env): Buffer {
  const v = env[envName];
  if (v === undefined || v === '') throw configError(`review.secretEnv: environment variable ${envName} is not set (the key that signs review links)`);
  if (v.length < MIN_KEY_CHARS) throw configError(`review.secretEnv: ${envName} is shorter than ${MIN_KEY_CHARS} characters; use e.g. \`openssl rand -base64 32\``);
  return Buffer.from(v, 'utf8');
}

const mac = (key: Buffer, payload: string) => createHmac('sha256', key).update(CONTEXT + payload).digest();

export function signLink(key: Buffer, claims: LinkClaims): string {
  const payload = Buffer.from(JSON.stringify({ s: claims.store, i: claims.item, e: claims.expires }), 'utf8').toString('base64url');
  return `${payload}.${mac(key, payload).toString('base64url')}`;
}

/** Signature first (constant time), then the expiry: an unsigned payload is never even parsed. */
export function verifyLink(key: Buffer, token: string, now: Instant): TokenCheck {
  const m = /^([A-Za-z0-9_-]{1,2048})\.([A-Za-z0-9_-]{43})$/.exec(token);
  if (!m) return { ok: false, reason: 'malformed' };
  const given = Buffer.from(m[2]!, 'base64url');
  const want = mac(key, m[1]!);
  if (given.length !== want.length || !timingSafeEqual(given, want)) return { ok: false, reason: 'bad-signature' };
  let p: { s?: unknown; i?: unknown; e?: unknown };
  try {
    p = JSON.parse(Buffer.from(m[1]!, 'base64url').toString('utf8')) as typeof p;
  } catch {
    return { ok: false, reason: 'malformed' };
  }
  if (typeof p.s !== 'string' || typeof p.i !== 'string' || typeof p.e !== 'number') return { ok: false, reason: 'malformed' };
  if (now >= p.e) return { ok: false, reason: 'expired', expires: p.e };
  return { ok: true, claims: { store: p.s, item: p.i, expires: p.e } };
}

/** The page's fragment for one item: ids are hostile text, so the anchor is derived from them, never made of them. */
export function itemAnchor(memoryId: string): string {
  return `m-${createHmac('sha256', 'anchor').update(memoryId).digest('hex').slice(0, 16)}`;
}
