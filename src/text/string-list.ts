import { deflateRawSync, inflateRawSync } from 'node:zlib';

/**
 * Many strings held as bytes, not as JavaScript strings: what erase keeps of every memory it takes (ids, texts) until
 * it has looked for their copies. As an array of strings each one cost its header, its slot, a share of the garbage
 * the heap grows by around them and, with a Set or Map beside it, an entry: about a kilobyte per erased memory over
 * the whole erase (240 MB at 123,000 memories). Here a string costs its bytes and twelve more: an ASCII string one
 * byte a character (latin1), any other two (UTF-16 code units as they are, so a lone surrogate comes back unchanged),
 * in chunks (up to 1 MiB) that are never copied. A string is made again when it is read (`at`, iteration, `slice`): read
 * them a chunk at a time (`chunks`) and nothing but that chunk is held as strings.
 */

/** The read side erase's consumers use; a plain array of strings is one too. */
export interface Strings extends Iterable<string> {
  readonly length: number;
  slice(start?: number, end?: number): string[];
}

const CHUNK = 1 << 20;
const FIRST_CHUNK = 1 << 12;
/** The top bit of an entry's length: its bytes are UTF-16LE (else latin1, every character below 0x80). */
const WIDE = 0x80000000;

/** A full chunk of a packed list is kept deflated only if that saves at least this share of it. */
const PACK_GAIN = 0.9;

export class StringList implements Strings {
  private chunks: Buffer[] = [];
  /** A packed list's chunks, once full, are kept deflated (level 1): the length each had before, 0 for one kept as is. */
  private readonly rawLength: number[] = [];
  /** The last deflated chunk read, inflated: a pass in order inflates each chunk once. */
  private inflated: { chunk: number; bytes: Buffer } | undefined;
  /** Bytes used in the last chunk. */
  private used = 0;
  private chunkOf = new Uint32Array(64);
  private startOf = new Uint32Array(64);
  private lengthOf = new Uint32Array(64);
  private count = 0;
  /** Open addressing over the entries by a hash of their bytes (built by the first `has`, kept up by `push`). */
  private table: Int32Array | undefined;

  /**
   * `packed`: each chunk, once full, deflated (the texts an erase holds: read in order, a chunk at a time, a few
   * times over; words repeat). Its strings are read as fast in order; a lookup out of order (`has`, `at`) may inflate
   * a chunk for each.
   */
  constructor(private readonly opts: { packed?: boolean } = {}) {}

  static from(strings: Iterable<string>): StringList {
    const list = new StringList();
    for (const s of strings) list.push(s);
    return list;
  }

  get length(): number {
    return this.count;
  }

  push(s: string): void {
    const ascii = Buffer.byteLength(s, 'utf8') === s.length; // every character below 0x80
    const bytes = ascii ? s.length : s.length * 2;
    if (this.chunks.length === 0 || this.used + bytes > this.chunks[this.chunks.length - 1]!.length) {
      // Chunks start small (a list of a few ids takes a few KiB) and double up to CHUNK.
      const size = this.chunks.length >= 8 ? CHUNK : Math.min(CHUNK, FIRST_CHUNK << this.chunks.length);
      if (this.opts.packed && this.chunks.length > 0) this.pack(this.chunks.length - 1);
      this.chunks.push(Buffer.allocUnsafe(Math.max(size, bytes)));
      this.rawLength.push(0);
      this.used = 0;
    }
    const chunk = this.chunks[this.chunks.length - 1]!;
    chunk.write(s, this.used, ascii ? 'latin1' : 'utf16le');
    if (this.count === this.chunkOf.length) this.grow();
    this.chunkOf[this.count] = this.chunks.length - 1;
    this.startOf[this.count] = this.used;
    this.lengthOf[this.count] = ascii ? bytes : (bytes | WIDE) >>> 0;
    this.count += 1;
    this.used += bytes;
    // The index takes the new entry while it is at most half full; past that it is made again, twice the size, by
    // the next `has`.
    if (this.table && this.count * 2 <= this.table.length) this.insert(this.table, this.count - 1);
    else this.table = undefined;
  }

  at(i: number): string {
    const [chunk, start, end, wide] = this.span(i);
    return chunk.toString(wide ? 'utf16le' : 'latin1', start, end);
  }

  slice(start = 0, end = this.count): string[] {
    const out: string[] = [];
    for (let i = Math.max(0, start); i < Math.min(end, this.count); i++) out.push(this.at(i));
    return out;
  }

  *[Symbol.iterator](): Iterator<string> {
    for (let i = 0; i < this.count; i++) yield this.at(i);
  }

