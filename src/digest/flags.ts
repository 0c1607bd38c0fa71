import type { DigestConfig, LabelledPattern } from './config.js';

/**
 * "Look twice": new rows that may be memory poisoning (BRIEF.md) — a source that is tool output, no source at
 * all, or a fact that reads like a standing instruction or holds a credential. Each reason names its rule.
 */
export interface LookTwiceRules {
  sources: Rule[];
  instructions: Rule[];
  secrets: Rule[];
  /**
   * The sources' rules, and the instructions' and secrets' (which read the same text), each as one pattern that
   * matches where any of them does (anyOf): most rows match none, and one pass over the text tells. Null where
   * the patterns cannot be joined without changing what one of them means.
   */
  anySource: Rule | null;
  anyText: Rule | null;
}

/**
 * A pattern, case-insensitive with Unicode semantics (`iu`), and where it has one an `i` twin that V8 runs about ten
 * times faster: on ASCII text the two agree for a pattern written in ASCII without `\u`, `\p` or `\P` (what `u`
 * changes there is case folding into and out of non-ASCII letters — `ſ` is `s`, `K` (Kelvin) is `k` — and what
 * those escapes mean; test/digest/flags.test.ts holds them against each other).
 *
 * `plain`: the twin also answers as the `iu` pattern on plain text (textKind): any text of the Basic Multilingual
 * Plane but `ſ` and `K`, the only two characters there whose case folding is an ASCII letter. A pattern with a
 * backreference (`\1`, `\k<…>`, which compares two of the text's own characters, folded one way or the other) or
 * naming a character above 0x7f (`\x80`–`\xff`) has no plain use of its twin. Text written by a model is full of
 * dashes and curly quotes: without this every such row met the slow pattern (seven times the time of an ASCII row).
 * Other text (an emoji, which `u` reads as one character and the twin as two) always meets the `iu` pattern.
 */
export interface Rule { re: RegExp; ascii: RegExp | null; plain: boolean; label: string }

/** What a text is, for which of a rule's patterns may answer for it. */
export type TextKind = 'ascii' | 'plain' | 'other';

const ASCII_TWIN = /^[\x00-\x7f]*$/;
const PLAIN_TEXT = /^[^\ud800-\udfff\u017f\u212a]*$/;
const U_ESCAPE = /\\[uUpP]/;
/** Where the text's own characters are compared folded (backreferences), or the pattern names one above 0x7f. */
const NOT_PLAIN = /\\[1-9]|\\k<|\\x[89a-fA-F]/;

export const textKind = (text: string): TextKind => (ASCII_TWIN.test(text) ? 'ascii' : PLAIN_TEXT.test(text) ? 'plain' : 'other');

function compileRule(p: LabelledPattern): Rule {
  const re = new RegExp(p.pattern, 'iu');
  const ascii = ASCII_TWIN.test(p.pattern) && !U_ESCAPE.test(p.pattern) ? twin(p.pattern) : null;
  return { re, ascii, plain: ascii !== null && !NOT_PLAIN.test(p.pattern), label: p.label };
}

function twin(pattern: string): RegExp | null {
  try {
    return new RegExp(pattern, 'i');
  } catch {
    return null;
  }
}

const compile = (list: LabelledPattern[]) => list.map(compileRule);

/** A backreference (its number or name would point into another pattern once joined) or a named group (two may clash). */
const NOT_JOINABLE = /\\[1-9]|\\k<|\(\?<[^=!]/;

/**
 * One rule matching wherever any of `list` does: `(?:a)|(?:b)|…`, which matches a text iff one of them matches it
 * (an alternative is tried at every position). Null for fewer than two patterns, or where one holds a backreference
 * or a named group.
 */
function anyOf(list: LabelledPattern[]): Rule | null {
  if (list.length < 2 || list.some((p) => NOT_JOINABLE.test(p.pattern))) return null;
  try {
    return compileRule({ pattern: list.map((p) => `(?:${p.pattern})`).join('|'), label: 'any' });
  } catch {
    return null;
  }
}

/**
 * False only where no rule of the list can match `text`: the joined pattern's fast twin answered no. Where only its
 * `iu` pattern could answer (a text that is not plain, or a pattern without a twin), the rules are tried one by one.
 */
const mayMatch = (any: Rule | null, text: string, kind: TextKind) =>
  any === null || !(any.ascii && (kind === 'ascii' || (kind === 'plain' && any.plain))) || any.ascii.test(text);

/** rule.re.test(text), through the ASCII twin when it may (`kind` is textKind(text)). */
export const matches = (rule: Rule, text: string, kind: TextKind) =>
  (rule.ascii && (kind === 'ascii' || (kind === 'plain' && rule.plain)) ? rule.ascii : rule.re).test(text);

export function lookTwiceRules(config: DigestConfig['lookTwice']): LookTwiceRules {
  return {
    sources: compile(config.sources), instructions: compile(config.instructions), secrets: compile(config.secrets),
    anySource: anyOf(config.sources), anyText: anyOf([...config.instructions, ...config.secrets]),
  };
}

// A pathological fact can be megabytes; the patterns only need its beginning.
const SCAN_CHARS = 4000;

export function lookTwiceReasons(row: { subject: unknown; fact: unknown; source: unknown }, rules: LookTwiceRules): string[] {
  const reasons: string[] = [];
  const source = typeof row.source === 'string' ? row.source.slice(0, SCAN_CHARS) : '';
  if (source.trim() === '') reasons.push('no source: cannot be re-checked');
  else {
    const kind = textKind(source);
    if (mayMatch(rules.anySource, source, kind)) for (const r of rules.sources) if (matches(r, source, kind)) reasons.push(`source is ${r.label}`);
  }
  const text = `${String(row.subject ?? '').slice(0, 500)}\n${String(row.fact ?? '').slice(0, SCAN_CHARS)}`;
  const kind = textKind(text);
  if (!mayMatch(rules.anyText, text, kind)) return reasons;
  for (const r of rules.instructions) if (matches(r, text, kind)) reasons.push(`reads like an instruction: ${r.label}`);
  for (const r of rules.secrets) if (matches(r, text, kind)) reasons.push(r.label);
  return reasons;
}
