/**
 * Does a text hold any of many needles? Erase looks for every erased text at once (in snapshot files, in point
 * payloads, in the state db, in a PostgreSQL table's relation files), and an erase can take a chain of 100,000
 * versions: searching for each needle in turn costs needles × text, hours at that size. Past a few needles they are
 * found in one pass over the text, whatever their number: each needle is keyed by a hash of its first `w` units
 * (w = 4, 8 or 32, the largest its length allows), and a rolling hash of the text's window of each width is looked
 * up at every position (a bit set first, so most positions cost a few multiplications).
 *
 * Needles sharing a key are kept sorted, with each one's longest proper prefix among them: at a position whose
 * window has their key, a binary search finds the greatest needle not after the text there, and only it and its
 * prefixes can be at that position (a string between a prefix of the text and the text starts with that prefix).
 * So a position costs log2(needles sharing the key) comparisons, not one per needle: 10,000 sources that all begin
 * `message ` (their 8-unit key) were compared with each of the 100,000 `message ` of a table, 10^9 comparisons.
 * Needles shorter than four units are never searched for.
 */

/** Below this many needles, the native search of each in turn is faster. */
const FEW = 16;
const WIDTHS = [32, 8, 4] as const;
const MUL = 0x01000193;

interface Units<H> {
  length: (hay: H) => number;
  at: (hay: H, i: number) => number;
  /** Lexicographic order of units (a prefix before what it begins). */
  order: (a: H, b: H) => number;
  /** Whether `short` is a prefix of `long` (or equal to it). */
  begins: (long: H, short: H) => boolean;
}

interface Tier {
  w: number;
  /** The bit set has 2^bits bits, about 64 per needle: a text's window passes it by chance 1 time in 64 or less. */
  shift: number;
  /** MUL^(w-1), to take the unit leaving the window out of the hash. */
  top: number;
  bits: Uint32Array;
  /** The needles of each key, in lexicographic order. */
  byHash: Map<number, number[]>;
}

interface Index {
  tiers: Tier[];
  /** Each needle's longest proper prefix (or an equal needle before it) among those sharing its key; -1: none. */
  prefixOf: Int32Array;
}

/**
 * What one pass over a text looks for: `base` at every position; `up` (a wider tier) only where the base window is one
 * of its needles' beginnings (`upKeys`, also set in base's bit set), its own window hashed there. So the 8- and 32-unit
 * tiers take one pass, not two: a pass is a bit-set lookup per position, in a bit set of megabytes for many needles.
 */
interface Pass {
  base: Tier;
  up?: Tier;
  upKeys?: Set<number>;
}

/** The passes over a text: the 32-unit tier rides on the 8-unit one when both are in use; the 4-unit tier alone. */
function passesOf<H>(index: Index, needles: readonly H[], u: Units<H>): Pass[] {
  const eight = index.tiers.find((t) => t.w === 8);
  const wide = index.tiers.find((t) => t.w === 32);
  // Every tier but those two passes on its own.
  const passes: Pass[] = index.tiers.filter((t) => t !== eight && !(t === wide && eight)).map((base) => ({ base }));
  if (!eight) return passes;
  if (!wide) return [{ base: eight }, ...passes];
  const upKeys = new Set<number>();
  for (const list of wide.byHash.values()) {
    for (const idx of list) {
      const h = hashAt(u, needles[idx]!, 0, 8);
      upKeys.add(h);
      const b = h >>> eight.shift;
      eight.bits[b >>> 5]! |= 1 << (b & 31);
    }
  }
  passes.unshift({ base: eight, up: wide, upKeys });
  return passes;
}

function hashAt<H>(u: Units<H>, s: H, from: number, w: number): number {
  let h = 0;
  for (let k = 0; k < w; k++) h = (Math.imul(h, MUL) + u.at(s, from + k)) | 0;
  return h;
}

/** The tiers of `needles` (each keyed by the hash of its first w units), those in use, and the prefixes of each key's. */
function indexOf<H>(needles: readonly H[], u: Units<H>): Index {
  const bits = Math.min(26, Math.max(10, Math.ceil(Math.log2(needles.length * 64))));
  const tiers: Tier[] = WIDTHS.map((w) => {
    let top = 1;
    for (let k = 1; k < w; k++) top = Math.imul(top, MUL);
    return { w, top, shift: 32 - bits, bits: new Uint32Array(0), byHash: new Map() };
  });
  const widthOf = needles.map((n) => tiers.findIndex((x) => x.w <= u.length(n)));
  tiers.forEach((t, i) => {
    if (widthOf.includes(i)) t.bits = new Uint32Array(1 << (bits - 5));
  });
  needles.forEach((n, idx) => {
    const t = tiers[widthOf[idx]!]!;
    const h = hashAt(u, n, 0, t.w);
    const b = h >>> t.shift;
    t.bits[b >>> 5]! |= 1 << (b & 31);
    const list = t.byHash.get(h);
    if (list) list.push(idx);
    else t.byHash.set(h, [idx]);
  });
  const prefixOf = new Int32Array(needles.length).fill(-1);
  for (const t of tiers) {
    for (const list of t.byHash.values()) {
      if (list.length === 1) continue;
      list.sort((a, b) => u.order(needles[a]!, needles[b]!) || a - b);
      // In that order a needle's prefixes come before it, and every needle between a prefix and it begins with the
      // prefix: the stack holds the chain of prefixes of the needle before.
      const stack: number[] = [];
      for (const idx of list) {
        while (stack.length > 0 && !u.begins(needles[idx]!, needles[stack[stack.length - 1]!]!)) stack.pop();
        if (stack.length > 0) prefixOf[idx] = stack[stack.length - 1]!;
        stack.push(idx);
      }
    }
  }
  return { tiers: tiers.filter((t) => t.byHash.size > 0), prefixOf };
}

