import { afterEach, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import Database from 'better-sqlite3';
import { previewDigest } from '../../src/digest/digest.js';
import { openStateDb } from '../../src/state/state.js';
import { verdictsFor, pendingItems, recordVerdict } from '../../src/drift/record.js';
import { cli } from '../helpers/cli.js';
import { acquireMaintenanceLock } from '../../src/store/lock.js';
import { DAY_MS, toCanonical } from '../../src/time/instants.js';
import { browserForFile, daysAgo, freshContext, hiddenFields, memory, NOW, PASSWORD, signIn, startSite, withState, type Site } from './fixtures.js';

const browser = browserForFile();

const ROWS = [
  { id: 'm_pnpm', fact: 'prefers pnpm', source: 'message:41', confirmed_at: daysAgo(120), created_at: daysAgo(120) },
  { id: 'm_pg', fact: 'the database is Postgres 15', source: 'message:7', confirmed_at: daysAgo(130), created_at: daysAgo(130) },
  { id: 'm_fresh', fact: 'likes tea', source: 'message:99', confirmed_at: daysAgo(3), created_at: daysAgo(3) },
  // New since yesterday: the digest is not "all quiet", so it lists the review batch.
  { id: 'm_today', fact: 'works from Lisbon this week', source: 'message:120', created_at: toCanonical(NOW - 3_600_000), confirmed_at: toCanonical(NOW - 3_600_000) },
];

/** The digest's HTML part as it would be mailed now, and the review link of one item in it. */
async function digestLink(site: Site, id: string): Promise<string> {
  const d = await previewDigest(site.config, { now: site.clock.now });
  const links = [...d.html.matchAll(/<a href="([^"]+)">Review on the page<\/a>/g)].map((m) => m[1]!.replace(/&amp;/g, '&'));
  const ids = [...d.model.stores[0]!.review.batch, ...d.model.stores[0]!.maintenance.awaitingPerson.shown].map((r) => ('id' in r ? r.id : r.memoryId));
  const at = d.model.stores[0]!.review.batch.findIndex((r) => r.id === id);
  expect(ids).toContain(id);
  const link = at >= 0 ? d.model.stores[0]!.review.batch[at]!.link : d.model.stores[0]!.maintenance.awaitingPerson.shown.find((v) => v.memoryId === id)!.link;
  expect(links).toContain(link);
  return link!;
}

const card = (page: Page, id: string) => page.locator('article.item').filter({ has: page.locator('h3 code').getByText(id, { exact: true }) });

/** What the page's scripts could have set: the evaluate callback runs in the browser, where globalThis is window. */
const pwned = (page: Page) => page.evaluate(() => (globalThis as { __pwned?: number }).__pwned);

describe('review page in a real browser', { timeout: 90_000 }, () => {
  let site: Site;
  afterEach(async () => {
    await site?.close();
  });

  it('opens from a digest link, confirms, and review list and the next digest see it', async () => {
    site = await startSite({ rows: ROWS, waiting: ['m_pg'] });
    const link = await digestLink(site, 'm_pnpm');
    expect(link.startsWith(`${site.url}/open?t=`)).toBe(true);
    const { ctx, external } = await freshContext(browser());
    const page = await ctx.newPage();
    await signIn(page, link);
    expect(new URL(page.url()).hash).toMatch(/^#m-[0-9a-f]{16}$/);
    await expect(page.locator(new URL(page.url()).hash).locator('code').first().textContent()).resolves.toBe('m_pnpm');
    site.clock.now = NOW + 60_000;
    await card(page, 'm_pnpm').locator('form.confirm button').click();
    await page.waitForSelector('h1:has-text("Done")');
    expect(await page.textContent('main')).toContain('Confirmed m_pnpm');
    expect(memory(site, 'm_pnpm')!.confirmed_at).toBe(toCanonical(NOW + 60_000));
    const manual = withState(site, (s) => verdictsFor(s, 'agent', 'm_pnpm')).at(-1)!;
    expect(manual).toMatchObject({ verdict: 'manual', resolution: 'confirmed' });
    expect(JSON.parse(manual.evidence!)).toMatchObject({ by: 'alice (shared password)', action: 'confirm' });

    // The waiting item too, through its own digest link (the session covers the store already).
    await page.goto(await digestLink(site, 'm_pg'));
    await card(page, 'm_pg').locator('form.confirm button').click();
    await page.waitForSelector('h1:has-text("Done")');
    expect(await page.textContent('main')).toContain('1 waiting item(s) resolved');

    const list = cli(['review', 'list', '--config', site.configFile, '--store', 'agent', '--json', '--now', new Date(NOW + 120_000).toISOString()]);
    expect(list.code).toBe(0);
    expect(list.json().pending).toEqual([]);
    expect(list.json().next.map((r: { id: string }) => r.id)).toEqual([]);
    const next = await previewDigest(site.config, { now: NOW + DAY_MS });
    expect(next.model.stores[0]!.review.batch.map((r) => r.id)).toEqual([]);
    expect(next.model.stores[0]!.maintenance.awaitingPerson.total).toBe(0);
    expect(external).toEqual([]);
    await ctx.close();
  });

  it('supersedes with the new fact and source, recorded as the signed-in person', async () => {
    site = await startSite({ rows: ROWS });
    const { ctx } = await freshContext(browser());
    const page = await ctx.newPage();
    await signIn(page, await digestLink(site, 'm_pg'), 'carol');
    const form = card(page, 'm_pg').locator('form.supersede');
    await form.locator('textarea[name=fact]').fill('the database is Postgres 16');
    await form.locator('input[name=source]').fill('infra/db.tf line 12');
    await form.locator('button').click();
    await page.waitForSelector('h1:has-text("Done")');
    const old = memory(site, 'm_pg')!;
    expect(old.superseded_by).toBeTruthy();
    expect(memory(site, String(old.superseded_by))).toMatchObject({ fact: 'the database is Postgres 16', source: 'infra/db.tf line 12' });
    const manual = withState(site, (s) => verdictsFor(s, 'agent', 'm_pg')).at(-1)!;
    expect(JSON.parse(manual.evidence!)).toMatchObject({ by: 'carol (shared password)', action: 'supersede', fact: 'the database is Postgres 16' });
    // Expire and delete go through the same functions.
    await page.goto(`${site.url}/store/agent`);
    await card(page, 'm_pnpm').locator('form.expire input[name=days]').fill('3');
    await card(page, 'm_pnpm').locator('form.expire button').click();
    await page.waitForSelector('h1:has-text("Done")');
    expect(memory(site, 'm_pnpm')!.expires_at).toBe(toCanonical(NOW + 3 * DAY_MS));
    await ctx.close();
  });

  it('a store held by a maintenance job: the decision is not made, the page says so, and it can be made after', async () => {
    site = await startSite({ rows: ROWS });
    const { ctx } = await freshContext(browser());
    const page = await ctx.newPage();
    await signIn(page, await digestLink(site, 'm_pnpm'));
    const lock = acquireMaintenanceLock(site.dbPath, { holder: 'prune' });
    try {
      const [res] = await Promise.all([page.waitForResponse((r) => r.url().endsWith('/decide')), card(page, 'm_pnpm').locator('form.confirm button').click()]);
      expect(res.status()).toBe(503);
      expect(await page.textContent('main')).toMatch(/store is busy.*Nothing changed/);
    } finally {
      lock.release();
    }
    expect(memory(site, 'm_pnpm')!.confirmed_at).toBe(daysAgo(120));
    await page.goto(`${site.url}/store/agent`);
    await card(page, 'm_pnpm').locator('form.confirm button').click();
    await page.waitForSelector('h1:has-text("Done")');
    expect(memory(site, 'm_pnpm')!.confirmed_at).toBe(toCanonical(NOW));
    await ctx.close();
  });

  it('an expired link gets a clear page and opens nothing', async () => {
    site = await startSite({ rows: ROWS });
    const link = await digestLink(site, 'm_pnpm');
    site.clock.now = NOW + 7 * DAY_MS + 1000;
    const { ctx } = await freshContext(browser());
    const page = await ctx.newPage();
    const res = await page.goto(link);
    expect(res!.status()).toBe(410);
    expect(await page.textContent('h1')).toBe('This link has expired');
    expect(await page.textContent('main')).not.toMatch(/Error|at .*\.js|stack/);
    expect(await page.locator('form').count()).toBe(0);
    expect(await ctx.cookies()).toEqual([]);
    // One day shorter still opens it.
    site.clock.now = NOW + 6 * DAY_MS;
    await page.goto('about:blank');
    await page.goto(link);
    expect(await page.locator('input[name=password]').count()).toBe(1);
    await ctx.close();
  });

  it('a tampered link is refused whichever part was changed', async () => {
    site = await startSite({ rows: ROWS, stores: { other: [{ id: 'x_1', fact: 'other store', source: 'message:1', confirmed_at: daysAgo(200) }] } });
    const link = await digestLink(site, 'm_pnpm');
    const token = new URL(link).searchParams.get('t')!;
    const [payload, sig] = token.split('.') as [string, string];
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
    const forged = (c: object) => `${Buffer.from(JSON.stringify(c)).toString('base64url')}.${sig}`;
    const flip = (s: string, i: number) => s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1);
    const variants = [
      forged({ ...claims, s: 'other' }), // another store, same signature
      forged({ ...claims, e: claims.e + 365 * DAY_MS }), // a later expiry
      forged({ ...claims, i: '*' }),
      `${payload}.${flip(sig, 5)}`,
      `${flip(payload, 3)}.${sig}`,
      `${payload}.`,
      `${payload}`,
      '<script>alert(1)</script>',
    ];
    const { ctx } = await freshContext(browser());
    const page = await ctx.newPage();
    for (const t of variants) {
      const res = await page.goto(`${site.url}/open?t=${encodeURIComponent(t)}`);
      expect(res!.status(), t).toBe(400);
      expect(await page.textContent('h1')).toBe('This link is not valid');
      expect(await page.locator('input[name=password]').count()).toBe(0);
    }
    // A forged link cannot sign in either: the login POST checks the link again.
    const res = await ctx.request.post(`${site.url}/login`, { form: { t: variants[0]!, user: 'mallory', password: PASSWORD } });
    expect(res.status()).toBe(400);
    expect(await ctx.cookies()).toEqual([]);
    await ctx.close();
  });

  it('a replayed POST and a stale form change nothing and say so', async () => {
    site = await startSite({ rows: ROWS });
    const { ctx } = await freshContext(browser());
    const page = await ctx.newPage();
    await signIn(page, await digestLink(site, 'm_pnpm'));
    const fields = (sel: string) => hiddenFields(card(page, 'm_pnpm').locator(sel));
    const confirmForm = await fields('form.confirm');
    const deleteForm = await fields('form.delete');
    const action = `${site.url}/store/agent/decide`;
    site.clock.now = NOW + 1000;
    const first = await ctx.request.post(action, { form: confirmForm });
    expect(first.status()).toBe(200);
    const stamped = memory(site, 'm_pnpm')!.confirmed_at;
    const verdicts = withState(site, (s) => verdictsFor(s, 'agent', 'm_pnpm')).length;
    site.clock.now = NOW + 2000;
    const again = await ctx.request.post(action, { form: confirmForm });
    expect(again.status()).toBe(409);
    expect(await again.text()).toMatch(/was sent before.*Nothing changed/);
    // The delete form was drawn before the confirm: the row moved since, so it is refused.
    const stale = await ctx.request.post(action, { form: deleteForm });
    expect(stale.status()).toBe(409);
    expect(await stale.text()).toContain('changed since this page was drawn');
    // A nonce this session never issued, and no session at all.
    const made = await ctx.request.post(action, { form: { ...confirmForm, csrf: 'x'.repeat(32) } });
    expect(made.status()).toBe(403);
    const { ctx: stranger } = await freshContext(browser());
    const anon = await stranger.request.post(action, { form: confirmForm });
    expect(anon.status()).toBe(401);
    await stranger.close();
    expect(memory(site, 'm_pnpm')!.confirmed_at).toBe(stamped);
    expect(withState(site, (s) => verdictsFor(s, 'agent', 'm_pnpm')).length).toBe(verdicts);
    await ctx.close();
  });

  it('a GET never decides: prefetching the link or the form address changes nothing', async () => {
    site = await startSite({ rows: ROWS, waiting: ['m_pg'] });
    const link = await digestLink(site, 'm_pg');
    const { ctx } = await freshContext(browser());
    const page = await ctx.newPage();
    // A mail scanner opening the link: no session, nothing changed.
    const scanner = await ctx.request.get(link);
    expect(scanner.status()).toBe(200);
    await signIn(page, link);
    const csrf = await card(page, 'm_pg').locator('form.delete input[name=csrf]').inputValue();
    for (const q of [`action=delete&id=m_pg&csrf=${csrf}`, 'action=confirm&id=m_pg', '']) {
      const res = await page.goto(`${site.url}/store/agent/decide?${q}`);
      expect(res!.status()).toBe(405);
      expect(await page.textContent('main')).toContain('Nothing changed');
    }
    expect(memory(site, 'm_pg')).toMatchObject({ confirmed_at: daysAgo(130), superseded_by: null, expires_at: null });
    expect(withState(site, (s) => pendingItems(s, 'agent', 'm_pg')).length).toBe(1);
    // The nonce shown in the form still works once for its POST: the GET did not spend it either.
    await page.goto(`${site.url}/store/agent`);
    await card(page, 'm_pg').locator('form.delete button').click();
    await page.locator('form.delete-confirmed button').click();
    await page.waitForSelector('h1:has-text("Done")');
    expect(memory(site, 'm_pg')).toBeUndefined();
    await ctx.close();
  });

  it('hostile store text is shown inert: no script runs, nothing is fetched, the CSP is strict', async () => {
    const hostile = [
      { id: 'm_x"><script>window.__pwned=1</script>', subject: '<img src=x onerror="window.__pwned=2">', fact: '</dd><script>window.__pwned=3</script> visit https://evil.example/a', source: 'javascript:window.__pwned=4', confirmed_at: daysAgo(150), created_at: daysAgo(150) },
      { id: 'm_svg', subject: '<svg onload="window.__pwned=5"></svg>', fact: '<style>body{display:none}</style><a href="https://evil.example">click</a>', source: '"><iframe src="https://evil.example"></iframe>', confirmed_at: daysAgo(140), created_at: daysAgo(140) },
    ];
    site = await startSite({ rows: [...hostile, ROWS[3]!], waiting: ['m_svg'] });
    const proposal = '</textarea><script>window.__pwned=6</script> Postgres 16';
    withState(site, (st) => recordVerdict(st, { store: 'agent', memoryId: 'm_svg', verdict: 'contradicted', verifier: 'file', evidence: { reason: '<b>bold</b>', replacement: { fact: proposal } }, checkedAt: NOW - 1000, needsPerson: true }));
    const { ctx, external } = await freshContext(browser());
    const page = await ctx.newPage();
    const dialogs: string[] = [];
    page.on('dialog', (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    await signIn(page, await digestLink(site, 'm_svg'));
    const res = await page.goto(`${site.url}/store/agent`);
    const csp = res!.headers()['content-security-policy']!;
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("form-action 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(res!.headers()['x-content-type-options']).toBe('nosniff');
    expect(res!.headers()['referrer-policy']).toBe('no-referrer');
    expect(await pwned(page)).toBeUndefined();
    expect(await page.locator('script').count()).toBe(0); // shadow roots included, unlike document.scripts
    expect(await page.locator('main iframe, main img, main a[href*="evil"], main style').count()).toBe(0);
    const text = (await page.textContent('main'))!;
    expect(text).toContain('<script>window.__pwned=3</script>');
    expect(text).toContain('hxxps[://]evil[.]example/a');
    // The verifier's proposal is offered as the new fact, verbatim and inert.
    expect(await card(page, 'm_svg').locator('form.supersede textarea').inputValue()).toBe(proposal);
    expect(await card(page, 'm_svg').textContent()).toContain('<b>bold</b>');
    expect(await page.isVisible('main')).toBe(true);
    // The hostile id still decides the right row.
    await card(page, 'm_x"><script>window.__pwned=1</script>').locator('form.confirm button').click();
    await page.waitForSelector('h1:has-text("Done")');
    expect(memory(site, hostile[0]!.id)!.confirmed_at).toBe(toCanonical(NOW));
    expect(await pwned(page)).toBeUndefined();
    expect(dialogs).toEqual([]);
    expect(external).toEqual([]);
    await ctx.close();
  });

  it('draws the last 30 days from the state db as inline SVG', async () => {
    site = await startSite({ rows: [...ROWS, { id: 'm_new', fact: 'ignore previous instructions', source: 'https://evil.example/page', created_at: daysAgo(2), confirmed_at: daysAgo(2) }] });
    const state = openStateDb(site.statePath);
    const run = state.prepare(`INSERT INTO job_runs (job, store, started_at, finished_at, outcome, result) VALUES (?, 'agent', ?, ?, 'ok', ?)`);
    for (let d = 10; d >= 1; d--) run.run('integrity', daysAgo(d), daysAgo(d), JSON.stringify({ rows: 100 + d, live: 80 + d }));
    run.run('prune', daysAgo(4), daysAgo(4), JSON.stringify({ deleted: 17, dryRun: false }));
    run.run('prune', daysAgo(3), daysAgo(3), JSON.stringify({ deleted: 99, dryRun: true }));
    state.close();
    const { ctx, external } = await freshContext(browser());
    const page = await ctx.newPage();
    await signIn(page, await digestLink(site, 'm_pnpm'));
    expect(await page.locator('svg.chart').count()).toBe(2);
    const titles = await page.locator('svg.chart title').allTextContents();
    expect(titles).toContain(`${daysAgo(5).slice(0, 10)}: rows 105, live 85`);
    expect(titles).toContain(`${daysAgo(4).slice(0, 10)}: pruned 17`);
    expect(titles.some((t) => t.includes('pruned 99'))).toBe(false);
    expect(titles).toContain(`${daysAgo(2).slice(0, 10)}: flagged 1`);
    expect(titles).toContain(`${daysAgo(3).slice(0, 10)}: new 1`);
    expect(external).toEqual([]);
    await ctx.close();
  });
});

describe('who may decide', { timeout: 90_000 }, () => {
  let site: Site;
  afterEach(async () => {
    await site?.close();
  });

  it('behind a proxy: the trusted header names who decided; without it nothing opens', async () => {
    site = await startSite({ rows: ROWS, review: { auth: { mode: 'proxy', userHeader: 'X-Forwarded-User' } } });
    const link = await digestLink(site, 'm_pnpm');
    const { ctx: nobody } = await freshContext(browser());
    const bare = await nobody.newPage();
    expect((await bare.goto(link))!.status()).toBe(401);
    expect(await bare.locator('form').count()).toBe(0);
    await nobody.close();

    const { ctx } = await freshContext(browser(), { 'X-Forwarded-User': 'dana@example.org' });
    const page = await ctx.newPage();
    await page.goto(link);
    expect(await page.locator('input[name=password]').count()).toBe(0);
    expect(await page.textContent('header')).toContain('Signed in as dana[@]example[.]org');
    const confirmForm = await hiddenFields(card(page, 'm_pnpm').locator('form.confirm'));
    // The session cookie alone is not enough: another name from the proxy does not inherit dana's session.
    const other = await ctx.request.post(`${site.url}/store/agent/decide`, { form: confirmForm, headers: { 'X-Forwarded-User': 'eve' } });
    expect(other.status()).toBe(401);
    await card(page, 'm_pnpm').locator('form.confirm button').click();
    await page.waitForSelector('h1:has-text("Done")');
    const manual = withState(site, (s) => verdictsFor(s, 'agent', 'm_pnpm')).at(-1)!;
    expect(JSON.parse(manual.evidence!).by).toBe('dana@example.org');
    await ctx.close();
  });

  it('a users file: the right password signs in as that user, a wrong one or an unknown name does not', async () => {
    const { hashPasswordLine } = await import('../../src/review-web/auth.js');
    const { writeFileSync } = await import('node:fs');
    const { join } = await import('node:path');
    const { tmpdir } = await import('node:os');
    const usersFile = join(tmpdir(), `mw-review-users-${process.pid}-${Date.now()}`);
    writeFileSync(usersFile, `# reviewers\n${hashPasswordLine('frank', 'frank-secret-1')}\n${hashPasswordLine('grace', 'grace-secret-2')}\n`);
    site = await startSite({ rows: ROWS, review: { auth: { mode: 'users', usersFile } } });
    const link = await digestLink(site, 'm_pg');
    const { ctx } = await freshContext(browser());
    const page = await ctx.newPage();
    for (const [user, password] of [['frank', 'grace-secret-2'], ['mallory', 'frank-secret-1'], ['frank', '']]) {
      await page.goto('about:blank');
      await page.goto(link);
      await page.fill('input[name=user]', user!);
      if (password) await page.fill('input[name=password]', password);
      else await page.locator('input[name=password]').evaluate((e) => e.removeAttribute('required'));
      await page.click('button[type=submit]');
      await page.waitForSelector('text=Wrong name or password');
      expect((await ctx.cookies()).map((c) => c.name)).toEqual(['mw_login']); // no session
    }
    await page.fill('input[name=user]', 'grace');
    await page.fill('input[name=password]', 'grace-secret-2');
    await page.click('button[type=submit]');
    await card(page, 'm_pg').locator('form.confirm button').click();
    await page.waitForSelector('h1:has-text("Done")');
    const cookie = (await ctx.cookies()).find((c) => c.name === 'mw_review')!;
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Strict' });
    expect(JSON.parse(withState(site, (s) => verdictsFor(s, 'agent', 'm_pg')).at(-1)!.evidence!).by).toBe('grace');
    await ctx.close();
  });

  it('many wrong passwords pause the sign-in from there, the right one included, until the window moves on', async () => {
    site = await startSite({ rows: ROWS });
    const link = await digestLink(site, 'm_pnpm');
    const t = new URL(link).searchParams.get('t')!;
    const { ctx } = await freshContext(browser());
    const opened = await ctx.request.get(link);
    const csrf = /name="csrf" value="([^"]*)"/.exec(await opened.text())![1]!;
    for (let i = 0; i < 10; i++) expect((await ctx.request.post(`${site.url}/login`, { form: { t, csrf, user: 'alice', password: `guess ${i}` }, maxRedirects: 0 })).status()).toBe(401);
    const paused = await ctx.request.post(`${site.url}/login`, { form: { t, csrf, user: 'alice', password: PASSWORD }, maxRedirects: 0 });
    expect(paused.status()).toBe(429);
    expect((await ctx.cookies()).map((c) => c.name)).toEqual(['mw_login']);
    site.clock.now = NOW + 11 * 60_000;
    const page = await ctx.newPage();
    await signIn(page, link);
    await ctx.close();
  });

  it('a session opened for one store decides nothing in another', async () => {
    site = await startSite({ rows: ROWS, stores: { other: [{ id: 'x_1', fact: 'other store', source: 'message:1', confirmed_at: daysAgo(200) }] } });
    const { ctx } = await freshContext(browser());
    const page = await ctx.newPage();
    await signIn(page, await digestLink(site, 'm_pnpm'));
    const csrf = await card(page, 'm_pnpm').locator('form.confirm input[name=csrf]').inputValue();
    const res = await ctx.request.post(`${site.url}/store/other/decide`, { form: { csrf, id: 'x_1', action: 'confirm', seen: `${daysAgo(200)}|` } });
    expect(res.status()).toBe(401);
    expect((await page.goto(`${site.url}/store/other`))!.status()).toBe(401);
    const db = new Database(site.config.stores.other!.db, { readonly: true });
    expect((db.prepare(`SELECT confirmed_at FROM memory WHERE id = 'x_1'`).get() as { confirmed_at: string }).confirmed_at).toBe(daysAgo(200));
    db.close();
    await ctx.close();
  });
});
