import { describe, expect, it } from 'vitest';
import { canonicalBound, classifyTime, FIRST_INSTANT, LAST_INSTANT, parseInstant, textUpperBound, toCanonical, parseDuration } from '../src/time/instants.js';

describe('parseInstant', () => {
  const at = Date.UTC(2026, 7, 8, 10, 0, 0);
  it.each([
    ['2026-08-08 10:00:00', at],
    ['2026-08-08T10:00:00Z', at],
    ['2026-08-08T10:00:00z', at],
    ['2026-08-08T12:00:00+02:00', at],
    ['2026-08-08T05:30:00-04:30', at],
    ['2026-08-08T10:00:00.000Z', at],
    ['2026-08-08 10:00:00.250', at + 250],
    ['2026-08-08T10:00:00.123456789Z', at + 123],
    ['2026-08-08 10:00', at],
    ['2026-08-08', Date.UTC(2026, 7, 8)],
    ['2026-08-07 24:00:00', Date.UTC(2026, 7, 8)],
    ['2026-08-08 10:00:00  ', at],
    ['2026-08-08T10:00:00.9999Z', at + 999],
  ])('reads %s as the same instant', (text, expected) => {
    expect(parseInstant(text)).toBe(expected);
  });

  it.each(['', 'tomorrow', '2026-13-01 00:00:00', '2026-02-30 00:00:00', '2026-08-08T10:00:00+15:00', '1700000000', '08/08/2026', '2026-08-08T12:00:00+0200', '2026-08-08T10:00:00+00', '2026-08-08t10:00:00Z', ' 2026-08-08 10:00:00', '2026-08-08 23:59:60', '2461000.5', 'now', '-2026-08-08'])(
    'refuses %s',
    (text) => expect(parseInstant(text)).toBeNull(),
  );

  it('refuses non-strings', () => {
    expect(parseInstant(1700000000)).toBeNull();
    expect(parseInstant(null)).toBeNull();
  });

  it('gets the day that text comparison gets wrong', () => {
    // As text, '2026-11-29T01:00:00Z' > '2026-11-29 12:00:00' all day long; as instants it is 11 hours earlier.
    expect('2026-11-29T01:00:00Z' > '2026-11-29 12:00:00').toBe(true);
    expect(parseInstant('2026-11-29T01:00:00Z')! < parseInstant('2026-11-29 12:00:00')!).toBe(true);
  });
});

describe('canonical form', () => {
  it('writes what datetime() writes', () => {
    expect(toCanonical(Date.UTC(2026, 10, 29, 6, 5, 4, 999))).toBe('2026-11-29 06:05:04');
  });
  it('classifies', () => {
    expect(classifyTime('2026-11-29 06:05:04')).toBe('canonical');
    expect(classifyTime('2026-11-29T06:05:04Z')).toBe('noncanonical');
    expect(classifyTime('2026-02-30 06:05:04')).toBe('unparseable');
  });
});

describe('textUpperBound', () => {
  it('bounds every form of an instant at or before t', () => {
    const t = Date.UTC(2026, 10, 29, 12, 0, 0);
    const bound = textUpperBound(t);
    for (const text of ['2026-11-30T01:59:00+14:00', '2026-11-29T23:00:00+11:00', '2026-11-29 12:00:00', '2026-11-28T23:59:59-12:00']) {
      expect(parseInstant(text)! <= t).toBe(true);
      expect(text < bound).toBe(true);
    }
  });
});

describe('parseDuration', () => {
  it('reads days, hours, weeks', () => {
    expect(parseDuration('7d')).toBe(7 * 86_400_000);
    expect(parseDuration('12h')).toBe(12 * 3_600_000);
    expect(parseDuration('2w')).toBe(14 * 86_400_000);
    expect(parseDuration('soon')).toBeNull();
  });
});

describe('the years canonical text holds', () => {
  it('toCanonical writes the first and last instant, and throws past them instead of writing what is no timestamp', () => {
    expect(FIRST_INSTANT).toBe(parseInstant('0000-01-01 00:00:00'));
    expect(LAST_INSTANT).toBe(parseInstant('9999-12-31 23:59:59.999'));
    expect(toCanonical(FIRST_INSTANT)).toBe('0000-01-01 00:00:00');
    expect(toCanonical(LAST_INSTANT)).toBe('9999-12-31 23:59:59');
    expect(toCanonical(new Date(LAST_INSTANT))).toBe('9999-12-31 23:59:59');
    for (const t of [LAST_INSTANT + 1, FIRST_INSTANT - 1, 8.64e15 + 1, -8.64e15 - 1, Number.NaN, Infinity, -Infinity]) {
      expect(() => toCanonical(t), String(t)).toThrow(/time out of range/);
    }
    expect(() => toCanonical(new Date(LAST_INSTANT + 1))).toThrow(/time out of range/);
  });

  it('canonicalBound is below or above every timestamp outside them, so comparisons stay exact', () => {
    const samples = ['0000-01-01 00:00:00', '2026-11-29 06:05:04', '9999-12-31 23:59:59'];
    for (const t of [FIRST_INSTANT - 1, FIRST_INSTANT - 1e12]) for (const s of samples) expect(s <= canonicalBound(t)).toBe(false);
    for (const t of [LAST_INSTANT + 1, LAST_INSTANT + 1e12]) for (const s of samples) expect(s <= canonicalBound(t)).toBe(true);
    expect(canonicalBound(Date.UTC(2026, 10, 29, 6, 5, 4))).toBe('2026-11-29 06:05:04');
  });

  it('textUpperBound near the ends still bounds every form of the year 9999, and nothing below the year 0000', () => {
    const t = LAST_INSTANT - 1000;
    const bound = textUpperBound(t);
    for (const text of ['9999-12-31 00:00:00', '9999-12-30T23:59:59-12:00', '9999-12-31T13:00:00+14:00']) {
      expect(parseInstant(text)! <= t, text).toBe(true);
      expect(text < bound, text).toBe(true);
    }
    expect(textUpperBound(FIRST_INSTANT - 3 * 86_400_000)).toBe('');
  });

  it('an offset can put a parseable text past them (what repair timestamps leaves alone)', () => {
    expect(parseInstant('9999-12-31T23:59:59-12:00')!).toBeGreaterThan(LAST_INSTANT);
    expect(parseInstant('0000-01-01T00:00:00+14:00')!).toBeLessThan(FIRST_INSTANT);
  });
});