// The two scans are the same loop over bytes and over UTF-16 units, written out twice: through a shared accessor
// the byte scan ran five times slower. So are the two lookups of a position's needles below.

function scanBytes(hay: Uint8Array, pass: Pass, hit: (i: number, list: number[]) => boolean): boolean {
  const { base, up, upKeys } = pass;
  const { w, top, shift, bits, byHash } = base;
  const len = hay.length;
  if (len < w) return false;
  let h = 0;
  for (let k = 0; k < w; k++) h = (Math.imul(h, MUL) + hay[k]!) | 0;
  for (let i = 0; ; i++) {
    const b = h >>> shift;
    if ((bits[b >>> 5]! & (1 << (b & 31))) !== 0) {
      const list = byHash.get(h);
      if (list && hit(i, list)) return true;
      if (up && upKeys!.has(h) && i + up.w <= len) {
        let g = 0;
        for (let k = 0; k < up.w; k++) g = (Math.imul(g, MUL) + hay[i + k]!) | 0;
        const c = g >>> up.shift;
        if ((up.bits[c >>> 5]! & (1 << (c & 31))) !== 0) {
          const wide = up.byHash.get(g);
          if (wide && hit(i, wide)) return true;
        }
      }
    }
    if (i + w >= len) return false;
    h = (Math.imul(h - Math.imul(hay[i]!, top), MUL) + hay[i + w]!) | 0;
  }
}

function scanChars(hay: string, pass: Pass, hit: (i: number, list: number[]) => boolean): boolean {
  const { base, up, upKeys } = pass;
  const { w, top, shift, bits, byHash } = base;
  const len = hay.length;
  if (len < w) return false;
  let h = 0;
  for (let k = 0; k < w; k++) h = (Math.imul(h, MUL) + hay.charCodeAt(k)) | 0;
  for (let i = 0; ; i++) {
    const b = h >>> shift;
    if ((bits[b >>> 5]! & (1 << (b & 31))) !== 0) {
      const list = byHash.get(h);
      if (list && hit(i, list)) return true;
      if (up && upKeys!.has(h) && i + up.w <= len) {
        let g = 0;
        for (let k = 0; k < up.w; k++) g = (Math.imul(g, MUL) + hay.charCodeAt(i + k)) | 0;
        const c = g >>> up.shift;
        if ((up.bits[c >>> 5]! & (1 << (c & 31))) !== 0) {
          const wide = up.byHash.get(g);
          if (wide && hit(i, wide)) return true;
        }
      }
    }
    if (i + w >= len) return false;
    h = (Math.imul(h - Math.imul(hay.charCodeAt(i), top), MUL) + hay.charCodeAt(i + w)) | 0;
  }
}

/**
 * The longest needle of `list` (sorted) at `hay[i..]`, or -1; the others there are its chain of `prefixOf`. A binary
 * search finds the greatest needle not after the text there; a needle at i lies between itself and the text, so
 * it is that one or one of its prefixes.
 */
function longestAtBytes(hay: Uint8Array, i: number, list: readonly number[], needles: readonly Uint8Array[], prefixOf: Int32Array): number {
  let lo = 0;
  let hi = list.length - 1;
  let k = -1;
  let exact = false;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    // The text there against the needle: 0 when the needle is at i, below 0 when the text there sorts before it.
    const c = compareBytesAt(hay, i, needles[list[mid]!]!);
    if (c >= 0) {
      k = list[mid]!;
      exact = c === 0;
      lo = mid + 1;
    } else hi = mid - 1;
  }
  if (k < 0 || exact) return k;
  for (k = prefixOf[k]!; k >= 0; k = prefixOf[k]!) if (compareBytesAt(hay, i, needles[k]!) === 0) return k;
  return -1;
}

let comparisons = 0;
/** How many times the byte searches have compared a position with a needle, since the process started (tests). */
export const bytesComparisons = (): number => comparisons;

/**
 * The bytes at i against the needle, as Buffer.compare orders them (0: the needle is at i), compared in place: the
 * needles are short and most differ within a few bytes, where Buffer.compare's call and argument checks cost more.
 */
