/**
 * Everything read from a memory store is hostile text (see ../untrusted.ts for the terminal side). The digest and
 * the review page add two things on top of the one sanitiser: credentials are masked (../credentials.ts, in every
 * encoding it reads), and links are defanged so no mail client's autolinker turns store text into a working link.
 * `plain`, `html` and `fieldValue` are the only ways store text reaches the digest and the page.
 */
import type { StoreSelector } from '../layouts/open.js';
import { clip, headerText, oneLine, terminalText } from '../text/untrusted.js';
import { maskSecretsSync } from '../text/credentials.js';

export { clip, headerText, oneLine };
/** The one masking of credentials (src/text/credentials.ts), as the digest and the review page apply it. */
export const maskSecrets = maskSecretsSync;

const SCHEME = /\b(https?|ftps?|sftp|file|mailto|javascript|data|vbscript|tel|sms|ssh|git|wss?|news|irc|xmpp|callto|skype)(:)(\/\/)?/gi;
// What an autolinker may take as a letter of a host. linkify-it (mailparser's, and many web mail clients') takes
// anything but whitespace, punctuation and controls, so also the � that stands for a hidden character, and `-`,
// `_`. But which characters are punctuation depends on its Unicode tables (uc.micro's lack some 230 that Node's
// have: U+10100, U+1B4E …), and other linkifiers have their own: so only ASCII punctuation, which every table
// has, ends a host here. A dot after any other character is defanged (`»[.]com` reads as well).
const ASCII_P = String.raw`!"#%&'()*,./:;?@[\\\]{}`;
const HOST_CHAR = String.raw`[^\s\p{Z}\p{Cc}${ASCII_P}]`;
const LABEL_START = String.raw`[^\s\p{Z}\p{Cc}\p{N}${ASCII_P}_-]`;
// A dot, or a look-alike that IDNA (UTS 46) maps to one: ideographic and halfwidth full stops, fullwidth and
// small full stops, one-dot leader. NFKC already folds most of them; these stay listed for text that skipped it.
const DOTS = '[.\u3002\uFF0E\uFF61\uFE52\u2024]';
// A dot between a host letter and a TLD-like label (a letter then a host letter): `evil.com`, `README.md`.
const HOST_DOT = new RegExp(`(${HOST_CHAR})${DOTS}(?=${LABEL_START}${HOST_CHAR})`, 'gu');
// Dotted IPv4 addresses, which autolinkers with fuzzy IP matching link too.
const IPV4 = /\b\d{1,3}(?:\.\d{1,3}){3}\b/g;
// `//host` alone is a protocol-relative link to linkify-it, `localhost` needing no dot.
const SLASHES = new RegExp(`(^|[^:/\\[])//(?=${HOST_CHAR}|\\[)`, 'gu');
const AT = new RegExp(`@(?=${HOST_CHAR})`, 'gu');

/**
 * Make links unclickable and un-autolinkable, readable by a person: `https://evil.example/x` becomes
 * `hxxps[://]evil[.]example/x` (the defanging convention of security mail). Mail clients autolink schemes,
 * `//host`, `www.`, bare host names with a known TLD, e-mail addresses, IPs and @mentions; each of those needs
 * a `[.]`, `[://]`, `[:]` or `[@]` to be broken. The text must already be `oneLine`: a hidden character inside a
 * host is a visible � by then, which counts as a letter here exactly as it does for linkify-it.
 */
export function defang(text: string): string {
  return text
    .replace(SCHEME, (_, scheme: string, _colon: string, slashes?: string) =>
      `${scheme.replace(/^http/i, (h) => (h === 'HTTP' ? 'HXXP' : 'hxxp')).replace(/^ftp/i, 'fxp')}[:${slashes ?? ''}]`)
    .replace(SLASHES, '$1/[/]')
    .replace(IPV4, (ip) => ip.replace(/\./g, '[.]'))
    .replace(HOST_DOT, '$1[.]')
    .replace(AT, '[@]');
}

/**
 * Untrusted store text for the plain-text part: NFKC first (fullwidth `．／＠：` and other compatibility forms
 * become the ASCII that browsers and IDNA read them as), credentials masked, clipped to `max` characters (after
 * masking: a secret cut in half is no longer one a pattern knows), one line, defanged.
 */
export function plain(text: unknown, max = Infinity): string {
  if (!memo) return plainOnce(text, max);
  const key = `${max}:${String(text ?? '')}`;
  let out = memo.get(key);
  if (out === undefined) memo.set(key, (out = plainOnce(text, max)));
  return out;
}

