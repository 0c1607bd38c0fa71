/** Credentials in every form, planted in every field: none reaches the review page's text or its form fields, over HTTP or in Chromium. */
import { afterEach, describe, expect, it } from 'vitest';
import { recordVerdict } from '../../src/drift/record.js';
import { confirmDeletePage, storePage } from '../../src/review-web/pages.js';
import { htmlToText } from '../helpers/linkify.js';
import { leaksIn, plantedSecrets, type Complete, type PlantedSecret } from '../helpers/secret-forms.js';
import type { Queue } from '../../src/review-web/decide.js';
import { ALL_CORRECTIONS } from '../../src/layouts/contract.js';
import { browserForFile, daysAgo, freshContext, NOW, signIn, startSite, withState, type Site } from './fixtures.js';
import { linkToken, signIn as signInHttp } from './http.js';

const browser = browserForFile();
const PLANTED = plantedSecrets();
// One card per planted form: it is the row's fact, and each other field (subject, source, the verdict's reason,
// before, now and proposed replacement) holds another form, so every field meets every encoding.
const at = (i: number, k: number) => PLANTED[(i + k * 41) % PLANTED.length]!;

function plantedSite(): Promise<Site> {
  const rows = PLANTED.map((_, i) => ({ id: `m_${i}`, fact: at(i, 0).text, subject: at(i, 1).text, source: at(i, 2).text, confirmed_at: daysAgo(200 + i), created_at: daysAgo(200 + i) }));
  return startSite({ rows, review: { batch: 50 } });
}

function plantVerdicts(site: Site): void {
  withState(site, (st) => {
    PLANTED.forEach((_, i) => {
      const evidence = { reason: at(i, 3).text, previous: { value: at(i, 4).text }, current: { value: { note: at(i, 5).text } }, replacement: { fact: at(i, 6).text } };
      recordVerdict(st, { store: 'agent', memoryId: `m_${i}`, verdict: 'contradicted', verifier: 'file', evidence, checkedAt: NOW - 1000, needsPerson: true });
    });
  });
}

/** The leaks in a page, card by card (a reading of the whole page at once would be slow, not stricter). */
const leaked = (shown: string, planted: PlantedSecret[] = PLANTED) => shown.split(/(?=<article)/).flatMap((part) => leaksIn(part, planted));

