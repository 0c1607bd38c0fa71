/** What a person decided shows: an expired row leaves the queue, expiries are shown, a delete asks again first. */
import { afterEach, describe, expect, it } from 'vitest';
import { previewDigest } from '../../src/digest/digest.js';
import { verdictsFor } from '../../src/drift/record.js';
import { DAY_MS, toCanonical } from '../../src/time/instants.js';
import { cli } from '../helpers/cli.js';
import { browserForFile, daysAgo, freshContext, hiddenFields, memory, NOW, signIn, startSite, withState, type Site } from './fixtures.js';
import { cardOf, drawPage, filled, linkToken, post, signIn as signInHttp } from './http.js';

/**
 * What a person decided shows: a row given an expiry (on the page or by the command line) decays and is no longer
 * due for review, on the page, in `review list` and in the next digest; an expiry is shown on the card; and a
 * delete asks again, naming what would go, before anything is deleted.
 */
const browser = browserForFile();

const ROWS = [
  { id: 'm_pnpm', fact: 'prefers pnpm', source: 'message:41', confirmed_at: daysAgo(120), created_at: daysAgo(120) },
  { id: 'm_pg', fact: 'the database is Postgres 15', source: 'message:7', confirmed_at: daysAgo(130), created_at: daysAgo(130) },
  { id: 'm_trip', fact: 'travelling until spring', source: 'message:8', confirmed_at: daysAgo(140), created_at: daysAgo(140), expires_at: toCanonical(NOW + 40 * DAY_MS) },
  { id: 'm_old', fact: 'prefers npm', source: 'message:2', confirmed_at: daysAgo(300), created_at: daysAgo(300), superseded_by: 'm_pg' },
  { id: 'm_today', fact: 'works from Lisbon this week', source: 'message:120', created_at: toCanonical(NOW - 3_600_000), confirmed_at: toCanonical(NOW - 3_600_000) },
];

const dueIds = async (site: Site, at: number) => {
  const list = cli(['review', 'list', '--config', site.configFile, '--store', 'agent', '--json', '--now', new Date(at).toISOString()]);
  expect(list.code).toBe(0);
  const digest = await previewDigest(site.config, { now: at });
  return { list: list.json().next.map((r: { id: string }) => r.id).sort(), total: list.json().dueTotal, digest: digest.model.stores[0]!.review.batch.map((r) => r.id).sort() };
};

