import { describe, expect, it } from 'vitest';
import { signLink, verifyLink, reviewKey, itemAnchor } from '../../src/links/tokens.js';
import { renderDigest } from '../../src/digest/render.js';
import type { DigestModel, StoreSection } from '../../src/digest/model.js';
import { attachReviewLinks } from '../../src/digest/review-links.js';
import { validateConfig } from '../../src/config/config.js';
import { DAY_MS } from '../../src/time/instants.js';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef-test');
const NOW = Date.parse('2026-11-29T06:00:00Z');

describe('signed review links', () => {
  const token = signLink(KEY, { store: 'agent', item: 'm_1', expires: NOW + DAY_MS });

  it('opens until it expires, bound to its store and item', () => {
    expect(verifyLink(KEY, token, NOW)).toEqual({ ok: true, claims: { store: 'agent', item: 'm_1', expires: NOW + DAY_MS } });
    expect(verifyLink(KEY, token, NOW + DAY_MS - 1).ok).toBe(true);
    expect(verifyLink(KEY, token, NOW + DAY_MS)).toMatchObject({ ok: false, reason: 'expired' });
  });

  it('refuses another key, a changed payload and garbage, without parsing what is unsigned', () => {
    const [payload, sig] = token.split('.') as [string, string];
    const reencode = (c: object) => Buffer.from(JSON.stringify(c)).toString('base64url');
    expect(verifyLink(Buffer.from('another key of at least thirty-two chars'), token, NOW)).toMatchObject({ ok: false, reason: 'bad-signature' });
    for (const claims of [{ s: 'other', i: 'm_1', e: NOW + DAY_MS }, { s: 'agent', i: '*', e: NOW + DAY_MS }, { s: 'agent', i: 'm_1', e: NOW + 99 * DAY_MS }]) {
      expect(verifyLink(KEY, `${reencode(claims)}.${sig}`, NOW)).toMatchObject({ ok: false, reason: 'bad-signature' });
    }
    for (const t of ['', '.', `${payload}.`, `.${sig}`, `${payload}.${sig}.x`, `${payload}.${sig.slice(1)}`, `${payload}=.${sig}`, 'a'.repeat(5000) + `.${sig}`]) {
      expect(verifyLink(KEY, t, NOW).ok, t.slice(0, 40)).toBe(false);
    }
    // A validly signed payload of the wrong shape is still refused.
    const odd = signLink(KEY, { store: 'agent', item: 'm_1', expires: NOW }).replace(/^[^.]+/, reencode({ s: 1 }));
    expect(verifyLink(KEY, odd, NOW).ok).toBe(false);
  });

  it('takes its key from the environment variable config names, long enough', () => {
    expect(() => reviewKey('MW_NOPE_UNSET', {})).toThrow(/MW_NOPE_UNSET is not set/);
    expect(() => reviewKey('K', { K: 'short' })).toThrow(/shorter than 32/);
    expect(reviewKey('K', { K: 'x'.repeat(32) }).length).toBe(32);
  });

  it('derives the anchor from the id: hostile ids make a plain anchor', () => {
    for (const id of ['m_1', '"><script>', '#top', '../x']) expect(itemAnchor(id)).toMatch(/^m-[0-9a-f]{16}$/);
  });
});

describe('digest review links', () => {
  const section = (): StoreSection => ({
    name: 'agent',
    select: { flag: '--store', value: 'agent' },
    newRows: { total: 1, flagged: 0, shown: [{ id: 'n1', subject: 's', fact: 'f', source: 'message:1', createdAt: '2026-11-29 05:00:00', expiresAt: null, reasons: [] }], more: 0 },
    review: { due: 1, afterDays: 90, batch: [{ id: 'm_1', subject: 'user', fact: 'see https://evil.example', source: 'message:2', confirmedAt: '2026-07-01 00:00:00' }] },
    maintenance: {
      rows: 2, live: 2, problems: [], notes: [], pruned: { runs: 0, deleted: 0, expired: 0, superseded: 0, cascaded: 0 }, lastSnapshot: null,
      awaitingPerson: { total: 1, shown: [{ memoryId: 'm_2', verdict: 'unverifiable', verifier: null, evidence: null, checkedAt: '2026-11-28 06:00:00' }] }, failedJobs: [],
    },
  });
  const model = (s: StoreSection): DigestModel => ({ period: { start: '2026-11-28 06:00:00', end: '2026-11-29 06:00:00' }, generatedAt: '2026-11-29 06:00:00', scope: 'agent', stores: [s], failedGlobalJobs: [], quiet: false });

  it('without review.url the shell commands stay', () => {
    const s = section();
    attachReviewLinks(s, validateConfig({}), NOW, () => {});
    const r = renderDigest(model(s), { prefix: '[memory-warden]' });
    expect(r.text).toContain('$ memory-warden review confirm m_1 --store agent');
    expect(r.html).not.toContain('/open?t=');
  });

  it('with review.url each item links to its place, signed for its store, with our own words as the link text', () => {
    process.env.MW_TEST_DIGEST_KEY = 'd'.repeat(40);
    const s = section();
    const config = validateConfig({ review: { url: 'https://warden.example.org/review/', secretEnv: 'MW_TEST_DIGEST_KEY' } });
    attachReviewLinks(s, config, NOW, () => {});
    const r = renderDigest(model(s), { prefix: '[memory-warden]' });
    const links = [...r.html.matchAll(/<a href="([^"]+)">([^<]*)<\/a>/g)];
    expect(links.map((m) => m[2])).toEqual(['Review on the page', 'Review on the page']);
    for (const [, href] of links) {
      const u = new URL(href!.replace(/&amp;/g, '&'));
      expect(u.origin + u.pathname).toBe('https://warden.example.org/review/open');
      const v = verifyLink(Buffer.from('d'.repeat(40)), u.searchParams.get('t')!, NOW);
      expect(v).toMatchObject({ ok: true, claims: { store: 'agent' } });
      expect((v as { claims: { expires: number } }).claims.expires).toBe(NOW + 7 * DAY_MS);
    }
    expect(r.text).toContain('review on the page: https://warden.example.org/review/open?t=');
    expect(r.text).not.toContain('$ memory-warden review confirm');
  });

  it('with review.url but no key the digest still goes out, with the commands, and says why', () => {
    const s = section();
    const warned: string[] = [];
    attachReviewLinks(s, validateConfig({ review: { url: 'https://w.example.org', secretEnv: 'MW_TEST_UNSET_KEY' } }), NOW, (m) => warned.push(m));
    expect(renderDigest(model(s), { prefix: 'x' }).text).toContain('$ memory-warden review confirm m_1');
    expect(warned[0]).toMatch(/MW_TEST_UNSET_KEY is not set/);
  });
});