describe('credentials on the review page', { timeout: 180_000 }, () => {
  let site: Site;
  afterEach(async () => {
    await site?.close();
  });

  it('over HTTP: no planted form in the page\'s text nor in any form field\'s value', async () => {
    site = await plantedSite();
    plantVerdicts(site);
    const cookie = await signInHttp(site.url, 'agent', NOW);
    const res = await fetch(`${site.url}/store/agent`, { headers: { cookie } });
    expect(res.status).toBe(200);
    const body = await res.text();
    expect(body.match(/<article class="item pending"/g)).toHaveLength(PLANTED.length);
    expect(body).toContain('[masked]');
    const values = [...body.matchAll(/<textarea[^>]*>([^<]*)<\/textarea>|value="([^"]*)"/g)].map((m) => htmlToText(m[1] ?? m[2] ?? ''));
    expect(values.filter((v) => v.includes('[masked]')).length).toBeGreaterThanOrEqual(PLANTED.length / 2);
    expect(body.split(/(?=<article)/).flatMap((card) => leaked(htmlToText(card)))).toEqual([]);
    expect(values.flatMap((v) => leaked(v))).toEqual([]);
  });

  it('in Chromium: the text a person reads and the Supersede textarea\'s value as the browser holds it', async () => {
    site = await plantedSite();
    plantVerdicts(site);
    const { ctx, external } = await freshContext(browser());
    const page = await ctx.newPage();
    await signIn(page, `${site.url}/open?t=${linkToken('agent', NOW)}`);
    const shown = await page.locator('main > header, main article').evaluateAll((els) => els.map((e) => (e as unknown as { innerText: string }).innerText));
    const fields = await page.locator('textarea, input').evaluateAll((els) => els.map((e) => (e as unknown as { value: string }).value));
    const proposals = await page.locator('form.supersede textarea').evaluateAll((els) => els.map((e) => (e as unknown as { value: string }).value));
    expect(proposals).toHaveLength(PLANTED.length);
    expect(proposals.filter((v) => v.includes('[masked]')).length).toBeGreaterThanOrEqual(PLANTED.length / 2);
    expect(shown.length).toBeGreaterThan(PLANTED.length);
    expect(shown.flatMap((card) => leaked(card))).toEqual([]);
    expect(fields.flatMap((v) => leaked(v))).toEqual([]);
    expect(external).toEqual([]);
    await ctx.close();
  });

  it('ids that hold a credential: shown masked, in no form field (a form would carry them encoded), the card says where to decide them', async () => {
    const ids = PLANTED.filter((_, i) => i % 9 === 0).map((p) => p.text);
    const rows = [...ids, 'm_plain'].map((id, i) => ({ id, fact: `fact ${i}`, subject: 'creds', source: 'tool', confirmed_at: daysAgo(200 + i), created_at: daysAgo(200 + i) }));
    site = await startSite({ rows, review: { batch: 50 }, waiting: ids.slice(0, 5) });
    const cookie = await signInHttp(site.url, 'agent', NOW);
    const body = await (await fetch(`${site.url}/store/agent`, { headers: { cookie } })).text();
    const cards = body.split(/(?=<article)/).slice(1);
    expect(cards).toHaveLength(rows.length);
    const values = [...body.matchAll(/value="([^"]*)"/g)].map((m) => htmlToText(m[1]!));
    expect(cards.flatMap((card) => leaked(htmlToText(card)))).toEqual([]);
    expect(values.flatMap((v) => leaked(v))).toEqual([]);
    expect(body.match(/no form here carries it/g)).toHaveLength(ids.length);
    expect(cards.filter((c) => c.includes('<form'))).toHaveLength(1); // m_plain's
  });

  it('every store text the page draws goes through the masking: a row and a verdict planted in every field', () => {
    // Drawn straight from a queue in which every string is a planted form: a field shown without masking leaks
    // here, and `Complete` makes a field added to the queue a compile error here until it is planted too. (The
    // verdict's evidence is free-form JSON: the keys the page shows are planted.)
    const list = PLANTED.slice(0, 60);
    const text = (i: number) => list[i % list.length]!.text;
    const older = (i: number) => ({ id: text(i + 14), subject: text(i + 15), fact: text(i + 16), source: text(i + 17), confirmed_at: text(i + 18), expires_at: text(i + 19), superseded_by: text(i + 20) });
    const row = (i: number) => ({ id: `m_${i}`, subject: text(i + 1), fact: text(i), source: text(i + 2), confirmed_at: text(i + 10), expires_at: text(i + 11), superseded_by: text(i + 12), olderVersions: [older(i)] });
    const pending = list.map((_, i) => ({
      id: i, memoryId: `m_${i}`, verdict: 'contradicted' as const, verifier: text(i + 3), checkedAt: text(i + 13), memory: row(i),
      evidence: { reason: text(i + 4), previous: { value: text(i + 5) }, current: { value: [text(i + 6)] }, replacement: { fact: text(i + 7) } },
    }));
    const due = list.map((_, i) => ({ id: `d_${i}`, row: row(i + 8) }));
    const ctx = { base: '', store: 'agent', user: text(9), corrections: ALL_CORRECTIONS, now: NOW, nonce: () => 'n' };
    const queue: Complete<Pick<Queue, 'list' | 'due'>> = { list: { store: 'agent', now: daysAgo(0), dueTotal: due.length, pending, next: due.map((d) => d.row) }, due };
    const html = storePage(ctx, { ...queue, history: [] });
    const values = [...html.matchAll(/<textarea[^>]*>([^<]*)<\/textarea>|value="([^"]*)"/g)].map((m) => htmlToText(m[1] ?? m[2] ?? ''));
    expect(html.split(/(?=<article)/).flatMap((card) => leaked(htmlToText(card), list))).toEqual([]);
    expect(values.flatMap((v) => leaked(v, list))).toEqual([]);
    // The page that asks before a delete draws the row and every older version behind it.
    const asked = list.map((_, i) => confirmDeletePage(ctx, 'seen', row(i))).join('\n');
    expect(leaked(htmlToText(asked), list)).toEqual([]);
  });
});
