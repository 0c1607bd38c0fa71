/**
 * Everything read from a memory store is hostile text: a fact can carry HTML, terminal escapes, CR/LF aimed at
 * mail headers, bidi overrides that make a command read differently from what it runs, and URLs a mail client
 * would turn into links. These are the only ways store text reaches the digest.
 */
import type { StoreSelector } from '../store/open.js';

// C0 and C1 controls, DEL, and the format characters that reorder or hide text (bidi overrides, isolates,
// zero-width joiners, line/paragraph separators, BOM).
const CONTROL = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F\u200B-\u200F\u2028-\u202E\u2060-\u2069\uFEFF]/g;
const NEWLINES = /\r\n|[\r\n\t]/g;

/** One line of plain text: newlines become a visible ⏎, tabs a space, other controls a visible �. */
export function oneLine(text: unknown): string {
  return String(text ?? '')
    .replace(NEWLINES, (m) => (m === '\t' ? ' ' : ' ⏎ '))
    .replace(CONTROL, '\uFFFD');
}

/** For a mail header: one line, no control character at all, bounded length. */
export function headerText(text: unknown, max = 200): string {
  const line = oneLine(text).replace(/\uFFFD|⏎/g, ' ').replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

const SCHEME = /\b(https?|ftps?|sftp|file|mailto|javascript|data|vbscript|tel|sms|ssh|git|wss?|news|irc|xmpp|callto|skype)(:)/gi;
// A dot (or a look-alike that IDN turns into one) followed by a TLD-like label: `example.com`, `README.md`.
const HOST_DOT = /([\p{L}\p{N}_-])[.\u3002\uFF0E\uFF61](?=[\p{L}][\p{L}\p{N}-])/gu;
// Dotted IPv4 addresses, which autolinkers with fuzzy IP matching link too.
const IPV4 = /\b\d{1,3}(?:\.\d{1,3}){3}\b/g;

/**
 * Make links unclickable and un-autolinkable, readable by a person: `https://evil.example/x` becomes
 * `hxxps[:]//evil[.]example/x` (the defanging convention of security mail). Mail clients autolink schemes,
 * `www.` and bare host names with a known TLD; each of those needs a `[.]` or `[:]` to be broken.
 */
export function defang(text: string): string {
  return text
    .replace(SCHEME, (_, scheme: string) => `${scheme.replace(/^http/i, (h) => (h === 'HTTP' ? 'HXXP' : 'hxxp')).replace(/^ftp/i, 'fxp')}[:]`)
    .replace(IPV4, (ip) => ip.replace(/\./g, '[.]'))
    .replace(HOST_DOT, '$1[.]')
    .replace(/@(?=[\p{L}\p{N}_])/gu, '[@]');
}

/** Untrusted store text for the plain-text part: one line, defanged. */
export function plain(text: unknown): string {
  return defang(oneLine(text));
}

const HTML_ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Escape for HTML text and attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]!);
}

/** Untrusted store text for the HTML part: one line, defanged, escaped. */
export function html(text: unknown): string {
  return escapeHtml(plain(text));
}

/**
 * Credentials do not belong in a memory store, and never in an email: a value that looks like one (`sk-…`,
 * `ghp_…`, `AKIA…`, `password: …`, a private key) keeps its first four characters and is masked.
 */
const SECRET_VALUES = [
  /\b((?:sk|pk|rk|ghp|gho|ghs|xox[bpas])[-_][A-Za-z0-9_-]{12,})/g,
  /\b(AKIA[0-9A-Z]{16})\b/g,
  /\b(?:password|passwd|api[_ -]?key|secret|token|bearer)\b\s*[:=]\s*["']?([^\s"',;]{4,})/gi,
  /(-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$))/g,
];

export function maskSecrets(text: unknown): string {
  let out = String(text ?? '');
  for (const re of SECRET_VALUES) out = out.replace(re, (whole, value: string) => whole.replace(value, `${value.slice(0, 4)}…[masked]`));
  return out;
}

/** Shorten long untrusted text (a fact can be a whole page) without cutting a surrogate pair. */
export function clip(text: unknown, max: number): string {
  const chars = Array.from(String(text ?? ''));
  return chars.length > max ? `${chars.slice(0, max - 1).join('')}…` : chars.join('');
}

/** An id that may go bare into a shell command line: no quoting needed, not an option, nothing to autolink. */
const PLAIN_ID = /^[A-Za-z0-9_.:][A-Za-z0-9_.:-]*$/;
export const isPlainId = (id: string) => PLAIN_ID.test(id) && defang(id) === id;

/**
 * One shell word for an id from the store. Plain ids go bare. Anything else is written as `$'…'` with every byte
 * that is not an ASCII letter, digit, `_`, `-` or space as `\xHH`, so the word holds no quote, backslash,
 * newline, `$`, backtick, invisible character or host-like dot that could end it, hide part of it or become a
 * link. (A shell without `$'…'` still reads one single-quoted literal: a wrong id at worst, never a command.)
 */
export function shellWord(id: string): string {
  if (isPlainId(id)) return id;
  let out = '';
  for (const byte of Buffer.from(id, 'utf8')) {
    const c = String.fromCharCode(byte);
    out += /[A-Za-z0-9_ -]/.test(c) ? c : `\\x${byte.toString(16).padStart(2, '0')}`;
  }
  return `$'${out}'`;
}

/** A path from config (trusted, but it may hold spaces) as one shell word: bare when plain, else single-quoted. */
function shellPath(path: string): string {
  return /^[A-Za-z0-9_./:-]+$/.test(path) ? path : `'${path.replace(/'/g, `'\\''`)}'`;
}

/**
 * The review commands a person runs for one row, naming the store the way `storeSelector` chose. A non-plain
 * id goes after `--`, so even an id like `--help` or `-rf` is an operand, never an option.
 */
export function reviewCommands(id: string, store: StoreSelector): { confirm: string; supersede: string } {
  const s = `${store.flag} ${store.flag === '--db' ? shellPath(store.value) : shellWord(store.value)}`;
  const sup = `--fact 'NEW FACT' --source 'WHERE IT CAME FROM'`;
  if (isPlainId(id)) {
    return { confirm: `memory-warden review confirm ${id} ${s}`, supersede: `memory-warden review supersede ${id} ${sup} ${s}` };
  }
  const w = shellWord(id);
  return { confirm: `memory-warden review confirm ${s} -- ${w}`, supersede: `memory-warden review supersede ${sup} ${s} -- ${w}` };
}
