/**
 * Credentials in the forms an agent's text carries them (wrapped, split, percent-, entity-, JSON-, base64-, hex- or
 * quoted-printable-encoded, and mixed), and ordinary facts that look encoded but hold none: the planted corpus.
 */
import { asRead } from './hostile.js';
import { readings } from '../../src/text/secret-readings.js';

const rep = (s: string, n: number) => s.repeat(Math.ceil(n / s.length)).slice(0, n);
const cat = (...parts: string[]) => parts.join('');

/** A secret in its context, and the characters of it that must never be shown (`secret`, less a public prefix). */
export interface PlantedSecret {
  kind: string;
  text: string;
  secret: string;
  prefix: string;
}

/** The token forms masking knows, each in a sentence. Assembled from pieces: the source holds no real-looking token. */
export function plainSecrets(): PlantedSecret[] {
  const b = (n: number) => rep('Q7zR2mX9kL4pV8nW3tY6', n);
  const awsSecret = rep('wK9sLmQ2xR7vT4nB8cZ1', 40);
  return [
    { kind: 'github', text: `deploy token ${cat('ghp_', b(36))} works`, secret: cat('ghp_', b(36)), prefix: 'ghp_' },
    { kind: 'aws secret', text: `aws_secret_access_key=${awsSecret}`, secret: awsSecret, prefix: '' },
    { kind: 'aws key id', text: `use ${cat('AKIA', 'Z7Q2M4X8K6R3T5V9')} for the bucket`, secret: cat('AKIA', 'Z7Q2M4X8K6R3T5V9'), prefix: 'AKIA' },
    { kind: 'slack', text: `slack ${cat('xox', 'b-', '123456789012-1234567890123-', b(24))} posts`, secret: cat('xox', 'b-', '123456789012-1234567890123-', b(24)), prefix: 'xoxb-' },
    { kind: 'stripe', text: `stripe ${cat('sk_', 'live_', b(24))} charges`, secret: cat('sk_', 'live_', b(24)), prefix: 'sk_live_' },
    { kind: 'password', text: 'the db password=hunter2hunter2 since monday', secret: 'hunter2hunter2', prefix: '' },
  ];
}

const pct = (s: string, upper = true) => [...Buffer.from(s, 'utf8')].map((x) => `%${x.toString(16).padStart(2, '0')}`).map((h) => (upper ? h.toUpperCase() : h)).join('');
const wrap = (s: string, width: number, nl: string) => s.match(new RegExp(`.{1,${width}}`, 'g'))!.join(nl);
const b64 = (s: string) => Buffer.from(s, 'utf8').toString('base64');
const b64url = (s: string) => Buffer.from(s, 'utf8').toString('base64url');
const jsEscape = (s: string) => [...s].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('');
const entities = (s: string, hex: boolean) => [...s].map((c) => (hex ? `&#x${c.charCodeAt(0).toString(16)};` : `&#${c.charCodeAt(0)};`)).join('');
const qp = (s: string) => wrap(s.replace(/=/g, '=3D'), 20, '=\r\n');
const mid = (s: string) => s.length >> 1;
const split = (s: string, by: string, at = mid(s)) => s.slice(0, at) + by + s.slice(at);

/**
 * Ways to write a secret: each takes the secret inside its sentence (`t`) and the secret (`s`) and returns the text
 * as stored. Splits go into the secret; encodings cover the secret and the words that make it one (`key=`).
 */
