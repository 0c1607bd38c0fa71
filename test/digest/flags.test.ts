import { describe, expect, it } from 'vitest';
import { lookTwiceReasons, lookTwiceRules, matches } from '../../src/digest/flags.js';
import { DEFAULT_INSTRUCTIONS, DEFAULT_SECRETS, DEFAULT_TOOL_SOURCES, type LabelledPattern } from '../../src/digest/config.js';

// Patterns a user might write, chosen where `u` could change a match: word edges, \W, classes, ranges, the letters
// that fold to non-ASCII ones (k, s), \x escapes above 0x7f, backreferences, named groups, lookbehind.
const USER_PATTERNS = [
  '\\bslack\\b', 'kelvin|\\bks?\\b', '\\W+s\\W', '[a-z]{3}\\d', '[^a-z]k', '\\B[sk]', '[\\x80-\\xff]|x',
  '(s)\\1', '(?<w>k)\\k<w>', '(?<=token)\\s*=', '^\\s*$', '[\\w-]+@[\\w.]+', '\\S{20,}', 'a.c', '[^\\W\\d]K',
  'p[a@]ss(w|vv)o?rd', '\\bx{2,}\\b', '[\\s\\S]{3}s$',
];

const ALL: LabelledPattern[] = [
  ...DEFAULT_TOOL_SOURCES, ...DEFAULT_INSTRUCTIONS, ...DEFAULT_SECRETS,
  ...USER_PATTERNS.map((pattern) => ({ pattern, label: pattern })),
];

/** A deterministic stream of ASCII texts built from the patterns' own words, the folding letters and punctuation. */
function asciiTexts(n: number): string[] {
  const words = ['password', 'PassWord', 'api_key', 'token', 'secret', 'sk-', 'ghp_', 'AKIA', 'ignore previous', 'always',
    'NEVER', 'from now on', 'skip the tests', '--force', 'jailbreak', 'https://', 'www.', 'tool', 'file', 'issue', 'stdout', 'k', 'K', 's', 'S', 'ss', 'kk', 'KS',
    'slack', 'x', 'xx', 'abc', 'a1', 'e@x.io', '=', ':', ' ', '\n', '-', '_', '.', '/', '\t', '0123456789', 'ABCDEFGHIJKLMNOP'];
  let seed = 0x9e3779b9;
  const rand = (m: number) => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) % m;
  };
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    let t = '';
    const parts = 1 + rand(8);
    for (let j = 0; j < parts; j++) t += rand(4) === 0 ? String.fromCharCode(32 + rand(95)) : words[rand(words.length)];
    out.push(t);
  }
  return out;
}

describe('look twice: the ASCII twin of each pattern', () => {
  it('answers as the Unicode pattern does on every ASCII text', () => {
    const rules = lookTwiceRules({ sources: ALL, instructions: [], secrets: [] }).sources;
    const twinned = rules.filter((r) => r.ascii !== null);
    expect(twinned.length).toBe(ALL.length); // every pattern here is plain ASCII: each has a twin to hold
    const seen = twinned.map(() => new Set<boolean>());
    for (const text of asciiTexts(4000)) {
      twinned.forEach((r, i) => {
        const want = r.re.test(text);
        seen[i]!.add(want);
        expect(matches(r, text, true), `${r.re.source} on ${JSON.stringify(text)}`).toBe(want);
      });
    }
    // The texts reach every pattern both ways: each matched some and missed some.
    expect(twinned.filter((_, i) => seen[i]!.size < 2).map((r) => r.re.source)).toEqual([]);
  });

  it('has no twin where u changes the pattern itself (\\u, \\p, \\P, non-ASCII letters)', () => {
    const rules = lookTwiceRules({
      sources: [], secrets: [],
      instructions: [
        { pattern: '\\u017Fecret', label: 'long s escape' }, { pattern: '\\u{73}ecret', label: 'code point' },
        { pattern: '\\p{Nd}{4}', label: 'property' }, { pattern: '[\\P{L}]x', label: 'negated property' },
        { pattern: 'paſſword', label: 'literal long s' }, { pattern: '\u212Aey', label: 'Kelvin' },
      ],
    });
    expect(rules.instructions.map((r) => r.ascii)).toEqual([null, null, null, null, null, null]);
    // ...and so each keeps its Unicode meaning on ASCII text.
    const reasons = (fact: string) => lookTwiceReasons({ subject: 's', fact, source: 'message' }, rules);
    expect(reasons('the SECRET is here')).toEqual(['reads like an instruction: long s escape', 'reads like an instruction: code point']);
    expect(reasons('in 2026')).toEqual(['reads like an instruction: property']);
    expect(reasons('PASSWORD')).toEqual(['reads like an instruction: literal long s']);
    expect(reasons('a key')).toEqual(['reads like an instruction: Kelvin']);
  });

  it('meets non-ASCII text with the Unicode pattern: folded letters still flag', () => {
    const rules = lookTwiceRules({ sources: DEFAULT_TOOL_SOURCES, instructions: DEFAULT_INSTRUCTIONS, secrets: DEFAULT_SECRETS });
    const flag = (fact: string, source = 'message') => lookTwiceReasons({ subject: 'x', fact, source }, rules);
    expect(flag('paſſword: hunter2')).toContain('looks like a credential');
    expect(flag('ALWAYS deploy on friday')).toEqual([expect.stringMatching(/^reads like an instruction/)]);
    expect(flag('ignore previous notes — ſo')).toEqual([expect.stringMatching(/^reads like an instruction/)]);
    expect(flag('plain fact', 'fetched from www.example.com ✓')).toEqual([expect.stringMatching(/^source is/)]);
    expect(flag('plain fact é')).toEqual([]);
  });
});
