/**
 * Does a text hold any of many needles? Erase looks for every erased text at once (in snapshot files, in point
 * payloads, in the state db), and an erase can take a chain of 100,000 versions: searching for each needle in turn
 * costs needles × text, hours at that size. Past a few needles they are found in one pass over the text, whatever
 * their number: each needle is keyed by a hash of its first `w` units (w = 4, 8 or 32, the largest its length
 * allows), and a rolling hash of the text's window of each width is looked up at every position (a bit set first,
 * so most positions cost a few multiplications). Keys that long keep the candidates few even when the texts share
 * their beginning ("User prefers …"; 10,000 such texts once made the search check 10,000 needles at every one of
 * them: 16 s per MB of a snapshot that did not hold them). Needles shorter than four units are never searched for.
 */

/** Below this many needles, the native search of each in turn is faster. */
const FEW = 16;
const WIDTHS = [32, 8, 4] as const;
const MUL = 0x01000193;

interface Units<H> {
  length: (hay: H) => number;
  at: (hay: H, i: number) => number;
}

interface Tier {
  w: number;
  /** The bit set has 2^bits bits, about 64 per needle: a text's window passes it by chance 1 time in 64 or less. */
  shift: number;
  /** MUL^(w-1), to take the unit leaving the window out of the hash. */
  top: number;
  bits: Uint32Array;
  byHash: Map<number, number[]>;
}

function hashAt<H>(u: Units<H>, s: H, from: number, w: number): number {
  let h = 0;
  for (let k = 0; k < w; k++) h = (Math.imul(h, MUL) + u.at(s, from + k)) | 0;
  return h;
}

/** The tiers of `needles` (each keyed by the hash of its first w units), and those in use. */
function tiersOf<H>(needles: readonly H[], u: Units<H>): Tier[] {
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
  return tiers.filter((t) => t.byHash.size > 0);
}

// The two scans are the same loop over bytes and over UTF-16 units, written out twice: through a shared accessor
// the byte scan ran five times slower.

function scanBytes(hay: Uint8Array, t: Tier, hit: (i: number, idx: number[]) => boolean): boolean {
  const { w, top, shift, bits, byHash } = t;
  const len = hay.length;
  if (len < w) return false;
  let h = 0;
  for (let k = 0; k < w; k++) h = (Math.imul(h, MUL) + hay[k]!) | 0;
  for (let i = 0; ; i++) {
    const b = h >>> shift;
    if ((bits[b >>> 5]! & (1 << (b & 31))) !== 0) {
      const list = byHash.get(h);
      if (list && hit(i, list)) return true;
    }
    if (i + w >= len) return false;
    h = (Math.imul(h - Math.imul(hay[i]!, top), MUL) + hay[i + w]!) | 0;
  }
}

function scanChars(hay: string, t: Tier, hit: (i: number, idx: number[]) => boolean): boolean {
  const { w, top, shift, bits, byHash } = t;
  const len = hay.length;
  if (len < w) return false;
  let h = 0;
  for (let k = 0; k < w; k++) h = (Math.imul(h, MUL) + hay.charCodeAt(k)) | 0;
  for (let i = 0; ; i++) {
    const b = h >>> shift;
    if ((bits[b >>> 5]! & (1 << (b & 31))) !== 0) {
      const list = byHash.get(h);
      if (list && hit(i, list)) return true;
    }
    if (i + w >= len) return false;
    h = (Math.imul(h - Math.imul(hay.charCodeAt(i), top), MUL) + hay.charCodeAt(i + w)) | 0;
  }
}

const bytes: Units<Buffer> = { length: (b) => b.length, at: (b, i) => b[i]! };
const chars: Units<string> = { length: (s) => s.length, at: (s, i) => s.charCodeAt(i) };

export function bytesFinder(needles: readonly Buffer[]): (hay: Buffer) => boolean {
  const usable = needles.filter((n) => n.length >= 4);
  if (usable.length <= FEW) return (hay) => usable.some((n) => hay.includes(n));
  const tiers = tiersOf(usable, bytes);
  return (hay) => {
    const hit = (i: number, list: number[]) => list.some((idx) => { const n = usable[idx]!; return i + n.length <= hay.length && hay.compare(n, 0, n.length, i, i + n.length) === 0; });
    const view = new Uint8Array(hay.buffer, hay.byteOffset, hay.length);
    return tiers.some((t) => scanBytes(view, t, hit));
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
  const tiers = tiersOf(usable.map((x) => x.n), bytes);
  return (hay, skip) => {
    const out = new Map<number, number>();
    const hit = (i: number, list: number[]) => {
      for (const k of list) {
        const { n, idx } = usable[k]!;
        if (!skip.has(idx) && !out.has(idx) && i + n.length <= hay.length && hay.compare(n, 0, n.length, i, i + n.length) === 0) out.set(idx, i);
      }
      return false; // every needle, not the first
    };
    const view = new Uint8Array(hay.buffer, hay.byteOffset, hay.length);
    for (const t of tiers) scanBytes(view, t, hit);
    return [...out].map(([needle, at]) => ({ needle, at }));
  };
}

export function textFinder(needles: readonly string[]): (hay: string) => boolean {
  const usable = needles.filter((n) => n.length >= 4);
  if (usable.length <= FEW) return (hay) => usable.some((n) => hay.includes(n));
  const tiers = tiersOf(usable, chars);
  return (hay) => {
    const hit = (i: number, list: number[]) => list.some((idx) => hay.startsWith(usable[idx]!, i));
    return tiers.some((t) => scanChars(hay, t, hit));
  };
}

/** SQLite's lower() folds ASCII only; match it so a dry run counts what the real run deletes. */
export function asciiLower(s: string): string {
  return s.replace(/[A-Z]/g, (c) => c.toLowerCase());
}
