/**
 * Text read from a memory store (ids, facts, subjects, sources, drift evidence, error messages that quote them)
 * is hostile: it can carry terminal escapes (ESC/CSI/OSC/DCS, C1 controls, an OSC 52 clipboard write), CR/LF
 * that forge lines or mail headers, bidi overrides that make text read differently from what it is, and
 * characters that render as nothing. This is the one sanitiser every human-readable output goes through: the
 * CLI's printed lines, error messages, log lines, and the digest (which adds defanging on top, in
 * digest/untrusted.ts).
 */

// Everything that is not shown as itself: C0/C1 controls and DEL (Cc), format characters (Cf: bidi controls,
// zero-width joiners, soft hyphen, tag characters, BOM, interlinear annotations), line and paragraph separators,
// every default-ignorable code point (variation selectors, combining grapheme joiner, Hangul fillers, …),
// noncharacters and lone surrogates. New code points in these classes are covered as Node's Unicode data grows.
const HIDDEN = String.raw`\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}\p{Noncharacter_Code_Point}\p{Cs}`;
const UNSAFE = new RegExp(`[${HIDDEN}]`, 'gu');
const UNSAFE_BUT_NEWLINE = new RegExp(`(?!\\n)[${HIDDEN}]`, 'gu');
const NEWLINES = /\r\n|[\r\n\t]/g;

/** One line of plain text: newlines become a visible ⏎, tabs a space, every other hidden character a visible �. */
export function oneLine(text: unknown): string {
  return String(text ?? '')
    .replace(NEWLINES, (m) => (m === '\t' ? ' ' : ' ⏎ '))
    .replace(UNSAFE, '\uFFFD');
}

/**
 * One line for a terminal that names what was hidden: every hidden character, newlines included, as `\uXXXX`
 * (`\u{XXXXX}` beyond the BMP), so `prefers \u001b[2Jpnpm` shows a person the escape that was stored.
 */
export function escapedLine(text: unknown): string {
  return String(text ?? '').replace(UNSAFE, (c) => {
    const cp = c.codePointAt(0)!;
    return cp > 0xffff ? `\\u{${cp.toString(16)}}` : `\\u${cp.toString(16).padStart(4, '0')}`;
  });
}

/**
 * The last line of defence for a terminal: a block of our own lines, where `\n` is ours and stays, and every
 * other hidden character (ESC, BEL, CR, C1, bidi, …) becomes �, whatever slipped into it.
 */
export function terminalText(text: unknown): string {
  return String(text ?? '').replace(UNSAFE_BUT_NEWLINE, '\uFFFD');
}

/** For a mail header or a one-line error: one line, no control or hidden character at all, bounded length. */
export function headerText(text: unknown, max = 200): string {
  const line = oneLine(text).replace(/\uFFFD|⏎/g, ' ').replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/**
 * JSON for a terminal that still parses back to the exact same values: JSON.stringify already escapes C0
 * controls and lone surrogates; the other hidden characters (DEL, C1 such as U+009B CSI, bidi overrides, U+2028)
 * are written as `\uXXXX` escapes too (jsonEscaped).
 */
export function jsonText(value: unknown, indent = 2): string {
  return jsonEscaped(JSON.stringify(value, null, indent));
}

/**
 * JSON text (a document, a log line) with every hidden character but `\n` written as a `\uXXXX` escape. Outside
 * its strings JSON text holds none of them (its `\n` ends a line or separates), so the escape is exact: it parses
 * back to the very same values.
 */
export function jsonEscaped(json: string): string {
  return json.replace(UNSAFE_BUT_NEWLINE, (c) => {
    let out = '';
    for (let i = 0; i < c.length; i++) out += `\\u${c.charCodeAt(i).toString(16).padStart(4, '0')}`;
    return out;
  });
}

/** Shorten long untrusted text (a fact can be a whole page) without cutting a surrogate pair. */
export function clip(text: unknown, max: number): string {
  const s = String(text ?? '');
  // No more UTF-16 units than `max`, so no more characters: nothing to cut (most texts; the digest clips each row's).
  if (s.length <= max) return s;
  const chars = Array.from(s);
  return chars.length > max ? `${chars.slice(0, max - 1).join('')}…` : chars.join('');
}