  /** Whether the list holds this string (exact, by its bytes): an index of four bytes a slot, two slots an entry. */
  has(s: string): boolean {
    if (this.count === 0) return false;
    const table = (this.table ??= this.index());
    const wide = Buffer.byteLength(s, 'utf8') !== s.length;
    const mask = table.length - 1;
    for (let slot = hashString(s, wide) & mask; ; slot = (slot + 1) & mask) {
      const i = table[slot]!;
      if (i < 0) return false;
      if (this.equals(i, s, wide)) return true;
    }
  }

  private span(i: number): [Buffer, number, number, boolean] {
    if (i < 0 || i >= this.count) throw new RangeError(`StringList: no entry ${i} of ${this.count}`);
    const len = this.lengthOf[i]!;
    const start = this.startOf[i]!;
    return [this.chunkBytes(this.chunkOf[i]!), start, start + (len & ~WIDE), (len & WIDE) !== 0];
  }

  private pack(c: number): void {
    const raw = this.chunks[c]!.subarray(0, this.used);
    const packed = deflateRawSync(raw, { level: 1 });
    if (packed.length > raw.length * PACK_GAIN) return;
    this.chunks[c] = packed;
    this.rawLength[c] = raw.length;
  }

  private chunkBytes(c: number): Buffer {
    if (this.rawLength[c] === 0) return this.chunks[c]!;
    if (this.inflated?.chunk !== c) this.inflated = { chunk: c, bytes: inflateRawSync(this.chunks[c]!) };
    return this.inflated.bytes;
  }

  /** Entry i against a string, unit by unit as it is stored (no copy of either). */
  private equals(i: number, s: string, wide: boolean): boolean {
    const [chunk, start, end, isWide] = this.span(i);
    if (isWide !== wide || end - start !== (wide ? s.length * 2 : s.length)) return false;
    if (!wide) {
      for (let k = 0; k < s.length; k++) if (chunk[start + k] !== s.charCodeAt(k)) return false;
      return true;
    }
    for (let k = 0; k < s.length; k++) if ((chunk[start + 2 * k]! | (chunk[start + 2 * k + 1]! << 8)) !== s.charCodeAt(k)) return false;
    return true;
  }

  private index(): Int32Array {
    let size = 16;
    while (size < this.count * 2) size *= 2;
    const table = new Int32Array(size).fill(-1);
    for (let i = 0; i < this.count; i++) this.insert(table, i);
    return table;
  }

  private insert(table: Int32Array, i: number): void {
    const mask = table.length - 1;
    const [chunk, start, end, wide] = this.span(i);
    let slot = hashBytes(chunk, start, end, wide) & mask;
    while (table[slot]! >= 0) slot = (slot + 1) & mask;
    table[slot] = i;
  }

  private grow(): void {
    const size = this.chunkOf.length * 2;
    const more = (a: Uint32Array) => {
      const b = new Uint32Array(size);
      b.set(a);
      return b;
    };
    this.chunkOf = more(this.chunkOf);
    this.startOf = more(this.startOf);
    this.lengthOf = more(this.lengthOf);
  }
}

/** FNV-1a over the stored bytes, the encoding mixed in (hashString gives the same of the string). */
function hashBytes(b: Buffer, start: number, end: number, wide: boolean): number {
  let h = wide ? 0x811c9dc5 ^ 0xff : 0x811c9dc5;
  for (let i = start; i < end; i++) h = Math.imul(h ^ b[i]!, 0x01000193);
  return h >>> 0;
}

function hashString(s: string, wide: boolean): number {
  let h = wide ? 0x811c9dc5 ^ 0xff : 0x811c9dc5;
  for (let k = 0; k < s.length; k++) {
    const c = s.charCodeAt(k);
    if (!wide) h = Math.imul(h ^ c, 0x01000193);
    else h = Math.imul(Math.imul(h ^ (c & 0xff), 0x01000193) ^ (c >>> 8), 0x01000193);
  }
  return h >>> 0;
}

/** Whether `strings` holds a string: a StringList by its own index, a plain array (a few ids) through a Set. */
export function memberOf(strings: Strings): (s: string) => boolean {
  if (strings instanceof StringList) return (s) => strings.has(s);
  const set = new Set(strings);
  return (s) => set.has(s);
}

/** `strings` `size` at a time, each chunk made as strings only when it is reached. */
export function* chunksOf(strings: Strings, size: number): Generator<string[]> {
  for (let i = 0; i < strings.length; i += size) yield strings.slice(i, i + size);
}
