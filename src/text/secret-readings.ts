/**
 * The readings of a text that masking looks at besides the text itself: lines joined, tags dropped, encodings undone.
 * Each maps its characters back to the part of the text they came from, so that a mask covers a secret as written.
 */

export interface Reading {
  text: string;
  /** For each character of `text`, the range [start, end) of the read text it came from. */
  start: number[];
  end: number[];
}

/** One replacement in a reading's text: `length` characters at `at` read as `value`. */
interface Piece {
  at: number;
  length: number;
  value: string;
}

type Decoder = (text: string) => Piece[];

/** The text read as itself. */
export function asWritten(text: string): Reading {
  const start = Array.from({ length: text.length }, (_, i) => i);
  return { text, start, end: start.map((i) => i + 1) };
}

function rewrite(r: Reading, pieces: Piece[]): Reading {
  let text = '';
  const start: number[] = [];
  const end: number[] = [];
  let i = 0;
  const keepTo = (to: number) => {
    text += r.text.slice(i, to);
    for (; i < to; i++) {
      start.push(r.start[i]!);
      end.push(r.end[i]!);
    }
  };
  for (const p of pieces) {
    keepTo(p.at);
    // Every character a piece decodes to stands for the whole piece: a base64 run is masked whole, never in part.
    const s = r.start[p.at]!;
    const e = r.end[p.at + p.length - 1]!;
    text += p.value;
    for (let k = 0; k < p.value.length; k++) {
      start.push(s);
      end.push(e);
    }
    i = p.at + p.length;
  }
  keepTo(r.text.length);
  return { text, start, end };
}

function piecesOf(re: RegExp, text: string, decode: (m: RegExpExecArray) => string | null): Piece[] {
  const out: Piece[] = [];
  re.lastIndex = 0;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    const value = decode(m);
    if (value !== null && value !== m[0]) out.push({ at: m.index, length: m[0].length, value });
    if (m[0].length === 0) re.lastIndex += 1;
  }
  return out;
}

// Text a person reads as one run: no control, format, private-use or unassigned character, bar tab and line breaks.
const READABLE = /^(?:[^\p{C}]|[\t\n\r])+$/u;
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Bytes as text, only when they are valid UTF-8 a person could read (what an encoded secret decodes to). */
function readableText(bytes: Uint8Array): string | null {
  try {
    const text = utf8.decode(bytes);
    return READABLE.test(text) ? text : null;
  } catch {
    return null;
  }
}

/** Percent- or `=`-escaped bytes as text (any UTF-8; an invalid byte reads as U+FFFD, which matches no pattern). */
const escapedBytes = (run: string) => new TextDecoder().decode(Uint8Array.from(run.match(/[0-9a-fA-F]{2}/g)!.map((h) => parseInt(h, 16))));

const HIDDEN = String.raw`[\p{Default_Ignorable_Code_Point}\p{Cf}]`;
const LINE_BREAK = String.raw`(?:\r\n|[\n\r\v\f\u0085\u2028\u2029])`;

// A token wrapped onto the next line (one break, not a blank line), split by invisible characters, or by tags
// (`<wbr>`, `<span>…</span>`, a comment), and quoted-printable's soft line break `=` at a line's end.
const JOINS = new RegExp(
  String.raw`<!--[\s\S]{0,200}?-->|<\/?[A-Za-z][\w:-]{0,20}(?:\s[^<>]{0,200})?\/?>|=\r?\n|(?<=\S)(?:${HIDDEN}+(?:${LINE_BREAK}${HIDDEN}*)?|${LINE_BREAK}${HIDDEN}*)(?=\S)`,
  'gu',
);
const joined: Decoder = (text) => piecesOf(JOINS, text, () => '');

const NAMED: Record<string, string> = {
  amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: ' ', shy: '\u00ad', colon: ':', equals: '=', sol: '/',
  bsol: '\\', lowbar: '_', period: '.', num: '#', percnt: '%', plus: '+', commat: '@', quest: '?', excl: '!',
  dollar: '$', comma: ',', semi: ';', hyphen: '\u2010', dash: '\u2010', zwj: '\u200d', zwnj: '\u200c', Tab: '\t', NewLine: '\n',
  ZeroWidthSpace: '\u200b', NoBreak: '\u2060',
};
const codePoint = (cp: number) => (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ? null : String.fromCodePoint(cp));

