import type { Context } from 'hono';
import { getCookie, setCookie } from 'hono/cookie';
import type { Config } from '../config/config.js';
import type { Logger } from '../log/logger.js';
import type { Clock } from '../time/instants.js';
import { reviewKey, verifyLink, type LinkClaims } from '../links/tokens.js';
import { makeAuthenticator, type Authenticator } from './auth.js';
import { Sessions, type Session } from './sessions.js';
import { messagePage, storePage, type PageContext } from './pages.js';
import { ALL_CORRECTIONS, type CorrectionAction } from '../layouts/contract.js';
import { clientKey, SignInLimits } from './sign-in-limits.js';
import { getConnInfo } from '@hono/node-server/conninfo';
import { readQueue } from './decide.js';
import { trustedPeers } from './proxies.js';
import { foreignOrigin } from './same-origin.js';
import { storeElsewhere, thisHost } from '../queue/hosts.js';
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { configError } from '../core/errors.js';

export type Status = 400 | 401 | 403 | 404 | 405 | 409 | 410 | 413 | 429 | 500 | 503;
const COOKIE = 'mw_review';
/** The sign-in form's token, also set as a cookie: a page elsewhere can submit the form, but cannot read the cookie. */
const LOGIN_COOKIE = 'mw_login';

/**
 * What every route of the review page shares: the signing key, the sign-in, the sessions, and the few steps that
 * several routes take (check a link, find the request's session, draw a store's page, explain a refusal).
 */
export class ReviewSite {
  readonly key: Buffer;
  readonly auth: Authenticator;
  readonly sessions = new Sessions();
  readonly failures: SignInLimits;
  /** The path the page lives under behind a proxy (review.url's path), '' at the root. */
  readonly base: string;
  private readonly secure: boolean;
  private readonly sessionMs: number;
  private readonly trustedPeer: (address: string | undefined) => boolean;

  constructor(readonly config: Config, readonly log: Logger, readonly now: Clock, env?: NodeJS.ProcessEnv) {
    // Each setting the page needs is read before either refuses: one line names every one that is missing.
    const key = settled(() => reviewKey(config.review.secretEnv, env));
    const auth0 = settled(() => makeAuthenticator(config.review.auth, env));
    const missing = [key, auth0].filter((r): r is { error: Error } => 'error' in r);
    if (missing.length === 1) throw missing[0]!.error;
    if (missing.length > 1) throw configError(missing.map((r) => r.error.message).join('; '));
    this.key = (key as { value: Buffer }).value;
    this.auth = (auth0 as { value: Authenticator }).value;
    const auth = this.auth;
    this.failures = new SignInLimits(auth.mode === 'proxy' ? undefined : (user) => auth.account(user));
    this.base = config.review.url ? new URL(config.review.url).pathname.replace(/\/+$/, '') : '';
    this.secure = config.review.url?.startsWith('https:') ?? false;
    this.sessionMs = config.review.sessionHours * 3_600_000;
    this.trustedPeer = trustedPeers(config.review.auth.trustedProxies);
  }

  message(c: Context, status: Status, title: string, text: string, back?: string): Response {
    return c.html(messagePage(this.base, title, text, back), status);
  }

  storeUrl(store: string): string {
    return `${this.base}/store/${encodeURIComponent(store)}`;
  }

  /**
   * In proxy mode the user is whoever the proxy names, when config trusts its header; null: the proxy named nobody,
   * or the request did not come through a trusted proxy (whatever headers it carries).
   */
  proxyUser(c: Context): string | null {
    if (this.auth.mode !== 'proxy') return null;
    if (!this.fromProxy(c)) return null;
    if (!this.auth.userHeader) return 'review page (behind proxy)';
    const v = c.req.header(this.auth.userHeader)?.trim();
    return v && v.length <= 200 ? v : null;
  }

  startSession(c: Context, claims: LinkClaims, user: string): Session {
    const s = this.sessions.create(claims.store, user, this.now() + this.sessionMs, this.now());
    setCookie(c, COOKIE, s.id, { httpOnly: true, sameSite: 'Strict', secure: this.secure, path: this.base || '/', maxAge: Math.floor(this.sessionMs / 1000) });
    return s;
  }

  /**
   * The token the sign-in form carries: the browser's own (a cookie only this page can set or read), made now
   * when it has none. A sign-in whose form does not carry it came from somewhere else.
   */
  loginToken(c: Context): string {
    const had = getCookie(c, LOGIN_COOKIE);
    if (had && /^[A-Za-z0-9_-]{32}$/.test(had)) return had;
    const token = randomBytes(24).toString('base64url');
    setCookie(c, LOGIN_COOKIE, token, { httpOnly: true, sameSite: 'Strict', secure: this.secure, path: this.base || '/', maxAge: 24 * 3600 });
    return token;
  }

