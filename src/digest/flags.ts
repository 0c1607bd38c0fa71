import type { DigestConfig, LabelledPattern } from './config.js';

/**
 * "Look twice": new rows that may be memory poisoning (BRIEF.md) — a source that is tool output, no source at
 * all, or a fact that reads like a standing instruction or holds a credential. Each reason names its rule.
 */
export interface LookTwiceRules {
  sources: Rule[];
  instructions: Rule[];
  secrets: Rule[];
}

/**
 * A pattern, case-insensitive with Unicode semantics (`iu`), and where it has one an `i` twin that V8 runs about ten
 * times faster: on ASCII text the two agree for a pattern written in ASCII without `\u`, `\p` or `\P` (what `u`
 * changes there is case folding into and out of non-ASCII letters — `ſ` is `s`, `K` (Kelvin) is `k` — and what
 * those escapes mean; test/digest/flags.test.ts holds them against each other). Text with any other character
 * always meets the `iu` pattern.
 */
export interface Rule { re: RegExp; ascii: RegExp | null; label: string }

const ASCII_TWIN = /^[\x00-\x7f]*$/;
const U_ESCAPE = /\\[uUpP]/;

function compileRule(p: LabelledPattern): Rule {
  const re = new RegExp(p.pattern, 'iu');
  return { re, ascii: ASCII_TWIN.test(p.pattern) && !U_ESCAPE.test(p.pattern) ? twin(p.pattern) : null, label: p.label };
}

function twin(pattern: string): RegExp | null {
  try {
    return new RegExp(pattern, 'i');
  } catch {
    return null;
  }
}

const compile = (list: LabelledPattern[]) => list.map(compileRule);

/** rule.re.test(text), through the ASCII twin when it may: `ascii` says whether `text` is all ASCII. */
export const matches = (rule: Rule, text: string, ascii: boolean) => (ascii && rule.ascii ? rule.ascii : rule.re).test(text);

export function lookTwiceRules(config: DigestConfig['lookTwice']): LookTwiceRules {
  return { sources: compile(config.sources), instructions: compile(config.instructions), secrets: compile(config.secrets) };
}

// A pathological fact can be megabytes; the patterns only need its beginning.
const SCAN_CHARS = 4000;

export function lookTwiceReasons(row: { subject: unknown; fact: unknown; source: unknown }, rules: LookTwiceRules): string[] {
  const reasons: string[] = [];
  const source = typeof row.source === 'string' ? row.source.slice(0, SCAN_CHARS) : '';
  if (source.trim() === '') reasons.push('no source: cannot be re-checked');
  else {
    const ascii = ASCII_TWIN.test(source);
    for (const r of rules.sources) if (matches(r, source, ascii)) reasons.push(`source is ${r.label}`);
  }
  const text = `${String(row.subject ?? '').slice(0, 500)}\n${String(row.fact ?? '').slice(0, SCAN_CHARS)}`;
  const ascii = ASCII_TWIN.test(text);
  for (const r of rules.instructions) if (matches(r, text, ascii)) reasons.push(`reads like an instruction: ${r.label}`);
  for (const r of rules.secrets) if (matches(r, text, ascii)) reasons.push(r.label);
  return reasons;
}
