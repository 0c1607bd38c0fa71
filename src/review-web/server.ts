import { Hono, type Context } from 'hono';
import { getCookie, setCookie } from 'hono/cookie';
import { bodyLimit } from 'hono/body-limit';
import { serve, type ServerType } from '@hono/node-server';
import type { AddressInfo } from 'node:net';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { systemClock, type Clock } from '../time.js';
import { reviewKey, verifyLink, itemAnchor, type LinkClaims } from './tokens.js';
import { makeAuthenticator } from './auth.js';
import { Sessions, type Session } from './sessions.js';
import { loginPage, messagePage, storePage } from './pages.js';
import { decide, decisionText, readQueue, type DecisionForm } from './decide.js';
import { REVIEW_CSS } from './style.js';

export interface ReviewServerOptions {
  config: Config;
  log: Logger;
  now?: Clock;
  env?: NodeJS.ProcessEnv;
  /** Overrides review.listen (tests bind port 0). */
  listen?: { host: string; port: number };
}

export interface ReviewServer {
  url: string;
  close(): Promise<void>;
}

const CSP = "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
const COOKIE = 'mw_review';

/**
 * The review page: GET opens and shows, only POST decides. A signed link opens the page for its store (after the
 * sign-in, unless a proxy in front did that) and starts a session bound to that store; each decision is a POST
 * carrying a one-time form nonce of that session.
 */
