/** Sign-in and decisions from another origin (Chromium attacker pages, plain HTTP variants): refused, session kept. */
import { afterEach, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { BrowserContext } from 'playwright-core';
import { verdictsFor } from '../../src/drift/record.js';
import { browserForFile, daysAgo, freshContext, memory, NOW, PASSWORD, signIn, startSite, withState, type Site } from './fixtures.js';

/** Signs in over plain HTTP; the session cookie. */
const signIn_ = (site: Site) => signInHttp(site.url, 'agent', NOW);
import { drawPage, linkToken, loginForm, post, signIn as signInHttp } from './http.js';

/**
 * A sign-in is a decision too: a page on another origin that makes the browser POST /login with someone else's
 * name and password (and a valid link) must not replace the signed-in person's session. The attacker's page is
 * served on loopback at another origin: another port of 127.0.0.1 (same site), and `localhost` (another site).
 */
const browser = browserForFile();
const ROWS = [{ id: 'm_pnpm', fact: 'prefers pnpm', source: 'message:41', confirmed_at: daysAgo(120), created_at: daysAgo(120) }];

async function attackerSite(html: (target: string) => string, target: string): Promise<{ port: number; close(): Promise<void> }> {
  const server: Server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(html(target));
  });
  await new Promise<void>((resolve) => server.listen(0, '::', resolve));
  return { port: (server.address() as AddressInfo).port, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

const token = () => linkToken('agent', NOW);
const byForm = (target: string) => `<!doctype html><form method="post" action="${target}/login">
<input name="t" value="${token()}"><input name="user" value="mallory"><input name="password" value="${PASSWORD}"><input name="csrf" value="guessed"></form>
<script>document.forms[0].submit()</script>`;
const byFetch = (target: string) => `<!doctype html><script>
fetch(${JSON.stringify(`${target}/login`)}, { method: 'POST', mode: 'no-cors', credentials: 'include', body: new URLSearchParams({ t: ${JSON.stringify(token())}, user: 'mallory', password: ${JSON.stringify(PASSWORD)} }) })
  .finally(() => { document.title = 'sent'; });
</script>`;
// First the victim's browser is sent through the real link (it gets a sign-in form and its cookie), then the forged POST.
const afterOpening = (target: string) => `<!doctype html><iframe src="${target}/open?t=${token()}"></iframe>${byForm(target).replace('<script>document.forms[0].submit()</script>', '<script>setTimeout(() => document.forms[0].submit(), 500)</script>')}`;

const sessionOf = async (ctx: BrowserContext) => (await ctx.cookies()).find((c) => c.name === 'mw_review')?.value;

describe('sign-in from another origin', { timeout: 90_000 }, () => {
  let site: Site;
  const closers: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const close of closers.splice(0)) await close();
    await site?.close();
  });

  it('a forged sign-in by form, by fetch, or after opening the real link leaves the signed-in person signed in', async () => {
    site = await startSite({ rows: ROWS });
    const { ctx } = await freshContext(browser());
    const page = await ctx.newPage();
    await signIn(page, `${site.url}/open?t=${token()}`, 'alice');
    const before = await sessionOf(ctx);
    expect(before).toBeDefined();
    for (const [name, html] of [['form', byForm], ['fetch', byFetch], ['after opening the link', afterOpening]] as const) {
      const attacker = await attackerSite(html, site.url);
      closers.push(attacker.close);
      for (const host of ['localhost', '127.0.0.1']) {
        const evil = await ctx.newPage();
        await evil.goto(`http://${host}:${attacker.port}/`);
        if (name === 'fetch') await evil.waitForFunction(() => (globalThis as unknown as { document: { title: string } }).document.title === 'sent');
        else await evil.waitForURL((u) => u.origin === site.url && u.pathname !== '/open');
        if (name !== 'fetch') await evil.waitForSelector('h1');
        if (name !== 'fetch') expect(await evil.textContent('h1'), `${name} from ${host}`).toMatch(/not accepted/);
        await evil.close();
        expect(await sessionOf(ctx), `${name} from ${host}`).toBe(before);
      }
    }
    // The next decision is still alice's.
    await page.goto(`${site.url}/store/agent`);
    await page.locator('form.confirm button').first().click();
    await page.waitForSelector('h1:has-text("Done")');
    const manual = withState(site, (s) => verdictsFor(s, 'agent', 'm_pnpm')).at(-1)!;
    expect(JSON.parse(manual.evidence!).by).toBe('alice (shared password)');
    await ctx.close();
  });

  it('over plain HTTP: a sign-in from another origin, or without this browser\'s form token, is refused and not counted', async () => {
    site = await startSite({ rows: ROWS });
    const { cookie, fields } = await loginForm(site.url, 'agent', NOW);
    const own = new URL(site.url);
    const tryLogin = (headers: Record<string, string>, form: Record<string, string> = { ...fields, user: 'mallory', password: PASSWORD }) =>
      fetch(`${site.url}/login`, { method: 'POST', headers, body: new URLSearchParams(form), redirect: 'manual' });
    const refused: [string, Record<string, string>, Record<string, string>?][] = [
      ['another origin', { cookie, origin: 'http://evil.example' }],
      ['another port', { cookie, origin: `http://${own.hostname}:${Number(own.port) + 1}` }],
      ['https of the same host', { cookie, origin: `https://${own.host}x` }],
      ['cross-site', { cookie, 'sec-fetch-site': 'cross-site' }],
      ['same-site', { cookie, 'sec-fetch-site': 'same-site' }],
      ['no cookie', {}],
      ['another browser\'s cookie', { cookie: 'mw_login=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' }],
      ['no token in the form', { cookie }, { t: fields.t!, user: 'mallory', password: PASSWORD }],
      ['a token one character off', { cookie }, { ...fields, csrf: `${fields.csrf!.slice(0, -1)}${fields.csrf!.endsWith('A') ? 'B' : 'A'}`, user: 'mallory', password: PASSWORD }],
    ];
    for (const [name, headers, form] of refused) {
      const res = await tryLogin(headers, form);
      expect(res.status, name).toBe(403);
      expect(res.headers.get('set-cookie'), name).toBeNull();
    }
    // Many refused ones count as no wrong password: the right sign-in from here still works, same-origin headers and all.
    for (let i = 0; i < 12; i++) expect((await tryLogin({ origin: 'http://evil.example' }, { ...fields, user: 'x', password: `guess ${i}` })).status).toBe(403);
    const ok = await tryLogin({ cookie, origin: own.origin, 'sec-fetch-site': 'same-origin' }, { ...fields, user: 'alice', password: PASSWORD });
    expect(ok.status).toBe(303);
  });

  it('a decision from another origin is refused the same way, its form left usable', async () => {
    site = await startSite({ rows: ROWS });
    const cookie = await signIn_(site);
    const [card] = await drawPage(site.url, cookie);
    const form = card!.forms.confirm!;
    const foreign: Record<string, string>[] = [{ origin: 'http://evil.example' }, { 'sec-fetch-site': 'cross-site' }, { 'sec-fetch-site': 'same-site' }];
    for (const headers of foreign) {
      const res = await fetch(`${site.url}/store/agent/decide`, { method: 'POST', headers: { cookie, ...headers }, body: new URLSearchParams(form), redirect: 'manual' });
      expect(res.status, JSON.stringify(headers)).toBe(403);
    }
    expect(memory(site, 'm_pnpm')!.confirmed_at).toBe(daysAgo(120));
    expect((await post(site.url, cookie, form)).status).toBe(200);
  });
});