const plainOnce = (text: unknown, max: number) => defang(oneLine(clip(maskSecretsSync(String(text ?? '').normalize('NFKC')), max)));

/** What `plain` gave each text while `sameTexts` runs: the digest's text and HTML parts show the same rows. */
let memo: Map<string, string> | undefined;

/** `f`, with each text `plain` is given made plain once (a pure function of the text and `max`). */
export function sameTexts<T>(f: () => T): T {
  const outer = memo;
  memo = new Map();
  try {
    return f();
  } finally {
    memo = outer;
  }
}

const HTML_ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Escape for HTML text and attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]!);
}

/** Untrusted store text for the HTML part: as `plain`, escaped. */
export function html(text: unknown, max?: number): string {
  return escapeHtml(plain(text, max));
}

/**
 * Untrusted store text as the value of a form field a person edits and may send back as written (the review page's
 * Supersede textarea): credentials masked, line breaks kept as `\n`, every other hidden character a visible �,
 * escaped. Not defanged: no browser links a field's value, and the person's new fact must not gain `[.]`.
 */
export function fieldValue(text: unknown): string {
  return escapeHtml(terminalText(maskSecretsSync(String(text ?? '')).replace(/\r\n?/g, '\n')));
}

/** Whether masking would change the id: it holds what looks like a credential (in any spelling masking reads). */
export const idHoldsSecret = (id: string) => maskSecretsSync(id) !== id;

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
  return isPlainId(id) ? id : dollarQuoted(id, /[A-Za-z0-9_ -]/);
}

/** `$'…'` with every byte of `text` but the characters `keep` matches written as `\xHH`. */
function dollarQuoted(text: string, keep: RegExp): string {
  let out = '';
  for (const byte of Buffer.from(text, 'utf8')) {
    const c = String.fromCharCode(byte);
    out += keep.test(c) ? c : `\\x${byte.toString(16).padStart(2, '0')}`;
  }
  return `$'${out}'`;
}

/**
 * A path as one shell word: bare when plain, single-quoted when it holds only printable ASCII (spaces, quotes), else
 * `$'…'` with every other byte as `\xHH` (a newline or an invisible character inside a path stays one word and shows).
 */
export function shellPath(path: string): string {
  if (/^[A-Za-z0-9_./:-]+$/.test(path)) return path;
  if (/^[\x20-\x7e]*$/.test(path)) return `'${path.replace(/'/g, `'\\''`)}'`;
  return dollarQuoted(path, /[A-Za-z0-9_ ./:-]/);
}

/** How a command was told which store to work on: its config file and its --db, as absolute paths (either absent). */
export interface StoreNaming {
  config?: string;
  db?: string;
}

/**
 * The words that name the store in a command printed for a person to run next, as `naming` named it: `--db PATH`
 * (with its `--config FILE`), `--config FILE --store NAME`, or `--store NAME` (the config from MEMORY_WARDEN_CONFIG).
 * Each one shell word, whatever the paths and the name hold.
 */
export function storeFlags(naming: StoreNaming, store: string): string {
  const config = typeof naming.config === 'string' ? `--config ${shellPath(naming.config)} ` : '';
  return typeof naming.db === 'string' ? `${config}--db ${shellPath(naming.db)}` : `${config}--store ${shellWord(store)}`;
}

/**
 * The review commands a person runs for one row, naming the store the way `storeSelector` chose. A non-plain
 * id goes after `--`, so even an id like `--help` or `-rf` is an operand, never an option.
 */
export function reviewCommands(id: string, store: StoreSelector): { confirm: string; supersede?: string } {
  const s = `${store.flag} ${store.flag === '--db' ? shellPath(store.value) : shellWord(store.value)}`;
  // An id that holds what looks like a credential goes in no command (a mail is no place for it): the person
  // finds the row in the terminal, where review list shows it.
  if (idHoldsSecret(id)) return { confirm: `memory-warden review list ${s}   # this row's id looks like a credential: not printed here` };
  const sup = `--fact 'NEW FACT' --source 'WHERE IT CAME FROM'`;
  if (isPlainId(id)) {
    return { confirm: `memory-warden review confirm ${id} ${s}`, supersede: `memory-warden review supersede ${id} ${sup} ${s}` };
  }
  const w = shellWord(id);
  return { confirm: `memory-warden review confirm ${s} -- ${w}`, supersede: `memory-warden review supersede ${sup} ${s} -- ${w}` };
}
