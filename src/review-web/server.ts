import { Hono } from 'hono';
import { serve, type ServerType } from '@hono/node-server';
import type { AddressInfo } from 'node:net';
import type { Config } from '../config/config.js';
import type { Logger } from '../log/logger.js';
import { systemClock, type Clock } from '../time/instants.js';
import { configError } from '../core/errors.js';
import { itemAnchor } from '../links/tokens.js';
import { confirmDeletePage, loginPage, messagePage } from './pages.js';
import { decide, decisionText, deletePlan, type DecisionForm } from './decide.js';
import { decodeFormId } from './form-id.js';
import { REVIEW_CSS } from './style.js';
import { ReviewSite } from './site.js';
import { formBody, readForm } from './form-body.js';
import { checkHeaderTrust, isLoopbackHost } from './proxies.js';

export interface ReviewServerOptions {
  config: Config;
  log: Logger;
  now?: Clock;
  env?: NodeJS.ProcessEnv;
  /** Overrides review.listen (tests bind port 0). */
  listen?: { host: string; port: number };
  /** Overrides HTTP_TIMEOUTS (tests). */
  timeouts?: typeof HTTP_TIMEOUTS;
}

/**
 * How long a client may take to send a request: its headers, then the whole of it. Node's defaults (60 s and 300 s)
 * let a client that announces a body and sends less hold a connection for five minutes; a form takes seconds. Node
 * then answers 408 and closes the connection. Its check runs every `checkMs` (Node: every 30 s).
 */
/**
 * headersMs and requestMs bound a slow request; keepAliveMs is how long an idle connection is kept for its next
 * request: longer than a reverse proxy's idle upstream connections (nginx keeps them 60 s), so that the server never
 * closes one the proxy (or a browser) is sending on at that moment (a reset seen as a 502), Node's default being 5 s.
 */
export const HTTP_TIMEOUTS = { headersMs: 10_000, requestMs: 20_000, checkMs: 1_000, keepAliveMs: 65_000 };

export interface ReviewServer {
  url: string;
  close(): Promise<void>;
}

const CSP = "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/**
 * The review page: GET opens and shows, only POST decides. A signed link opens the page for its store (after the
 * sign-in, unless a proxy in front did that) and starts a session bound to that store; each decision is a POST
 * carrying a one-time form nonce of that session.
 */
export function reviewApp(opts: ReviewServerOptions): Hono {
  const site = new ReviewSite(opts.config, opts.log, opts.now ?? systemClock, opts.env);
  const app = new Hono();
  app.use(async (c, next) => {
    await next();
    c.header('Content-Security-Policy', CSP);
    c.header('X-Content-Type-Options', 'nosniff');
    c.header('Referrer-Policy', 'no-referrer');
    c.header('X-Frame-Options', 'DENY');
    c.header('Cache-Control', 'no-store');
  });
  app.use(formBody(site));
  app.get('/static/review.css', (c) => c.body(REVIEW_CSS, 200, { 'Content-Type': 'text/css; charset=utf-8' }));
  app.get('/', (c) => site.message(c, 404, 'memory-warden review', 'Open this page from a link in the digest email.'));
  linkRoutes(app, site);
  decisionRoutes(app, site);
  app.notFound((c) => site.message(c, 404, 'Not found', 'Nothing here. Open the review page from a link in the digest email.'));
  app.onError((err, c) => {
    site.log.error({ err: err.message, path: c.req.path }, 'review page: request failed');
    return site.message(c, 500, 'Something went wrong', 'The request failed; it is in the log. If it was a decision, check the queue before trying again.');
  });
  return app;
}