export function reviewApp(opts: ReviewServerOptions): Hono {
  const { config, log } = opts;
  const now = opts.now ?? systemClock;
  const key = reviewKey(config.review.secretEnv, opts.env);
  const auth = makeAuthenticator(config.review.auth, opts.env);
  const sessions = new Sessions();
  const failures = new FailedSignIns();
  const base = config.review.url ? new URL(config.review.url).pathname.replace(/\/+$/, '') : '';
  const secure = config.review.url?.startsWith('https:') ?? false;
  const sessionMs = config.review.sessionHours * 3_600_000;
  const app = new Hono();

  app.use(async (c, next) => {
    await next();
    c.header('Content-Security-Policy', CSP);
    c.header('X-Content-Type-Options', 'nosniff');
    c.header('Referrer-Policy', 'no-referrer');
    c.header('X-Frame-Options', 'DENY');
    c.header('Cache-Control', 'no-store');
  });
  app.use(bodyLimit({ maxSize: 64 * 1024, onError: (c) => c.html(messagePage(base, 'Too large', 'That form was too large. Nothing changed.'), 413) }));

  const message = (c: Context, status: 400 | 401 | 403 | 404 | 405 | 409 | 410 | 429 | 500 | 503, title: string, text: string, back?: string) =>
    c.html(messagePage(base, title, text, back), status);
  const storeUrl = (store: string) => `${base}/store/${encodeURIComponent(store)}`;

  /** In proxy mode the user is whoever the proxy names, when config trusts its header; null: the proxy named nobody. */
  const proxyUser = (c: Context): string | null => {
    if (auth.mode !== 'proxy') return null;
    if (!auth.userHeader) return 'review page (behind proxy)';
    const v = c.req.header(auth.userHeader)?.trim();
    return v && v.length <= 200 ? v : null;
  };

  const startSession = (c: Context, claims: LinkClaims, user: string): Session => {
    const s = sessions.create(claims.store, user, now() + sessionMs, now());
    setCookie(c, COOKIE, s.id, { httpOnly: true, sameSite: 'Strict', secure, path: base || '/', maxAge: Math.floor(sessionMs / 1000) });
    return s;
  };

  /** The session this request carries, if it covers `store` (and, behind a proxy, the same person). */
  const sessionFor = (c: Context, store: string): Session | undefined => {
    const s = sessions.get(getCookie(c, COOKIE), now());
    if (!s || s.store !== store) return undefined;
    if (auth.mode === 'proxy' && proxyUser(c) !== s.user) return undefined;
    return s;
  };

  const checkLink = (c: Context, token: string): LinkClaims | Response => {
    const r = verifyLink(key, token, now());
    if (r.ok) {
      if (!config.stores[r.claims.store]) return message(c, 404, 'No such store', 'This link names a store that is not in the configuration any more.');
      return r.claims;
    }
    if (r.reason === 'expired') {
      const when = new Date(r.expires!).toISOString().slice(0, 16).replace('T', ' ');
      return message(c, 410, 'This link has expired', `Review links open the page for ${config.review.tokenDays} days; this one expired at ${when} UTC. The next digest carries fresh links.`);
    }
    return message(c, 400, 'This link is not valid', 'The link is damaged or was not made by this memory-warden (its signature does not match). Open the page from the digest email.');
  };

  const showStore = async (c: Context, s: Session, item?: string) => {
    const { list, history, corrections } = await readQueue(config, s.store, now());
    const linked = item && item !== '*' && ![...list.pending.map((p) => p.memoryId), ...list.next.map((m) => m.id)].includes(item);
    const notice = linked ? 'The item this link points at no longer waits for review: it was decided already, or is not due any more.' : undefined;
    const ctx = { base, store: s.store, user: s.user, corrections, now: now(), nonce: () => sessions.issue(s) };
    return c.html(storePage(ctx, list, history, notice));
  };

  app.get('/static/review.css', (c) => c.body(REVIEW_CSS, 200, { 'Content-Type': 'text/css; charset=utf-8' }));
  app.get('/', (c) => message(c, 404, 'memory-warden review', 'Open this page from a link in the digest email.'));

  app.get('/open', async (c) => {
    const claims = checkLink(c, c.req.query('t') ?? '');
    if (claims instanceof Response) return claims;
    const existing = sessions.get(getCookie(c, COOKIE), now());
    if (auth.mode === 'proxy') {
      const user = proxyUser(c);
      if (user === null) return message(c, 401, 'Not signed in', `The proxy in front of this page did not name a user (${config.review.auth.userHeader}).`);
      const s = existing && existing.store === claims.store && existing.user === user ? existing : startSession(c, claims, user);
      return showStore(c, s, claims.item);
    }
    if (existing && existing.store === claims.store) return showStore(c, existing, claims.item);
    return c.html(loginPage(base, claims.store, c.req.query('t') ?? '', auth.mode, false), 200);
  });

  app.post('/login', async (c) => {
    if (auth.mode === 'proxy') return message(c, 404, 'Not here', 'Sign-in is done by the proxy in front of this page.');
    const form = await c.req.parseBody();
    const token = typeof form.t === 'string' ? form.t : '';
    const claims = checkLink(c, token);
    if (claims instanceof Response) return claims;
    const user = typeof form.user === 'string' ? form.user.slice(0, 64) : '';
    if (failures.blocked(now())) return message(c, 429, 'Too many failed sign-ins', 'Sign-in is paused for a few minutes after many wrong passwords. Nothing changed.');
    const who = auth.check(user, typeof form.password === 'string' ? form.password : '');
    if (who === null) {
      failures.add(now());
      log.warn({ store: claims.store }, 'review page: failed sign-in');
      return c.html(loginPage(base, claims.store, token, auth.mode, true), 401);
    }
    startSession(c, claims, who);
    log.info({ store: claims.store, user: who }, 'review page: signed in');
    return c.redirect(`${storeUrl(claims.store)}${claims.item === '*' ? '' : `#${itemAnchor(claims.item)}`}`, 303);
  });

  app.get('/store/:store', async (c) => {
    const s = sessionFor(c, c.req.param('store'));
    if (!s) return message(c, 401, 'Not signed in for this store', 'Open the page from a link in the digest email.');
    return showStore(c, s);
  });

  app.on(['GET', 'HEAD', 'PUT', 'DELETE', 'PATCH'], '/store/:store/decide', (c) =>
    message(c, 405, 'Decisions are made with the buttons', 'Opening this address decides nothing; use the buttons on the review page. Nothing changed.', storeUrl(c.req.param('store'))),
  );

  app.post('/store/:store/decide', async (c) => {
    const store = c.req.param('store');
    const s = sessionFor(c, store);
    if (!s) return message(c, 401, 'Not signed in for this store', 'Open the page from a link in the digest email. Nothing changed.');
    const body = await c.req.parseBody();
    const field = (k: string) => (typeof body[k] === 'string' ? (body[k] as string) : undefined);
    const spent = sessions.spend(s, field('csrf') ?? '');
    if (spent === 'replayed') return message(c, 409, 'Already sent', 'This form was sent before (a reload or a replay); it was acted on once. Nothing changed now.', storeUrl(store));
    if (spent === 'unknown') return message(c, 403, 'Form not accepted', 'This form did not come from your session of the review page. Nothing changed.', storeUrl(store));
    const form: DecisionForm = { action: field('action') ?? '', id: field('id') ?? '', seen: field('seen') ?? '', fact: field('fact'), source: field('source'), days: field('days') };
    const out = await decide(config, store, s.user, form, now());
    if (!out.ok) return message(c, out.status, 'Not done', out.message, storeUrl(store));
    log.info({ store, user: s.user, action: out.decision.action, id: out.decision.id }, 'review page: decision');
    return c.html(messagePage(base, 'Done', decisionText(out.decision), storeUrl(store)));
  });

  app.notFound((c) => message(c, 404, 'Not found', 'Nothing here. Open the review page from a link in the digest email.'));
  app.onError((err, c) => {
    log.error({ err: err.message, path: c.req.path }, 'review page: request failed');
    return message(c, 500, 'Something went wrong', 'The request failed; it is in the log. If it was a decision, check the queue before trying again.');
  });
  return app;
}

/**
 * A guessing brake for the built-in sign-in: past MAX failures in WINDOW nobody signs in until the window moves on.
 * Guessing needs a valid link first (they only travel in the digest); this bounds what a leaked link allows.
 */
class FailedSignIns {
  private static readonly MAX = 20;
  private static readonly WINDOW_MS = 10 * 60_000;
  private times: number[] = [];
  add(at: number): void {
    this.times.push(at);
  }
  blocked(at: number): boolean {
    this.times = this.times.filter((t) => at - t < FailedSignIns.WINDOW_MS);
    return this.times.length >= FailedSignIns.MAX;
  }
}

export async function startReviewServer(opts: ReviewServerOptions): Promise<ReviewServer> {
  const app = reviewApp(opts);
  const listen = opts.listen ?? opts.config.review.listen;
  let server: ServerType | undefined;
  const addr = await new Promise<AddressInfo>((resolve, reject) => {
    server = serve({ fetch: app.fetch, port: listen.port, hostname: listen.host }, (info) => resolve(info));
    server.once('error', reject);
  });
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  const url = `http://${host}:${addr.port}`;
  opts.log.info({ url }, 'review page listening');
  return {
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server!.close(() => resolve());
        (server as { closeAllConnections?: () => void }).closeAllConnections?.();
      }),
  };
}