const ENTITY = /&(?:#(\d{1,7});?|#[xX]([0-9a-fA-F]{1,6});?|([A-Za-z]{2,16});)/g;
const entities: Decoder = (text) =>
  piecesOf(ENTITY, text, (m) => (m[1] ? codePoint(Number(m[1])) : m[2] ? codePoint(parseInt(m[2], 16)) : NAMED[m[3]!] ?? null));

const JS_ESCAPE = /\\(?:u\{([0-9a-fA-F]{1,6})\}|u([0-9a-fA-F]{4})|x([0-9a-fA-F]{2})|([nrtbfv0'"\\/]))/g;
const SIMPLE: Record<string, string> = { n: '\n', r: '\r', t: '\t', b: '\b', f: '\f', v: '\v', '0': '\0' };
// A lone surrogate half (`\ud83d`) is kept as it is: its pair follows as the next escape.
const jsEscapes: Decoder = (text) =>
  piecesOf(JS_ESCAPE, text, (m) => {
    const hex = m[1] ?? m[2] ?? m[3];
    if (hex !== undefined) return m[2] ? String.fromCharCode(parseInt(hex, 16)) : codePoint(parseInt(hex, 16));
    return SIMPLE[m[4]!] ?? m[4]!;
  });

// Percent-encoding, with `+` as a space as forms write it (only in text that has a percent escape at all).
const PERCENT = /(?:%[0-9a-fA-F]{2})+|\+/g;
const percent: Decoder = (text) =>
  /%[0-9a-fA-F]{2}/.test(text) ? piecesOf(PERCENT, text, (m) => (m[0] === '+' ? ' ' : escapedBytes(m[0]))) : [];

const QP = /(?:=[0-9A-F]{2})+/g;
const quotedPrintable: Decoder = (text) => piecesOf(QP, text, (m) => escapedBytes(m[0]));

// Base64 and base64url, padded or not, at least 12 bytes' worth; tried at each of the four alignments a run glued
// to a word may have. Only a run that decodes to readable text is read (a hash or a key's bytes stay as written).
const BASE64 = /[A-Za-z0-9+/_-]{16,}={0,2}/g;
const base64: Decoder = (text) => {
  const out: Piece[] = [];
  for (const m of text.matchAll(BASE64)) {
    for (let k = 0; k < 4; k++) {
      let s = m[0].slice(k).replace(/=+$/, '').replace(/-/g, '+').replace(/_/g, '/');
      if (s.length % 4 === 1) s = s.slice(0, -1);
      const value = readableText(Buffer.from(s, 'base64'));
      if (value !== null) {
        out.push({ at: m.index! + k, length: m[0].length - k, value });
        break;
      }
    }
  }
  return out;
};

const HEX = /[0-9a-fA-F]{16,}/g;
const hex: Decoder = (text) => {
  const out: Piece[] = [];
  for (const m of text.matchAll(HEX)) {
    for (let k = 0; k < 2; k++) {
      const digits = m[0].slice(k, k + ((m[0].length - k) & ~1));
      const value = readableText(Buffer.from(digits, 'hex'));
      if (value !== null) {
        out.push({ at: m.index! + k, length: digits.length, value });
        break;
      }
    }
  }
  return out;
};

const DECODERS: Decoder[] = [joined, entities, jsEscapes, percent, quotedPrintable, base64, hex];

/** Encodings stacked deeper than this (base64 of a twice percent-encoded, wrapped text) are not undone. */
const DEPTH = 4;
/** At most this many readings of one text (each distinct; ordinary text has none or one). */
const MAX_READINGS = 64;

// A long text (a fact can be a whole page) is read in overlapping windows, so that its readings take memory in
// proportion to a window, not to the text times MAX_READINGS. An encoded secret longer than the overlap that
// straddles two windows is the one form this can miss.
const WINDOW = 16_384;
const OVERLAP = 4_096;

/**
 * Every distinct reading of `text` that undoing up to DEPTH layers of wrapping and encoding gives, in any order
 * (an order that destroys one form, `+` read as a space inside base64, leaves another that keeps it).
 */
export function readings(text: string): Reading[] {
  if (text.length <= WINDOW) return readingsOfWindow(text);
  const out: Reading[] = [];
  for (let at = 0; at < text.length - OVERLAP; at += WINDOW - OVERLAP) {
    for (const r of readingsOfWindow(text.slice(at, at + WINDOW))) {
      out.push({ text: r.text, start: r.start.map((i) => i + at), end: r.end.map((i) => i + at) });
    }
  }
  return out;
}

function readingsOfWindow(text: string): Reading[] {
  const out: Reading[] = [];
  const seen = new Set([text]);
  let frontier = [asWritten(text)];
  for (let depth = 0; depth < DEPTH && frontier.length > 0; depth++) {
    const next: Reading[] = [];
    for (const r of frontier) {
      for (const decode of DECODERS) {
        const pieces = decode(r.text);
        if (pieces.length === 0) continue;
        const read = rewrite(r, pieces);
        if (seen.has(read.text)) continue;
        seen.add(read.text);
        out.push(read);
        next.push(read);
        if (out.length >= MAX_READINGS) return out;
      }
    }
    frontier = next;
  }
  return out;
}