describe('what a person decided is visible', { timeout: 90_000 }, () => {
  let site: Site;
  afterEach(async () => {
    await site?.close();
  });

  it('a row expired on the page or by the command line is not due any more: page, review list, next digest', async () => {
    site = await startSite({ rows: ROWS });
    // A row with an expiry set already (the agent's) decays: never due.
    expect(await dueIds(site, NOW)).toEqual({ list: ['m_pg', 'm_pnpm'], total: 2, digest: ['m_pg', 'm_pnpm'] });
    const cookie = await signInHttp(site.url, 'agent', NOW);
    const res = await post(site.url, cookie, filled(cardOf(await drawPage(site.url, cookie), 'm_pnpm'), 'expire'));
    expect(res.status).toBe(200);
    expect(res.text).toContain(`m_pnpm expires at ${toCanonical(NOW + 3 * DAY_MS)} UTC`);
    expect((await drawPage(site.url, cookie)).map((c) => c.shown)).toEqual(['m_pg']);
    expect(await dueIds(site, NOW + 1000)).toEqual({ list: ['m_pg'], total: 1, digest: ['m_pg'] });
    const byCli = cli(['review', 'expire', 'm_pg', '--in', '30d', '--config', site.configFile, '--store', 'agent', '--now', new Date(NOW).toISOString()]);
    expect(byCli.code).toBe(0);
    expect(await dueIds(site, NOW + 2000)).toEqual({ list: [], total: 0, digest: [] });
    const page = await fetch(`${site.url}/store/agent`, { headers: { cookie } });
    expect(await page.text()).toContain('Due for review: 0');
  });

  it('an expiry that is not a time never ends the row: it stays due, and its card says so', async () => {
    site = await startSite({ rows: [{ id: 'm_sprint', fact: 'on call', confirmed_at: daysAgo(200), created_at: daysAgo(200), expires_at: 'when the sprint ends' }] });
    expect((await dueIds(site, NOW)).list).toEqual(['m_sprint']);
    const cookie = await signInHttp(site.url, 'agent', NOW);
    const text = await (await fetch(`${site.url}/store/agent`, { headers: { cookie } })).text();
    expect(text).toMatch(/<dt>expires<\/dt><dd class="expires">when the sprint ends \(not a time: it never expires\)<\/dd>/);
  });

  it('a card waiting for a person shows its expiry', async () => {
    site = await startSite({ rows: ROWS, waiting: ['m_trip'] });
    const cookie = await signInHttp(site.url, 'agent', NOW);
    const text = await (await fetch(`${site.url}/store/agent`, { headers: { cookie } })).text();
    expect(text).toContain(`<dt>expires</dt><dd class="expires">${toCanonical(NOW + 40 * DAY_MS)} (in 40 days)</dd>`);
  });

  it('Delete asks again in a real browser, naming the older versions that go with it; Cancel changes nothing', async () => {
    site = await startSite({ rows: ROWS });
    const { ctx, external } = await freshContext(browser());
    const page = await ctx.newPage();
    await signIn(page, `${site.url}/open?t=${linkToken('agent', NOW)}`);
    const pg = page.locator('article.item').filter({ has: page.locator('h3 code').getByText('m_pg', { exact: true }) });
    expect(await pg.textContent()).toContain('1 older version(s) lead to it');
    await pg.locator('form.delete button').click();
    await page.waitForSelector('h1:has-text("Delete")');
    expect(await page.textContent('main')).toContain('prefers npm');
    expect(memory(site, 'm_pg')).toBeDefined();
    expect(withState(site, (s) => verdictsFor(s, 'agent', 'm_pg'))).toEqual([]);
    await page.click('text=Cancel: back to the review queue');
    await page.waitForSelector('h1:has-text("Review agent")');
    expect(memory(site, 'm_pg')).toBeDefined();
    expect(memory(site, 'm_old')).toBeDefined();

    await pg.locator('form.delete button').click();
    const asked = await hiddenFields(page.locator('form.delete-confirmed'));
    await page.locator('form.delete-confirmed button').click();
    await page.waitForSelector('h1:has-text("Done")');
    expect(await page.textContent('main')).toMatch(/Deleted (m_pg, m_old|m_old, m_pg)\./);
    expect(memory(site, 'm_pg')).toBeUndefined();
    expect(memory(site, 'm_old')).toBeUndefined();
    // The asking page's form is spent: sent again, it deletes nothing more.
    const again = await ctx.request.post(`${site.url}/store/agent/decide`, { form: asked });
    expect(again.status()).toBe(409);
    expect(await again.text()).toContain('Already sent');
    expect(external).toEqual([]);
    await ctx.close();
  });

  it('over HTTP: a first Delete changes nothing; one drawn before the row changed is refused already there', async () => {
    site = await startSite({ rows: ROWS });
    const cookie = await signInHttp(site.url, 'agent', NOW);
    for (const confirmed of [undefined, 'no', 'YES', '', 'yes ']) {
      const { confirmed: _, ...first } = filled(cardOf(await drawPage(site.url, cookie), 'm_pnpm'), 'delete');
      const res = await post(site.url, cookie, confirmed === undefined ? first : { ...first, confirmed });
      expect(res.status, String(confirmed)).toBe(200);
      expect(res.text).toMatch(/Delete\s+m_pnpm\s+\?/);
    }
    expect(memory(site, 'm_pnpm')).toBeDefined();
    expect(withState(site, (s) => verdictsFor(s, 'agent', 'm_pnpm'))).toEqual([]);
    const cards = await drawPage(site.url, cookie);
    const stale = filled(cardOf(cards, 'm_pg'), 'delete');
    await post(site.url, cookie, filled(cardOf(cards, 'm_pg'), 'confirm'));
    const { confirmed: __, ...staleFirst } = stale;
    expect((await post(site.url, cookie, staleFirst)).status).toBe(409);
  });
});
