import { closeSync, existsSync, openSync, readSync } from 'node:fs';
import { storeError } from '../../core/errors.js';
import { immediate, type LibDb } from './files.js';

// Erase's last steps on a Mastra file, in place of the VACUUM libsql cannot do safely (docs/mastra-layout.md): every
// page's unused space zeroed through SQLite's own pager, the WAL truncated, the bytes read back.
//
// secure_delete zeroes only what is deleted while it is on. Rows Mastra deleted or updated before (it never turns it
// on), and cells SQLite moved when it rebalanced a b-tree, leave their bytes in the free space of live pages (the gap
// between the cell pointers and the cells, freeblocks, fragments), in overflow pages' tails and in free pages: there
// a message, its ids and its resource id stay readable in the file. The scrub reads every page through the
// `sqlite_dbpage` table (pages as the pager sees them, WAL frames included), finds what each page uses from the
// file format alone, and writes the page back with every other byte zeroed, in one write transaction that checks the
// file (quick_check) before it commits. Nothing live changes: each cell, pointer and header stays where it was.

/** What the scrub did to one file. */
export interface Scrubbed {
  /** Pages of the file. */
  pages: number;
  /** Pages that held bytes outside what they use, written back zeroed there. */
  zeroed: number;
  /**
   * Pages left as they were: neither in a b-tree (nor its overflow chains) nor free, or whose layout does not add up
   * (a damaged page). Unknown: they may hold anything.
   */
  unplaced: number;
}

const u16 = (d: Uint8Array, at: number) => (d[at]! << 8) | d[at + 1]!;
const u32 = (d: Uint8Array, at: number) => ((d[at]! << 24) >>> 0) + (d[at + 1]! << 16) + (d[at + 2]! << 8) + d[at + 3]!;

/** A varint's value and length (SQLite's: big-endian 7 bits a byte, the ninth byte whole); null past `end`. */
function varint(d: Uint8Array, at: number, end: number): [number, number] | null {
  let v = 0;
  for (let i = 0; i < 8; i++) {
    if (at + i >= end) return null;
    const b = d[at + i]!;
    v = v * 128 + (b & 0x7f);
    if ((b & 0x80) === 0) return [v, i + 1];
  }
  return at + 8 < end ? [v * 256 + d[at + 8]!, 9] : null;
}

interface Geometry {
  usable: number;
  /** The largest payload kept whole on an index page (btree.c maxLocal); a table leaf's is usable - 35. */
  maxIndex: number;
  minLocal: number;
}

interface Overflow {
  first: number;
  /** Payload bytes in the chain. */
  bytes: number;
}

/** Where a cell ends, and its overflow chain (btree.c's cell parsers, by page type). */
function cellAt(d: Uint8Array, at: number, type: number, g: Geometry): { end: number; overflow?: Overflow } | null {
  let p = at;
  if (type === 5) {
    const rowid = varint(d, p + 4, g.usable);
    return rowid && { end: p + 4 + rowid[1] };
  }
  if (type === 2) p += 4;
  const size = varint(d, p, g.usable);
  if (!size) return null;
  const [payload, n] = size;
  p += n;
  if (type === 13) {
    const rowid = varint(d, p, g.usable);
    if (!rowid) return null;
    p += rowid[1];
  }
  const maxLocal = type === 13 ? g.usable - 35 : g.maxIndex;
  if (payload <= maxLocal) return { end: Math.max(p + payload, at + 4) };
  const surplus = g.minLocal + ((payload - g.minLocal) % (g.usable - 4));
  const local = surplus <= maxLocal ? surplus : g.minLocal;
  const next = p + local;
  if (next + 4 > g.usable) return null;
  return { end: next + 4, overflow: { first: u32(d, next), bytes: payload - local } };
}

/**
 * The byte ranges of a b-tree page that hold nothing it uses: the gap between the cell pointers and the cell content,
 * each freeblock's body (its 4-byte link and size stay), and the fragments between cells. Null when the page does
 * not add up (cells overlap or leave the page, the freeblock chain runs wild, the fragment count disagrees): such a
 * page is not touched.
 */
