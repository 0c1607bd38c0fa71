import { describe, expect, it } from 'vitest';
import { lookTwiceReasons, lookTwiceRules, matches, textKind } from '../../src/digest/flags.js';
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
function asciiTexts(n: number, extra: readonly string[] = []): string[] {
  const words = [...extra, 'password', 'PassWord', 'api_key', 'token', 'secret', 'sk-', 'ghp_', 'AKIA', 'ignore previous', 'always',
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
        expect(matches(r, text, 'ascii'), `${r.re.source} on ${JSON.stringify(text)}`).toBe(want);
      });
    }
    // The texts reach every pattern both ways: each matched some and missed some.
    expect(twinned.filter((_, i) => seen[i]!.size < 2).map((r) => r.re.source)).toEqual([]);
  });

  it('answers as the Unicode pattern does on plain non-ASCII text (dashes, quotes, letters of other scripts), or is not used there', () => {
    // Non-ASCII characters of the Basic Multilingual Plane, among them those whose folding differs between the two
    // (Ω and the ohm sign, ß and ẞ, µ and μ, Å and the angstrom sign, İ and ı), inside the same ASCII words.
    const wide = ['—', '–', '’', '“', '”', '…', 'é', 'É', 'ü', 'ñ', 'ç', 'Ω', '\u2126', 'ω', 'ß', '\u1E9E', 'µ', 'μ', 'Å', '\u212B', 'å', 'İ', 'ı', 'ΣΑΣ', 'ς', 'и', 'Ж', '漢字', '\u00A0', '\u2028', '\uFEFF', 'ÿ', 'Ÿ'];
    const texts = asciiTexts(6000, wide).map((t, i) => t + wide[i % wide.length]!);
    const rules = lookTwiceRules({ sources: [...ALL, { pattern: '(.)\\1', label: 'any letter twice' }], instructions: [], secrets: [] }).sources;
    for (const text of texts) {
      expect(textKind(text)).toBe('plain');
      for (const r of rules) expect(matches(r, text, 'plain'), `${r.re.source} on ${JSON.stringify(text)}`).toBe(r.re.test(text));
    }
    // A backreference compares the text with itself, folded one way or the other: its twin is kept off such text
    // (on "ΩΩ", the ohm sign then omega, only the Unicode pattern sees one letter twice); so is a pattern naming a
    // character above 0x7f. Every other pattern here is plain.
    const backref = rules.find((r) => r.label === 'any letter twice')!;
    expect(backref.plain).toBe(false);
    expect(backref.ascii!.test('\u2126\u03A9')).not.toBe(backref.re.test('\u2126\u03A9'));
    expect(matches(backref, '\u2126\u03A9', 'plain')).toBe(true);
    expect(rules.filter((r) => !r.plain).map((r) => r.re.source).sort()).toEqual(['(.)\\1', '(?<w>k)\\k<w>', '(s)\\1', '[\\x80-\\xff]|x'].sort());
  });

  it('takes ſ, the Kelvin sign and anything outside the Basic Multilingual Plane as other text', () => {
    expect(textKind('password')).toBe('ascii');
    expect(textKind('pass — word’s')).toBe('plain');
    expect(['paſſword', '\u212Aey', 'ok 😀', 'lone \ud800'].map(textKind)).toEqual(['other', 'other', 'other', 'other']);
    const rules = lookTwiceRules({ sources: DEFAULT_TOOL_SOURCES, instructions: DEFAULT_INSTRUCTIONS, secrets: DEFAULT_SECRETS });
    const flag = (fact: string) => lookTwiceReasons({ subject: 'x', fact, source: 'message' }, rules);
    expect(flag('the paſſword: hunter2 — said on the phone')).toContain('looks like a credential');
    expect(flag('a plain fact — with a dash’s quote')).toEqual([]);
    expect(flag('password: hunter2 — said on the phone')).toContain('looks like a credential');
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

describe('look twice: the rules of a list joined into one pattern', () => {
  const wide = ['—', '’', '“', 'é', 'ſ', '\u212A', 'Ω', 'ß', '漢字', '🐝', '\u2028'];
  const texts = [...asciiTexts(3000), ...asciiTexts(3000, wide).map((t, i) => t + wide[i % wide.length]!)];
  const rows = texts.map((t, i) => ({ subject: i % 5 === 0 ? t : 'someone', fact: t, source: i % 3 === 0 ? t : texts[(i * 7) % texts.length]! }));

  it('gives every row the reasons the rules give one by one: defaults, user patterns, backreferences and named groups', () => {
    const sets = [
      { sources: DEFAULT_TOOL_SOURCES, instructions: DEFAULT_INSTRUCTIONS, secrets: DEFAULT_SECRETS },
      { sources: ALL, instructions: USER_PATTERNS.slice(0, 7).map((pattern) => ({ pattern, label: pattern })), secrets: DEFAULT_SECRETS },
      { sources: DEFAULT_TOOL_SOURCES, instructions: ALL, secrets: [{ pattern: '(?<a>x)\\k<a>', label: 'xx' }] },
    ];
    for (const config of sets) {
      const joined = lookTwiceRules(config);
      const oneByOne = { ...joined, anySource: null, anyText: null };
      let flagged = 0;
      for (const row of rows) {
        const want = lookTwiceReasons(row, oneByOne);
        if (want.length > 0) flagged += 1;
        expect(lookTwiceReasons(row, joined), JSON.stringify(row)).toEqual(want);
      }
      expect(flagged).toBeGreaterThan(100);
      expect(flagged).toBeLessThan(rows.length);
    }
  });

  it('joins only what it can: no backreference or named group, at least two patterns', () => {
    const rules = (instructions: LabelledPattern[]) => lookTwiceRules({ sources: DEFAULT_TOOL_SOURCES, instructions, secrets: [] });
    expect(rules(DEFAULT_INSTRUCTIONS).anyText).not.toBeNull();
    expect(rules(DEFAULT_INSTRUCTIONS).anySource).not.toBeNull();
    expect(rules([{ pattern: 'a', label: 'a' }]).anyText).toBeNull();
    expect(rules([{ pattern: '(s)\\1', label: 'b' }, { pattern: 'a', label: 'a' }]).anyText).toBeNull();
    expect(rules([{ pattern: '(?<w>k)', label: 'b' }, { pattern: 'a', label: 'a' }]).anyText).toBeNull();
    expect(rules([{ pattern: '(?<=k)s', label: 'b' }, { pattern: '(?<!k)a', label: 'a' }]).anyText).not.toBeNull();
    // What the joined pattern says where a backreference is joined with others: its group is no longer group 1.
    expect(new RegExp('(?:a)|(?:(s)\\1)', 'i').test('ss')).toBe(true);
    expect(new RegExp('(?:(a))|(?:(s)\\1)', 'i').test('s')).toBe(true); // \1 names the other pattern's group, unset: matches empty
  });
});
