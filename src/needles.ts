/**
 * Does a text hold any of many needles? Erase looks for every erased text at once (in snapshot files, in point
 * payloads), and an erase can take a chain of 100,000 versions: searching for each needle in turn costs
 * needles × text, hours at that size. Past a few needles they are looked up by their first four units instead,
 * one pass over the text whatever their number. Needles shorter than four units are never searched for.
 */

/** Below this many needles, the native search of each in turn is faster. */
const FEW = 16;

export function bytesFinder(needles: readonly Buffer[]): (hay: Buffer) => boolean {
  const usable = needles.filter((n) => n.length >= 4);
  if (usable.length <= FEW) return (hay) => usable.some((n) => hay.includes(n));
  const byHead = new Map<number, Buffer[]>();
  for (const n of usable) {
    const k = n.readUInt32LE(0);
    const list = byHead.get(k);
    if (list) list.push(n);
    else byHead.set(k, [n]);
  }
  return (hay) => {
    for (let i = 0; i + 4 <= hay.length; i++) {
      const list = byHead.get(hay.readUInt32LE(i));
      if (list?.some((n) => i + n.length <= hay.length && hay.compare(n, 0, n.length, i, i + n.length) === 0)) return true;
    }
    return false;
  };
}

export function textFinder(needles: readonly string[]): (hay: string) => boolean {
  const usable = needles.filter((n) => n.length >= 4);
  if (usable.length <= FEW) return (hay) => usable.some((n) => hay.includes(n));
  const byHead = new Map<string, string[]>();
  for (const n of usable) {
    const k = n.slice(0, 4);
    const list = byHead.get(k);
    if (list) list.push(n);
    else byHead.set(k, [n]);
  }
  return (hay) => {
    for (let i = 0; i + 4 <= hay.length; i++) {
      const list = byHead.get(hay.slice(i, i + 4));
      if (list?.some((n) => hay.startsWith(n, i))) return true;
    }
    return false;
  };
}

/** SQLite's lower() folds ASCII only; match it so a dry run counts what the real run deletes. */
export function asciiLower(s: string): string {
  return s.replace(/[A-Z]/g, (c) => c.toLowerCase());
}
