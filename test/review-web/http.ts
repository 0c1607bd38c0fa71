import { expect } from 'vitest';
import { signLink } from '../../src/links/tokens.js';
import { DAY_MS } from '../../src/time/instants.js';
import { KEY_ENV, PASSWORD } from './fixtures.js';

/**
 * The review page as plain HTTP, for tests that need many requests or exact control of what is sent: a signed
 * link, a sign-in, the store's page parsed into its cards and forms, a decision POSTed as a browser would.
 */
export interface Card {
  /** The id as the card shows it (entities decoded). */
  shown: string;
  /** Hidden fields of each form, by its class: confirm, supersede, expire, delete. */
  forms: Record<string, Record<string, string>>;
}

const unescape = (s: string) => s.replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');

export function linkToken(store: string, now: number, item = '*'): string {
  return signLink(Buffer.from(process.env[KEY_ENV]!, 'utf8'), { store, item, expires: now + 7 * DAY_MS });
}

/** The sign-in form as the link opens it: the browser's login cookie and the form's hidden fields. */
export async function loginForm(url: string, store: string, now: number): Promise<{ cookie: string; fields: Record<string, string> }> {
  const res = await fetch(`${url}/open?t=${linkToken(store, now)}`);
  expect(res.status).toBe(200);
  const html = await res.text();
  const fields = Object.fromEntries([...html.matchAll(/<input type="hidden" name="(\w+)" value="([^"]*)">/g)].map((h) => [h[1]!, unescape(h[2]!)]));
  return { cookie: res.headers.get('set-cookie')!.split(';')[0]!, fields };
}

/** Signs in through the built-in password form; the session cookie. */
export async function signIn(url: string, store: string, now: number, user = 'alice'): Promise<string> {
  const { cookie, fields } = await loginForm(url, store, now);
  const res = await fetch(`${url}/login`, { method: 'POST', headers: { cookie }, body: new URLSearchParams({ ...fields, user, password: PASSWORD }), redirect: 'manual' });
  expect(res.status).toBe(303);
  return res.headers.get('set-cookie')!.split(';')[0]!;
}

/** The store's page as drawn now: its cards, each with its forms' hidden fields. */
export async function drawPage(url: string, cookie: string, store = 'agent'): Promise<Card[]> {
  const res = await fetch(`${url}/store/${encodeURIComponent(store)}`, { headers: { cookie } });
  expect(res.status).toBe(200);
  const text = await res.text();
  return [...text.matchAll(/<article class="item \w+" id="[^"]*"><h3><code>(.*?)<\/code>(.*?)<\/article>/gs)].map((m) => {
    const forms: Card['forms'] = {};
    for (const f of m[2]!.matchAll(/<form method="post" action="[^"]*" class="(\w+)">(.*?)<\/form>/gs)) {
      forms[f[1]!] = Object.fromEntries([...f[2]!.matchAll(/<input type="hidden" name="(\w+)" value="([^"]*)">/g)].map((h) => [h[1]!, unescape(h[2]!)]));
    }
    return { shown: unescape(m[1]!), forms };
  });
}

export function cardOf(cards: Card[], shown: string): Card {
  const c = cards.find((x) => x.shown === shown);
  if (!c) throw new Error(`no card for ${shown} among ${cards.map((x) => x.shown).join(', ')}`);
  return c;
}

/** What a decision's form sends, with the fields a person fills in. */
export function filled(card: Card, kind: string): Record<string, string> {
  // A delete's form as the page that asks again sends it (the first one only brings that page).
  const extra: Record<string, Record<string, string>> = { supersede: { fact: 'a new fact', source: 'infra/db.tf' }, expire: { days: '3' }, delete: { confirmed: 'yes' } };
  return { ...card.forms[kind]!, ...extra[kind] };
}

/** POSTs a decision form, url-encoded as a browser does; status and the page's message. */
export async function post(url: string, cookie: string, fields: Record<string, string> | string, store = 'agent', contentType?: string): Promise<{ status: number; text: string }> {
  const body = typeof fields === 'string' ? fields : new URLSearchParams(fields);
  const headers: Record<string, string> = { cookie, ...(contentType ? { 'content-type': contentType } : {}) };
  const res = await fetch(`${url}/store/${encodeURIComponent(store)}/decide`, { method: 'POST', headers, body, redirect: 'manual' });
  const html = await res.text();
  return { status: res.status, text: unescape(/<main>(.*)<\/main>/s.exec(html)?.[1]?.replace(/<[^>]+>/g, ' ') ?? html) };
}