function compareBytesAt(hay: Uint8Array, i: number, n: Uint8Array): number {
  comparisons++;
  const m = Math.min(n.length, hay.length - i);
  for (let k = 0; k < m; k++) {
    const d = hay[i + k]! - n[k]!;
    if (d !== 0) return d;
  }
  return m === n.length ? 0 : -1;
}

/** The text at i against the needle, as Buffer.compare orders them (0: the needle is at i). */
function compareAt(hay: string, i: number, n: string): number {
  const m = Math.min(n.length, hay.length - i);
  for (let k = 0; k < m; k++) {
    const d = hay.charCodeAt(i + k) - n.charCodeAt(k);
    if (d !== 0) return d;
  }
  return m === n.length ? 0 : -1;
}

function longestAtChars(hay: string, i: number, list: readonly number[], needles: readonly string[], prefixOf: Int32Array): number {
  let lo = 0;
  let hi = list.length - 1;
  let k = -1;
  let exact = false;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    const c = compareAt(hay, i, needles[list[mid]!]!);
    if (c >= 0) {
      k = list[mid]!;
      exact = c === 0;
      lo = mid + 1;
    } else hi = mid - 1;
  }
  if (k < 0 || exact) return k;
  for (k = prefixOf[k]!; k >= 0; k = prefixOf[k]!) if (hay.startsWith(needles[k]!, i)) return k;
  return -1;
}

const bytes: Units<Buffer> = {
  length: (b) => b.length,
  at: (b, i) => b[i]!,
  order: (a, b) => Buffer.compare(a, b),
  begins: (long, short) => short.length <= long.length && long.compare(short, 0, short.length, 0, short.length) === 0,
};
const chars: Units<string> = {
  length: (s) => s.length,
  at: (s, i) => s.charCodeAt(i),
  order: (a, b) => (a < b ? -1 : a > b ? 1 : 0),
  begins: (long, short) => long.startsWith(short),
};

export function bytesFinder(needles: readonly Buffer[]): (hay: Buffer) => boolean {
  const usable = needles.filter((n) => n.length >= 4);
  if (usable.length <= FEW) return (hay) => usable.some((n) => hay.includes(n));
  const index = indexOf(usable, bytes);
  const { prefixOf } = index;
  const passes = passesOf(index, usable, bytes);
  const ns = usable.map((n) => new Uint8Array(n.buffer, n.byteOffset, n.length));
  return (hay) => {
    const view = new Uint8Array(hay.buffer, hay.byteOffset, hay.length);
    const hit = (i: number, list: number[]) => longestAtBytes(view, i, list, ns, prefixOf) >= 0;
    return passes.some((p) => scanBytes(view, p, hit));
  };
}

/**
 * Every needle `hay` holds, each once with its first offset (`skip`: needles already found elsewhere, not reported
 * again), in one pass whatever their number. Needles shorter than four bytes are never reported.
 */
export function bytesHits(needles: readonly Buffer[]): (hay: Buffer, skip: ReadonlySet<number>) => { needle: number; at: number }[] {
  const usable = needles.map((n, idx) => ({ n, idx })).filter((x) => x.n.length >= 4);
  if (usable.length <= FEW) {
    return (hay, skip) => usable.filter((x) => !skip.has(x.idx)).map((x) => ({ needle: x.idx, at: hay.indexOf(x.n) })).filter((h) => h.at >= 0);
  }
  const index = indexOf(usable.map((x) => x.n), bytes);
  const { prefixOf } = index;
  const passes = passesOf(index, usable.map((x) => x.n), bytes);
  const ns = usable.map((x) => new Uint8Array(x.n.buffer, x.n.byteOffset, x.n.length));
  return (hay, skip) => {
    const out = new Map<number, number>();
    const view = new Uint8Array(hay.buffer, hay.byteOffset, hay.length);
    const hit = (i: number, list: number[]) => {
      // The longest needle here, then its prefixes: all of them are here.
      for (let k = longestAtBytes(view, i, list, ns, prefixOf); k >= 0; k = prefixOf[k]!) {
        const { idx } = usable[k]!;
        if (!skip.has(idx) && !out.has(idx)) out.set(idx, i);
      }
      return false; // every needle, not the first
    };
    for (const p of passes) scanBytes(view, p, hit);
    return [...out].map(([needle, at]) => ({ needle, at }));
  };
}

export function textFinder(needles: readonly string[]): (hay: string) => boolean {
  const usable = needles.filter((n) => n.length >= 4);
  if (usable.length <= FEW) return (hay) => usable.some((n) => hay.includes(n));
  const index = indexOf(usable, chars);
  const { prefixOf } = index;
  const passes = passesOf(index, usable, chars);
  return (hay) => {
    const hit = (i: number, list: number[]) => longestAtChars(hay, i, list, usable, prefixOf) >= 0;
    return passes.some((p) => scanChars(hay, p, hit));
  };
}

/** SQLite's lower() folds ASCII only; match it so a dry run counts what the real run deletes. */
export function asciiLower(s: string): string {
  return s.replace(/[A-Z]/g, (c) => c.toLowerCase());
}