/** Opening a link, signing in, showing a store: nothing here changes a store. */
function linkRoutes(app: Hono, site: ReviewSite): void {
  const { auth, log } = site;
  app.get('/open', async (c) => {
    const token = c.req.query('t') ?? '';
    const claims = site.checkLink(c, token);
    if (claims instanceof Response) return claims;
    const existing = site.session(c);
    if (auth.mode !== 'proxy') {
      if (existing && existing.store === claims.store) return site.showStore(c, existing, claims.item);
      return c.html(loginPage(site.base, claims.store, token, site.loginToken(c), auth.mode, false), 200);
    }
    const user = site.proxyUser(c);
    if (user === null) {
      if (!site.fromProxy(c)) return site.message(c, 401, 'Not signed in', 'This page is signed in to through the proxy in front of it; this request did not come through it.');
      return site.message(c, 401, 'Not signed in', `The proxy in front of this page did not name a user (${site.config.review.auth.userHeader}).`);
    }
    const s = existing && existing.store === claims.store && existing.user === user ? existing : site.startSession(c, claims, user);
    return site.showStore(c, s, claims.item);
  });

  app.post('/login', async (c) => {
    if (auth.mode === 'proxy') return site.message(c, 404, 'Not here', 'Sign-in is done by the proxy in front of this page.');
    const form = await readForm(c, site);
    if (form instanceof Response) return form;
    // A sign-in is a decision too: one submitted by a page elsewhere would replace the signed-in person's session.
    const foreign = site.refusedForeign(c, 'sign-in');
    if (foreign) return foreign;
    const token = form.t ?? '';
    const claims = site.checkLink(c, token);
    if (claims instanceof Response) return claims;
    if (!site.loginTokenMatches(c, form.csrf)) {
      return site.message(c, 403, 'Sign-in not accepted', 'This sign-in form did not come from the review page in this browser (or the browser keeps no cookies). Open the link from the digest again. Nothing changed.');
    }
    const user = (form.user ?? '').slice(0, 64);
    const client = site.client(c);
    const tried = site.now();
    if (site.failures.blocked(client, user, tried)) return site.message(c, 429, 'Too many failed sign-ins', 'Sign-in from here is paused for a few minutes after many wrong passwords. Nothing changed.');
    // Counted as failed while the password is checked (off the server's thread: other requests go on), so that
    // tries sent all at once meet the brake as tries one after another do; a right password takes it back.
    site.failures.fail(client, user, tried);
    const who = await auth.check(user, form.password ?? '');
    if (who === null) {
      log.warn({ store: claims.store, client }, 'review page: failed sign-in');
      return c.html(loginPage(site.base, claims.store, token, site.loginToken(c), auth.mode, true), 401);
    }
    site.failures.forgive(client, user, tried);
    site.startSession(c, claims, who);
    log.info({ store: claims.store, user: who }, 'review page: signed in');
    return c.redirect(`${site.storeUrl(claims.store)}${claims.item === '*' ? '' : `#${itemAnchor(claims.item)}`}`, 303);
  });

  app.get('/store/:store', async (c) => {
    const s = site.sessionFor(c, c.req.param('store'));
    if (!s) return site.message(c, 401, 'Not signed in for this store', 'Open the page from a link in the digest email.');
    return site.showStore(c, s);
  });
}

/** Decisions: POST only, within the store's session, each form's nonce spent once. */
function decisionRoutes(app: Hono, site: ReviewSite): void {
  app.on(['GET', 'HEAD', 'PUT', 'DELETE', 'PATCH'], '/store/:store/decide', (c) =>
    site.message(c, 405, 'Decisions are made with the buttons', 'Opening this address decides nothing; use the buttons on the review page. Nothing changed.', site.storeUrl(c.req.param('store'))),
  );

  app.post('/store/:store/decide', async (c) => {
    const store = c.req.param('store');
    const back = site.storeUrl(store);
    const s = site.sessionFor(c, store);
    if (!s) return site.message(c, 401, 'Not signed in for this store', 'Open the page from a link in the digest email. Nothing changed.');
    const foreign = site.refusedForeign(c, 'decision', back);
    if (foreign) return foreign;
    const body = await readForm(c, site);
    if (body instanceof Response) return body;
    const field = (k: string) => body[k];
    const spent = site.sessions.spend(s, field('csrf') ?? '');
    if (spent === 'replayed') return site.message(c, 409, 'Already sent', 'This form was sent before (a reload or a replay); it was acted on once. Nothing changed now.', back);
    if (spent === 'unknown') return site.message(c, 403, 'Form not accepted', 'This form did not come from your session of the review page. Nothing changed.', back);
    const id = decodeFormId(field('id') ?? '');
    if (id === null) return site.message(c, 400, 'Form not accepted', 'This form does not name a memory the way the review page writes it (it was changed on the way). Nothing changed.', back);
    const form: DecisionForm = { action: field('action') ?? '', id, seen: field('seen') ?? '', fact: field('fact'), source: field('source'), days: field('days') };
    if (form.action === 'delete' && field('confirmed') !== 'yes') {
      // Nothing is deleted on the first click: the page that follows says what would go, and asks again.
      const plan = await deletePlan(site.config, store, form);
      if (!plan.ok) return site.message(c, plan.status, 'Not done', plan.message, back);
      return c.html(confirmDeletePage(site.pageContext(s), form.seen, plan.row));
    }
    const out = await decide(site.config, store, s.user, form, site.now());
    if (!out.ok) return site.message(c, out.status, 'Not done', out.message, back);
    site.log.info({ store, user: s.user, action: out.decision.action, id: out.decision.id }, 'review page: decision');
    return c.html(messagePage(site.base, 'Done', decisionText(out.decision), back));
  });
}

export async function startReviewServer(opts: ReviewServerOptions): Promise<ReviewServer> {
  const listen = opts.listen ?? opts.config.review.listen;
  checkHeaderTrust(opts.config.review.auth, listen.host);
  const app = reviewApp(opts);
  let server: ServerType | undefined;
  const addr = await new Promise<AddressInfo>((resolve, reject) => {
    const t = opts.timeouts ?? HTTP_TIMEOUTS;
    const serverOptions = { headersTimeout: t.headersMs, requestTimeout: t.requestMs, connectionsCheckingInterval: t.checkMs };
    server = serve({ fetch: app.fetch, port: listen.port, hostname: listen.host, serverOptions }, (info) => resolve(info));
    (server as { keepAliveTimeout: number }).keepAliveTimeout = t.keepAliveMs;
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(configError(`review.listen: cannot listen on ${listen.host}:${listen.port} (${err.code ?? err.message}); choose another review.listen.port`)),
    );
  });
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  const url = `http://${host}:${addr.port}`;
  opts.log.info({ url }, 'review page listening');
  if (!isLoopbackHost(listen.host)) {
    // Plain HTTP: passwords and session cookies cross the network as they are, unless a TLS proxy is all that reaches it.
    opts.log.warn({ host: listen.host, port: addr.port }, 'review page listening beyond loopback over plain HTTP: put a TLS reverse proxy in front, or listen on 127.0.0.1');
  }
  return {
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server!.close(() => resolve());
        (server as { closeAllConnections?: () => void }).closeAllConnections?.();
      }),
  };
}