export function unusedRanges(d: Uint8Array, hdr: number, g: Geometry): { ranges: [number, number][]; overflows: Overflow[] } | null {
  const type = d[hdr]!;
  if (type !== 2 && type !== 5 && type !== 10 && type !== 13) return null;
  const ptrStart = hdr + (type === 2 || type === 5 ? 12 : 8);
  const cells = u16(d, hdr + 3);
  const ptrEnd = ptrStart + 2 * cells;
  const content = u16(d, hdr + 5) || 65536;
  if (ptrEnd > content || content > g.usable) return null;
  const spans: [number, number, boolean][] = [];
  const overflows: Overflow[] = [];
  for (let i = 0; i < cells; i++) {
    const at = u16(d, ptrStart + 2 * i);
    if (at < content) return null;
    const c = cellAt(d, at, type, g);
    if (!c || c.end > g.usable) return null;
    spans.push([at, c.end, false]);
    if (c.overflow) overflows.push(c.overflow);
  }
  for (let fb = u16(d, hdr + 1), n = 0; fb !== 0; n++) {
    const size = u16(d, fb + 2);
    if (fb < content || size < 4 || fb + size > g.usable || n > g.usable / 4) return null;
    spans.push([fb, fb + size, true]);
    const next = u16(d, fb);
    if (next !== 0 && next < fb + size) return null;
    fb = next;
  }
  spans.sort((a, b) => a[0] - b[0]);
  const ranges: [number, number][] = [];
  if (content > ptrEnd) ranges.push([ptrEnd, content]);
  let at = content;
  let fragments = 0;
  for (const [start, end, free] of spans) {
    if (start < at) return null;
    if (start > at) {
      ranges.push([at, start]);
      fragments += start - at;
    }
    if (free && end > start + 4) ranges.push([start + 4, end]);
    at = end;
  }
  if (at < g.usable) {
    ranges.push([at, g.usable]);
    fragments += g.usable - at;
  }
  return fragments === d[hdr + 7] ? { ranges, overflows } : null;
}

const ZEROS = new Uint8Array(65536);
const isZero = (d: Uint8Array, start: number, end: number) => Buffer.compare(d.subarray(start, end), ZEROS.subarray(0, end - start)) === 0;

const pragmaNumber = (db: LibDb, name: string) => Number(Object.values((db.pragma(name) as Record<string, unknown>[])[0] ?? {})[0] ?? 0);

/**
 * Zero every byte of the file that no live row, index entry or structure uses (above), in one write transaction of
 * `db` (the store's connection, secure_delete on): the agent's writers wait, as for a VACUUM, and its readers keep
 * reading. quick_check runs before the commit; a file that fails it is left as it was and the erase fails.
 */