  /** Whether a sign-in form carries this browser's login token. */
  loginTokenMatches(c: Context, field: string | undefined): boolean {
    const had = getCookie(c, LOGIN_COOKIE);
    if (!had || field === undefined) return false;
    const [a, b] = [Buffer.from(had), Buffer.from(field)];
    return a.length === b.length && timingSafeEqual(a, b);
  }

  /** A POST from a page on another origin, or whose form does not carry the token of this browser: refused. */
  refusedForeign(c: Context, what: string, back?: string): Response | undefined {
    const why = foreignOrigin(c, this.config.review.url);
    if (why === undefined) return undefined;
    this.log.warn({ path: c.req.path, why }, 'review page: form from another origin refused');
    return this.message(c, 403, 'Form not accepted', `This ${what} was ${why}, not from the review page. Nothing changed.`, back);
  }

  /** The request's session, whatever store it covers. */
  session(c: Context): Session | undefined {
    return this.sessions.get(getCookie(c, COOKIE), this.now());
  }

  /**
   * Who is asking, for the sign-in limits: the connection's address, or behind a reverse proxy the address the
   * proxy names in `auth.clientHeader` (its last entry: the one the proxy itself added). Trusted only when named.
   */
  client(c: Context): string {
    const header = this.config.review.auth.clientHeader;
    const named = header && this.fromProxy(c) ? c.req.header(header)?.split(',').at(-1)?.trim() : undefined;
    return clientKey(named ? named.slice(0, 100) : getConnInfo(c).remote.address ?? 'unknown');
  }

  /** Whether the connection comes from a proxy config trusts to name the user and the client. */
  fromProxy(c: Context): boolean {
    return this.trustedPeer(getConnInfo(c).remote.address);
  }

  /** The session this request carries, if it covers `store` (and, behind a proxy, the same person). */
  sessionFor(c: Context, store: string): Session | undefined {
    const s = this.session(c);
    if (!s || s.store !== store) return undefined;
    if (this.auth.mode === 'proxy' && this.proxyUser(c) !== s.user) return undefined;
    return s;
  }

  /** The link's claims, or the page that says why it opens nothing (never a stack trace). */
  checkLink(c: Context, token: string): LinkClaims | Response {
    const r = verifyLink(this.key, token, this.now());
    if (r.ok) {
      if (!this.config.stores[r.claims.store]) return this.message(c, 404, 'No such store', 'This link names a store that is not in the configuration any more.');
      // Every session starts here: a store another machine holds is never opened at its path on this one.
      const host = storeElsewhere(this.config, r.claims.store);
      if (host !== null) return this.message(c, 409, 'This store lives on another machine', `Store ${r.claims.store} lives on host ${host}: its review page is the one served there, not this one (host ${thisHost(this.config)}). Nothing was opened or changed.`);
      return r.claims;
    }
    if (r.reason === 'expired') {
      const when = new Date(r.expires!).toISOString().slice(0, 16).replace('T', ' ');
      return this.message(c, 410, 'This link has expired', `Review links open the page for ${this.config.review.tokenDays} days; this one expired at ${when} UTC. The next digest carries fresh links.`);
    }
    return this.message(c, 400, 'This link is not valid', 'The link is damaged or was not made by this memory-warden (its signature does not match). Open the page from the digest email.');
  }

  async showStore(c: Context, s: Session, item?: string): Promise<Response> {
    const queue = await readQueue(this.config, s.store, this.now());
    const { list, corrections } = queue;
    const listed = [...list.pending.map((p) => p.memoryId), ...list.next.map((m) => m.id)];
    const gone = item !== undefined && item !== '*' && !listed.includes(item);
    const notice = gone ? 'The item this link points at no longer waits for review: it was decided already, or is not due any more.' : undefined;
    return c.html(storePage(this.pageContext(s, corrections), queue, notice));
  }

  /** What drawing a page of this session's store takes: each form gets a nonce of the session. */
  pageContext(s: Session, corrections: readonly CorrectionAction[] = ALL_CORRECTIONS): PageContext {
    return { base: this.base, store: s.store, user: s.user, corrections, now: this.now(), nonce: () => this.sessions.issue(s) };
  }
}

/** What `read` returns, or what it throws. */
function settled<T>(read: () => T): { value: T } | { error: Error } {
  try {
    return { value: read() };
  } catch (error) {
    return { error: error as Error };
  }
}
