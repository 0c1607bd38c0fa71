import { describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { bytesComparisons, bytesFinder, bytesHits, textFinder } from '../../src/text/needles.js';
import { fileHolds } from '../../src/erase/snapshots.js';
import { tempDir } from '../helpers/store.js';

function rng(seed: number) {
  return () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
}

/** Every needle the text holds (of four units or more), with its first offset: a search for each in turn. */
function naiveHits(needles: readonly string[], hay: string): Map<number, number> {
  const out = new Map<number, number>();
  const b = Buffer.from(hay);
  needles.forEach((n, i) => {
    const at = Buffer.byteLength(n) >= 4 ? b.indexOf(Buffer.from(n)) : -1;
    if (at >= 0) out.set(i, at);
  });
  return out;
}

/**
 * Needles that share what makes a search slow or wrong: one long beginning (past every key width), one ending,
 * needles inside needles (each a prefix, a suffix or the middle of another), repeats of one unit, duplicates.
 */
function hardNeedles(rand: () => number): string[] {
  const word = (n: number) => Array.from({ length: n }, () => 'ab'[Math.floor(rand() * 2)]).join('');
  const out: string[] = [];
  for (let i = 0; i < 600; i++) out.push(`message ${String(i).padStart(9, '0')}`); // one 8-byte key, as sources
  for (let i = 0; i < 300; i++) out.push(`User prefers the one they said last time ${word(3 + Math.floor(rand() * 6))}`); // one 32-byte key
  for (let i = 0; i < 300; i++) out.push(`${word(2 + Math.floor(rand() * 8))} about the weather`); // one ending
  for (let i = 0; i < 300; i++) {
    const base = out[Math.floor(rand() * out.length)]!;
    const from = Math.floor(rand() * base.length);
    out.push(base.slice(from, from + 1 + Math.floor(rand() * (base.length - from)))); // inside another, some shorter than 4
  }
  for (let i = 1; i <= 40; i++) out.push('a'.repeat(i)); // each a prefix and suffix of the longer
  out.push(out[3]!, out[700]!, 'aaaa'); // duplicates
  out.push('été €😀 et puis', '€😀 et', '😀 e'); // multi-byte: bytes and UTF-16 units differ
  return out;
}

function hardText(rand: () => number, needles: readonly string[]): string {
  const parts: string[] = [];
  for (let i = 0; i < 60; i++) {
    const n = needles[Math.floor(rand() * needles.length)]!;
    const r = rand();
    // Whole, cut short by a unit or two (a near miss), or overlapping the next part.
    parts.push(r < 0.3 ? n : r < 0.7 ? n.slice(0, Math.max(0, n.length - 1 - Math.floor(rand() * 2))) : n.slice(Math.floor(n.length / 2)));
    parts.push(['', ' ', 'b', 'message 00000', 'aaaaaaa'][Math.floor(rand() * 5)]!);
  }
  return parts.join('');
}

describe('the many-needles search', () => {
  it('finds what a search for each needle in turn finds: shared beginnings and endings, needles inside needles, duplicates', () => {
    const rand = rng(35);
    const needles = hardNeedles(rand);
    const findText = textFinder(needles);
    const findBytes = bytesFinder(needles.map((n) => Buffer.from(n)));
    const hits = bytesHits(needles.map((n) => Buffer.from(n)));
    let found = 0;
    for (let round = 0; round < 150; round++) {
      const hay = hardText(rand, needles);
      const expected = naiveHits(needles, hay);
      const holds = needles.some((n) => n.length >= 4 && hay.includes(n));
      expect(expected.size > 0).toBe(holds); // bytes and UTF-16 units agree on these texts
      expect(findText(hay)).toBe(holds);
      expect(findBytes(Buffer.from(hay))).toBe(holds);
      // Skipping some needles leaves exactly the others, each at its first offset.
      const skip = new Set([...expected.keys()].filter((_, i) => i % 3 === 0));
      const got = new Map(hits(Buffer.from(hay), skip).map((h) => [h.needle, h.at]));
      expect(got).toEqual(new Map([...expected].filter(([k]) => !skip.has(k))));
      found += expected.size;
    }
    expect(found).toBeGreaterThan(1000);
  });

  it('says no where only near misses are: every needle cut short by one unit', () => {
    const needles = hardNeedles(rng(37)).filter((n) => n.length > 5 && !/^a+$/.test(n));
    const hay = needles.map((n) => n.slice(0, -1)).join('\u0001');
    const kept = needles.filter((n) => !hay.includes(n));
    expect(kept.length).toBeGreaterThan(1000);
    expect(textFinder(kept)(hay)).toBe(false);
    expect(bytesFinder(kept.map((n) => Buffer.from(n)))(Buffer.from(hay))).toBe(false);
    expect(bytesHits(kept.map((n) => Buffer.from(n)))(Buffer.from(hay), new Set())).toEqual([]);
  });

  it('compares a position with a few of the needles sharing its key, not with each of them', () => {
    // 10,000 sources beginning alike (their 8-byte key) and a text with 2,000 of that beginning, none of them erased.
    const needles = Array.from({ length: 10_000 }, (_, i) => Buffer.from(`message ${String(i * 2 + 1).padStart(9, '0')}`));
    const hay = Buffer.from(Array.from({ length: 2_000 }, (_, i) => `message ${String(i * 2).padStart(9, '0')};`).join(''));
    const find = bytesFinder(needles);
    const hits = bytesHits(needles);
    // Counted: a comparison with each needle would be 2 × 20,000,000 of them. log2(10,000) is 14.
    const bound = 2 * 2_000 * 20;
    const before = bytesComparisons();
    expect(find(hay)).toBe(false);
    expect(hits(hay, new Set())).toEqual([]);
    const compared = bytesComparisons() - before;
    expect(compared).toBeGreaterThan(0);
    expect(compared).toBeLessThanOrEqual(bound);
  });

  it('finds a needle cut in two by the chunks a file is read in, and not one cut short there', async () => {
    const { dir, cleanup } = tempDir();
    try {
      const needles = Array.from({ length: 200 }, (_, i) => `message ${String(i).padStart(9, '0')} and the rest of it`);
      const chunk = 1 << 20;
      for (const [cut, whole] of [[5, true], [35, true], [20, false]] as const) {
        const needle = needles[77]!;
        // The needle's first `cut` bytes end the first chunk; the rest (or, cut short, all but its last byte) begins the next.
        const tail = whole ? needle.slice(cut) : needle.slice(cut, -1);
        const file = join(dir, `f-${cut}`);
        writeFileSync(file, Buffer.concat([Buffer.alloc(chunk - cut, 'message 0000000 '), Buffer.from(needle.slice(0, cut)), Buffer.from(tail), Buffer.alloc(1000, 'x')]));
        expect(await fileHolds(file, needles), `cut at ${cut}`).toBe(whole);
      }
    } finally {
      cleanup();
    }
  });
});