export function scrubPages(db: LibDb, path: string): Scrubbed {
  return immediate(db, () => {
    const pageSize = pragmaNumber(db, 'page_size');
    const pages = pragmaNumber(db, 'page_count');
    const read = db.prepare('SELECT data FROM sqlite_dbpage WHERE pgno = ?');
    const write = db.prepare('UPDATE sqlite_dbpage SET data = unhex(?) WHERE pgno = ?');
    const page = (pgno: number) => (read.get(pgno) as { data: Buffer } | undefined)?.data;
    const first = page(1);
    if (!first || first.length !== pageSize) throw storeError(`${path}: page 1 could not be read for the scrub`);
    const usable = pageSize - first[20]!;
    const g: Geometry = { usable, maxIndex: Math.floor(((usable - 12) * 64) / 255) - 23, minLocal: Math.floor(((usable - 12) * 32) / 255) - 23 };

    const role = new Map<number, 'btree' | 'overflow' | 'trunk' | 'free' | 'none'>();
    for (const r of db.prepare('SELECT pageno, pagetype FROM dbstat').iterate() as IterableIterator<{ pageno: number; pagetype: string }>) {
      role.set(Number(r.pageno), r.pagetype === 'overflow' ? 'overflow' : 'btree');
    }
    // The lock-byte page is never written; with auto_vacuum, pointer-map pages hold page numbers only.
    const lockPage = Math.floor(1073741824 / pageSize) + 1;
    if (lockPage <= pages) role.set(lockPage, 'none');
    if (u32(first, 52) !== 0) {
      for (let p = 2, per = Math.floor(usable / 5); p <= pages; p += per + 1) role.set(p === lockPage ? p + 1 : p, 'none');
    }
    for (let trunk = u32(first, 32), n = 0; trunk !== 0 && trunk <= pages && !role.has(trunk) && n < pages; n++) {
      role.set(trunk, 'trunk');
      const d = page(trunk);
      if (!d) break;
      const leaves = u32(d, 4);
      for (let i = 0; i < leaves && 8 + 4 * i + 4 <= usable; i++) {
        const leaf = u32(d, 8 + 4 * i);
        if (leaf <= pages && !role.has(leaf)) role.set(leaf, 'free');
      }
      trunk = u32(d, 0);
    }

    let zeroed = 0;
    let unplaced = 0;
    const clean = (pgno: number, d: Buffer, ranges: readonly [number, number][]) => {
      if (ranges.every(([s, e]) => isZero(d, s, e))) return;
      for (const [s, e] of ranges) d.fill(0, s, e);
      write.run(d.toString('hex'), pgno);
      zeroed++;
    };
    const tails: Overflow[] = [];
    for (let pgno = 1; pgno <= pages; pgno++) {
      const kind = role.get(pgno);
      if (kind === 'overflow' || kind === 'none') continue;
      const d = page(pgno);
      if (!d || kind === undefined) {
        unplaced++;
        continue;
      }
      if (kind === 'free') clean(pgno, d, [[0, usable]]);
      else if (kind === 'trunk') clean(pgno, d, [[Math.min(usable, 8 + 4 * u32(d, 4)), usable]]);
      else {
        const used = unusedRanges(d, pgno === 1 ? 100 : 0, g);
        if (!used) {
          unplaced++;
          continue;
        }
        clean(pgno, d, used.ranges);
        tails.push(...used.overflows);
      }
    }
    // An overflow chain's pages are full but its last: zeroed past the payload's end.
    for (const o of tails) {
      let pgno = o.first;
      let left = o.bytes;
      let d = role.get(pgno) === 'overflow' ? page(pgno) : undefined;
      while (d && left > usable - 4) {
        left -= usable - 4;
        pgno = u32(d, 0);
        d = role.get(pgno) === 'overflow' ? page(pgno) : undefined;
      }
      if (!d) unplaced++;
      else clean(pgno, d, [[4 + left, usable]]);
    }
    for (let pgno = 1; pgno <= pages; pgno++) if (!role.has(pgno)) unplaced++;
    const check = (db.pragma('quick_check(5)') as Record<string, unknown>[]).map((r) => String(Object.values(r)[0]));
    if (check.length !== 1 || check[0] !== 'ok') throw storeError(`${path}: quick_check after zeroing unused space: ${check.join('; ').replace(/\s+/g, ' ').slice(0, 300)}; nothing was changed`);
    return { pages, zeroed, unplaced };
  });
}

/** checkpoint(TRUNCATE): the deletes' pages into the file, the WAL (and every old frame in it) emptied. */
export function truncateWal(db: LibDb): boolean {
  const [r] = db.pragma('wal_checkpoint(TRUNCATE)') as { busy: number; log: number }[];
  return r !== undefined && r.busy === 0 && r.log <= 0;
}

const CHUNK = 16 * 1024 * 1024;

/**
 * Which of the needles (each one or more byte forms of one thing) any of the files, or its WAL, still holds: read in
 * chunks that overlap by the longest form, so a form across a chunk's end is found.
 */
export function needlesFound(paths: readonly string[], needles: readonly (readonly Buffer[])[]): Set<number> {
  const found = new Set<number>();
  const longest = Math.max(1, ...needles.flatMap((n) => n.map((f) => f.length)));
  for (const path of paths.flatMap((p) => [p, `${p}-wal`]).filter((p) => existsSync(p))) {
    const fd = openSync(path, 'r');
    try {
      const buf = Buffer.alloc(CHUNK + longest);
      let carry = 0;
      for (let pos = 0; ; ) {
        const n = readSync(fd, buf, carry, CHUNK, pos);
        const view = buf.subarray(0, carry + n);
        needles.forEach((forms, i) => {
          if (!found.has(i) && forms.some((f) => view.includes(f))) found.add(i);
        });
        if (n === 0 || found.size === needles.length) break;
        pos += n;
        carry = Math.min(longest - 1, view.length);
        view.copy(buf, 0, view.length - carry);
      }
    } finally {
      closeSync(fd);
    }
  }
  return found;
}
