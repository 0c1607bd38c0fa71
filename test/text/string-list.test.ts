/**
 * What erase holds of every memory it takes (src/text/string-list.ts): each string comes back exactly as it went in,
 * whatever its characters, and the list answers whether it holds one by the string's own units.
 */
import { describe, expect, it } from 'vitest';
import { chunksOf, memberOf, StringList } from '../../src/text/string-list.js';

const SAMPLES = ['', 'm1', 'fact number 12: plain ASCII', 'café crème', 'curly ’quotes’ — and a dash', '𝒳 astral', 'lone \ud800 surrogate', 'tail \udfff', 'x'.repeat(70_000), 'é'.repeat(600_000)];

describe('StringList', () => {
  it('gives back every string as it was, across chunks, in order', () => {
    const many = Array.from({ length: 400_000 }, (_, i) => `${SAMPLES[i % SAMPLES.length]!.slice(0, 40)}#${i}`);
    const all = [...SAMPLES, ...many, ...SAMPLES];
    const list = StringList.from(all);
    expect(list.length).toBe(all.length);
    expect([...list]).toEqual(all);
    expect(list.slice(5, 12)).toEqual(all.slice(5, 12));
    expect(list.at(all.length - 1)).toBe(all.at(-1));
    expect([...chunksOf(list, 4096)].flat()).toEqual(all);
    expect(() => list.at(all.length)).toThrow(RangeError);
  });

  it('packed (its full chunks deflated), gives back the same and holds less', () => {
    const texts = Array.from({ length: 60_000 }, (_, i) => `${SAMPLES[i % SAMPLES.length]!.slice(0, 40)} fact number ${i}: the agent learned something`);
    const all = [...SAMPLES, ...texts, ...SAMPLES];
    const packed = new StringList({ packed: true });
    for (const s of all) packed.push(s);
    expect([...packed]).toEqual(all);
    expect([...chunksOf(packed, 4096)].flat()).toEqual(all);
    expect(packed.at(3)).toBe(all[3]);
    expect(packed.at(all.length - 2)).toBe(all.at(-2));
    expect(packed.has(texts[7]!)).toBe(true);
    expect(packed.has(`${texts[7]!} `)).toBe(false);
    const bytes = (l: StringList) => (l as unknown as { chunks: Buffer[] }).chunks.reduce((n, c) => n + c.length, 0);
    expect(bytes(packed)).toBeLessThan(bytes(StringList.from(all)) / 2);
  });

  it('says whether it holds a string, exactly (not a prefix, not another encoding of it)', () => {
    const list = new StringList();
    for (const s of SAMPLES) list.push(s);
    for (const s of SAMPLES) expect(list.has(s)).toBe(true);
    for (const s of ['m', 'm10', 'cafe crème', 'lone \ud801 surrogate', 'x'.repeat(69_999), 'fact number 12: plain ASCII ']) expect(list.has(s)).toBe(false);
    // Strings pushed after the first question are found too (the index grows with the list).
    for (let i = 0; i < 10_000; i++) list.push(`id-${i}`);
    expect(list.has('id-0')).toBe(true);
    expect(list.has('id-9999')).toBe(true);
    expect(list.has('id-10000')).toBe(false);
    expect(list.has('lone \ud800 surrogate')).toBe(true);
    expect(memberOf(list)('id-77')).toBe(true);
    expect(memberOf(['a', 'b'])('b')).toBe(true);
    expect(memberOf(['a', 'b'])('c')).toBe(false);
  });
});
