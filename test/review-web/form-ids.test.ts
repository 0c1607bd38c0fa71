import { afterEach, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import Database from 'better-sqlite3';
import { verdictsFor } from '../../src/drift/record.js';
import { decodeFormId, encodeFormId } from '../../src/review-web/form-id.js';
import { itemAnchor } from '../../src/links/tokens.js';
import { DAY_MS, toCanonical } from '../../src/time/instants.js';
import { browserForFile, daysAgo, freshContext, hiddenFields, memory, NOW, signIn, startSite, withState, type Site } from './fixtures.js';
import { drawPage, linkToken, post, signIn as signInHttp } from './http.js';

/**
 * Every id the store holds is decided from the page by clicking its button in a real browser, whatever form
 * submission does to text (NUL to U+FFFD, CR and LF to CRLF, nothing for a lone surrogate).
 */
const HOSTILE = [
  'nul\u0000id',
  'cr\rid',
  'lf\nid',
  'crlf\r\nid',
  'ends in lf\n',
  '\r\nstarts with crlf',
  'tab\tid',
  ' spaced id ',
  'q"uo\'te',
  '<script>window.__pwned=1</script>&amp;',
  'fffd\ufffdid',
  'ls\u2028ps\u2029',
  'emoji 🧠 id',
  '%41+%2B&id=other',
  'a'.repeat(20_000),
  '記憶'.repeat(5_000),
];
const CORRECTIONS = ['supersede', 'expire', 'delete'] as const;
/** Each correction on the ids a browser rewrites; confirm on every id. */
const REWRITTEN = HOSTILE.slice(0, 6);
const corrected = (kind: string, h: string) => `${kind}:${h}`;
const show = (id: string) => JSON.stringify(id.length > 40 ? `${id.slice(0, 20)}…(${id.length})` : id);

const browser = browserForFile();

/** The card of an id, found by its anchor (derived from the id, exact whatever the id holds). */
const card = (page: Page, id: string) => page.locator(`article#${itemAnchor(id)}`);

async function decideIn(page: Page, site: Site, id: string, kind: string): Promise<string> {
  await page.goto(`${site.url}/store/agent`);
  const form = card(page, id).locator(`form.${kind}`);
  if (kind === 'supersede') {
    await form.locator('textarea[name=fact]').fill('corrected fact');
    await form.locator('input[name=source]').fill('infra/db.tf');
  }
  await form.locator('button').click();
  if (kind === 'delete') await page.locator('form.delete-confirmed button').click(); // the page that asks again
  await page.waitForSelector('h1:not(:has-text("Delete"))');
  return (await page.textContent('main'))!;
}

describe('ids form submission would rewrite', { timeout: 120_000 }, () => {
  let site: Site;
  afterEach(async () => {
    await site?.close();
  });

  it('are decided exactly, each decision, in a real browser', async () => {
    const ids = [...HOSTILE, ...CORRECTIONS.flatMap((k) => REWRITTEN.map((h) => corrected(k, h)))];
    site = await startSite({ rows: ids.map((id) => ({ id, confirmed_at: daysAgo(200), created_at: daysAgo(200) })), review: { batch: 100 } });
    const { ctx, external } = await freshContext(browser());
    const page = await ctx.newPage();
    await signIn(page, `${site.url}/open?t=${linkToken('agent', NOW)}`);
    for (const id of HOSTILE) {
      const text = await decideIn(page, site, id, 'confirm');
      expect(text, show(id)).toContain('Confirmed');
      expect(memory(site, id)!.confirmed_at, show(id)).toBe(toCanonical(NOW));
      expect(withState(site, (s) => verdictsFor(s, 'agent', id)).map((v) => v.resolution), show(id)).toEqual(['confirmed']);
    }
    for (const kind of CORRECTIONS) {
      for (const h of REWRITTEN) {
        const id = corrected(kind, h);
        expect(await decideIn(page, site, id, kind), `${kind} ${show(h)}`).not.toContain('Not done');
        const row = memory(site, id);
        if (kind === 'delete') expect(row, show(id)).toBeUndefined();
        if (kind === 'expire') expect(row!.expires_at, show(id)).toBe(toCanonical(NOW + 7 * DAY_MS));
        if (kind === 'supersede') expect(memory(site, String(row!.superseded_by))!.fact).toBe('corrected fact');
      }
    }
    // Nothing else was touched: no row decided twice, no row that was not clicked.
    const db = new Database(site.dbPath, { readonly: true });
    expect(db.prepare(`SELECT count(*) FROM memory WHERE confirmed_at = ?`).pluck().get(toCanonical(NOW))).toBe(HOSTILE.length + REWRITTEN.length); // + the supersedes' new rows
    db.close();
    expect(await page.evaluate(() => (globalThis as { __pwned?: number }).__pwned)).toBeUndefined();
    expect(external).toEqual([]);
    await ctx.close();
  });

  it('an id the store holds as bytes that are not UTF-8 cannot be matched, and the page does not say it was decided', async () => {
    site = await startSite({ rows: [{ id: 'plain', confirmed_at: daysAgo(200) }] });
    // What a lone surrogate becomes in SQLite when a JavaScript agent writes one: reads back as U+FFFD each byte.
    const db = new Database(site.dbPath);
    db.prepare(`INSERT INTO memory (id, subject, fact, source, created_at, confirmed_at) VALUES (CAST(x'73757272eda080' AS TEXT), 'user', 'lone surrogate', 'message:1', ?, ?)`).run(daysAgo(200), daysAgo(200));
    db.close();
    const read = 'surr\ufffd\ufffd\ufffd';
    const { ctx } = await freshContext(browser());
    const page = await ctx.newPage();
    await signIn(page, `${site.url}/open?t=${linkToken('agent', NOW)}`);
    // Listed with what it reads as, and no buttons.
    await page.goto(`${site.url}/store/agent`);
    expect(await card(page, read).textContent()).toContain('No row reads under this id now');
    expect(await card(page, read).locator('form').count()).toBe(0);
    // A form naming it anyway (its nonce is a real one) is refused without a claim that it was decided.
    const fields = await hiddenFields(card(page, 'plain').locator('form.confirm'));
    const res = await ctx.request.post(`${site.url}/store/agent/decide`, { form: { ...fields, id: encodeFormId(read) } });
    expect(res.status()).toBe(409);
    const text = await res.text();
    expect(text).toContain('There is no memory');
    expect(text).not.toMatch(/decided/);
    const after = new Database(site.dbPath, { readonly: true });
    expect(after.prepare(`SELECT confirmed_at FROM memory WHERE fact = 'lone surrogate'`).pluck().get()).toBe(daysAgo(200));
    after.close();
    await ctx.close();
  });
});

describe('the form limit', { timeout: 30_000 }, () => {
  it('takes the largest form the page draws; a larger body is refused with 413 and changes nothing', async () => {
    const id = '記憶'.repeat(5_000);
    const site = await startSite({ rows: [{ id, confirmed_at: daysAgo(200) }] });
    try {
      const cookie = await signInHttp(site.url, 'agent', NOW);
      const [card] = await drawPage(site.url, cookie); // the only row
      // A supersede with a 10,000-character fact and 2,000-character source, each character 9 bytes form-encoded.
      const largest = { ...card!.forms.supersede!, fact: '事'.repeat(10_000), source: '源'.repeat(2_000) };
      expect(new URLSearchParams(largest).toString().length).toBeGreaterThan(140_000);
      expect((await post(site.url, cookie, largest)).status).toBe(200);
      const over = await post(site.url, cookie, { ...card!.forms.confirm!, pad: 'x'.repeat(300_000) });
      expect(over.status).toBe(413);
      expect(over.text).toContain('Nothing changed');
    } finally {
      await site.close();
    }
  });
});

describe('the id field', () => {
  it('round-trips any string exactly, lone surrogates included, in characters no form encoding rewrites', () => {
    for (const id of [...HOSTILE, '', '\ud800', 'a\udc00b', '\udbff\udfff', '\uffff\u0000\r']) {
      const field = encodeFormId(id);
      expect(field).toMatch(/^[uw][A-Za-z0-9_-]*$/);
      expect(decodeFormId(field)).toBe(id);
    }
  });

  it('refuses a field it did not write', () => {
    for (const bad of ['', 'plain', 'x' + encodeFormId('a').slice(1), 'u=', 'u/w', 'uYQ=', 'uYR', 'wYQ', `u${Buffer.from([0xed, 0xa0, 0x80]).toString('base64url')}`, 'u a']) {
      expect(decodeFormId(bad), bad).toBeNull();
    }
  });
});