export const ENCODINGS: { name: string; apply: (t: string, s: string) => string }[] = [
  ...(['\n', '\r\n', '\u00ad', '\u200b', '\u2060', '\ufeff', '<wbr>', '<br/>', '</span><span>', '<!-- -->', '&shy;', '&#8203;', '&ZeroWidthSpace;'] as const).flatMap((by) => [
    { name: `split by ${JSON.stringify(by)} in the middle`, apply: (t: string, s: string) => t.replace(s, split(s, by)) },
    { name: `split by ${JSON.stringify(by)} near the end`, apply: (t: string, s: string) => t.replace(s, split(s, by, s.length - 3)) },
  ]),
  { name: 'split twice by line breaks', apply: (t, s) => t.replace(s, `${s.slice(0, 6)}\n${s.slice(6, 14)}\r\n${s.slice(14)}`) },
  { name: 'percent-encoded', apply: (t) => pct(t) },
  { name: 'percent-encoded, lower hex', apply: (t) => pct(t, false) },
  { name: 'percent-encoded twice', apply: (t) => pct(pct(t)) },
  { name: 'percent-encoded, + for space', apply: (t) => encodeURIComponent(t).replace(/%20/g, '+') },
  { name: 'only the = percent-encoded', apply: (t) => t.replace(/=/g, '%3D') },
  { name: 'the tail percent-encoded', apply: (t, s) => t.replace(s, s.slice(0, -6) + pct(s.slice(-6))) },
  { name: 'base64', apply: (t) => `blob ${b64(t)} end` },
  { name: 'base64 without padding', apply: (t) => `blob ${b64(t).replace(/=+$/, '')} end` },
  { name: 'base64url', apply: (t) => `blob ${b64url(t)} end` },
  { name: 'base64 wrapped at 76', apply: (t) => `blob\n${wrap(b64(`${t} ${t}`), 76, '\n')}\nend` },
  { name: 'base64 wrapped at 76 by CRLF', apply: (t) => `blob\r\n${wrap(b64(`${t} ${t} ${t}`), 76, '\r\n')}\r\nend` },
  { name: 'hex', apply: (t) => `hex ${Buffer.from(t).toString('hex')}` },
  { name: 'hex, upper case', apply: (t) => `hex ${Buffer.from(t).toString('hex').toUpperCase()}` },
  { name: 'quoted-printable with soft breaks', apply: (t) => qp(t) },
  { name: 'JSON \\u escapes', apply: (t) => `{"note":"${jsEscape(t)}"}` },
  { name: 'JS \\x and \\u{} escapes', apply: (t, s) => t.replace(s, [...s].map((c, i) => (i % 2 ? `\\x${c.charCodeAt(0).toString(16)}` : `\\u{${c.charCodeAt(0).toString(16)}}`)).join('')) },
  { name: 'HTML decimal entities', apply: (t) => entities(t, false) },
  { name: 'HTML hex entities', apply: (t) => entities(t, true) },
  { name: 'mixed: base64 of percent-encoded', apply: (t) => `x ${b64(pct(t))}` },
  { name: 'mixed: percent-encoded base64', apply: (t) => pct(`x ${b64(t)}`) },
  { name: 'mixed: entities of JSON escapes', apply: (t, s) => t.replace(s, entities(jsEscape(s.slice(0, 8)), false) + s.slice(8)) },
  { name: 'mixed: base64url, wrapped, of a split token', apply: (t, s) => `b ${wrap(b64url(t.replace(s, split(s, '\n'))), 40, '\r\n')}` },
];

/** Every planted form: each secret in each encoding. */
export function plantedSecrets(): PlantedSecret[] {
  return plainSecrets().flatMap((p) => ENCODINGS.map((e) => ({ ...p, kind: `${p.kind} / ${e.name}`, text: e.apply(p.text, p.secret) })));
}

/** What must not be shown of a secret: its first 10 characters after the public prefix, and its last 8. */
export function secretParts(p: PlantedSecret): string[] {
  const rest = p.secret.slice(p.prefix.length);
  return [rest.slice(0, 10), rest.slice(-8)];
}

/**
 * What of the planted secrets a shown text (a digest part, a page, a terminal) still reveals, as a person reads it
 * or once its encodings are undone (an encoded tail is a leak too): one line per secret part found, naming its kind.
 */
export function leaksIn(shown: string, planted: PlantedSecret[]): string[] {
  const views = [shown, ...readings(shown).map((r) => r.text)].map(asRead);
  const parts = new Map(planted.flatMap((p) => secretParts(p).map((part) => [part, p.kind.split(' / ')[0]!] as const)));
  return [...parts].filter(([part]) => views.some((v) => v.includes(part))).map(([part, kind]) => `${kind}: ${part}`);
}

/** `T` with every field required and never null, all the way down: a planted fixture of this type sets every field. */
export type Complete<T> = T extends readonly (infer U)[] ? Complete<U>[] : T extends object ? { [K in keyof T]-?: Complete<Exclude<T[K], null | undefined>> } : T;

/** Ordinary facts, some of them encoded: masking must leave each exactly as written. */
export const BENIGN = [
  'released 2024-05-01 as v1.2.3, then 2.0.0-rc.1 on 2024-06-30 10:15:00',
  'memory m_0207 supersedes m_0140; user id 550e8400-e29b-41d4-a716-446655440000',
  'docs at https://example.com/docs/getting-started?page=2&sort=asc#install',
  'fetch https://api.example.org/v1/items?limit=50&offset=100',
  'commit 3f2a9c0d1e4b5a69788776655443322110ffeedd and sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08',
  `the note in base64 is ${Buffer.from('prefers pnpm over npm for every repo').toString('base64')}`,
  `base64url ${Buffer.from('deploys go through the staging branch').toString('base64url')}`,
  `hex of a note: ${Buffer.from('the database is Postgres 15').toString('hex')}`,
  'prefers pnpm over npm\nuses Node 20 at work\r\nlikes tabs',
  'path /srv/My%20Files/report%202024.pdf and query q=caf%C3%A9+au+lait',
  'Tom &amp; Jerry &#8212; the caf&eacute; at 5&nbsp;pm',
  'JSON says {"name":"Jos\\u00e9","city":"M\\u00fcnchen"}',
  'quoted-printable caf=C3=A9 and a soft =\r\nbreak',
  'token bucket of 20 per minute; the secretary is Jane; tokens: 5',
  'risk-assessment-framework for the team, bypass=true in tests',
  'a <b>bold</b> claim with <span class="x">markup</span>',
  'sizes 1024x768, ratio 16:9, temperature 21.5C, ticket JIRA-1234',
  'QmFzZTY0IGxvb2tzIGxpa2UgdGhpcyBidXQgaXMgbm90IGEgc2VjcmV0',
  'the key ring is on the hook; api docs are public',
];
