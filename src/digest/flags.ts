import type { DigestConfig, LabelledPattern } from './config.js';

/**
 * "Look twice": new rows that may be memory poisoning (BRIEF.md) — a source that is tool output, no source at
 * all, or a fact that reads like a standing instruction or holds a credential. Each reason names its rule.
 */
export interface LookTwiceRules {
  sources: { re: RegExp; label: string }[];
  instructions: { re: RegExp; label: string }[];
  secrets: { re: RegExp; label: string }[];
}

const compile = (list: LabelledPattern[]) => list.map((p) => ({ re: new RegExp(p.pattern, 'iu'), label: p.label }));

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
    for (const r of rules.sources) if (r.re.test(source)) reasons.push(`source is ${r.label}`);
  }
  const text = `${String(row.subject ?? '').slice(0, 500)}\n${String(row.fact ?? '').slice(0, SCAN_CHARS)}`;
  for (const r of rules.instructions) if (r.re.test(text)) reasons.push(`reads like an instruction: ${r.label}`);
  for (const r of rules.secrets) if (r.re.test(text)) reasons.push(r.label);
  return reasons;
}
