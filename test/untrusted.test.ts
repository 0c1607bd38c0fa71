import { describe, expect, it } from 'vitest';
import { escapedLine, headerText, jsonText, oneLine, terminalText } from '../src/text/untrusted.js';
import { hiddenCodePoints } from './helpers/hostile.js';

// Every control but \n, every format character, line and paragraph separators, default-ignorables.
const RAW = /(?!\n)[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}]/u;
const HIDDEN = hiddenCodePoints().map((c) => String.fromCodePoint(c));
const CONTROLS = Array.from({ length: 0xa0 }, (_, i) => String.fromCharCode(i)).filter((c) => /\p{Cc}/u.test(c));
const EVERYTHING = [...CONTROLS, ...HIDDEN, '\u2028', '\u2029', '\uFFFE', '\uFFFF', '\uD800', '\uDFFF'].join('x');

describe('the one sanitiser', () => {
  it('oneLine, escapedLine and headerText leave no hidden character and no newline', () => {
    for (const f of [oneLine, escapedLine, headerText]) {
      const out = f(EVERYTHING);
      expect(out).not.toMatch(RAW);
      expect(out).not.toMatch(/[\n\uD800-\uDFFF]/);
    }
    expect(escapedLine('prefers \u001b[2Jpnpm \u202E\u{E0041}')).toBe('prefers \\u001b[2Jpnpm \\u202e\\u{e0041}');
  });

  it('terminalText keeps our own newlines and nothing else', () => {
    const out = terminalText(`line 1\n${EVERYTHING.replace(/\n/g, "")}\nline 3`);
    expect(out).not.toMatch(RAW);
    expect(out.split('\n')).toHaveLength(3);
  });

  it('jsonText parses back to the exact strings, and prints no hidden character', () => {
    const value = { id: EVERYTHING, nested: [{ fact: `\u001b]52;c;Zm9v\u0007 \u009b31m \u202Egnp.exe` }], n: 1 };
    const text = jsonText(value);
    expect(text).not.toMatch(RAW);
    expect(JSON.parse(text)).toEqual(value);
    expect(jsonText({ a: 'plain é 日本' }, 0)).toBe(JSON.stringify({ a: 'plain é 日本' }));
  });
});
