import { createReadStream, lstatSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { bytesFinder } from './needles.js';

/**
 * Erase's look into snapshots: which snapshot folders of a store still hold erased text. A plain byte search, so
 * it finds the text in SQLite copies (free pages included) and in payload JSON; a snapshot that compresses its
 * payloads is beyond it (README, Erase).
 *
 * Snapshot folders under `<root>/<store>/` with a file that holds one of the texts (UTF-8, or JSON-escaped as a
 * payload writes it). The first 64 bytes of a text are looked for, so a long text split across SQLite overflow
 * pages is still found. Symlinks are not followed.
 */
export async function snapshotsContaining(storeRoot: string, texts: string[], subject?: string): Promise<string[]> {
  const needles = needleBytes(texts);
  const folded = subject === undefined ? [] : needleBytes([subject]).map(foldBytes);
  if (needles.length === 0 && folded.length === 0) return [];
  const search = { exact: bytesFinder(needles), folded: folded.length > 0 ? bytesFinder(folded) : null, overlap: [...needles, ...folded].reduce((m, n) => Math.max(m, n.length), 0) - 1 };
  let entries: string[];
  try {
    entries = readdirSync(storeRoot).sort();
  } catch {
    return [];
  }
  const out: string[] = [];
  for (const name of entries) {
    const dir = join(storeRoot, name);
    if (!lstatSync(dir).isDirectory()) continue;
    for (const file of filesUnder(dir)) {
      if (await fileContains(file, search)) {
        out.push(dir);
        break;
      }
    }
  }
  return out;
}

function needleBytes(texts: string[]): Buffer[] {
  const out = new Map<string, Buffer>();
  for (const t of new Set(texts)) {
    for (const form of [t, JSON.stringify(t).slice(1, -1)]) {
      const b = Buffer.from(form, 'utf8').subarray(0, 64);
      if (b.length >= 4) out.set(b.toString('hex'), b);
    }
  }
  return [...out.values()];
}

/** ASCII lower case of raw bytes (UTF-8 multi-byte sequences never contain bytes below 0x80). */
function foldBytes(b: Buffer): Buffer {
  const out = Buffer.from(b);
  for (let i = 0; i < out.length; i++) if (out[i]! >= 0x41 && out[i]! <= 0x5a) out[i] = out[i]! + 0x20;
  return out;
}

function* filesUnder(dir: string): Generator<string> {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) yield* filesUnder(p);
    else if (e.isFile()) yield p;
  }
}

/** The needles, searched all at once (src/needles.ts), and how many bytes a match can span across two chunks. */
interface Search {
  exact: (hay: Buffer) => boolean;
  folded: ((hay: Buffer) => boolean) | null;
  overlap: number;
}

/** Streamed in 1 MiB chunks, each searched with the tail of the previous one so no match is split. */
async function fileContains(file: string, { exact, folded, overlap }: Search): Promise<boolean> {
  let tail = Buffer.alloc(0);
  for await (const chunk of createReadStream(file, { highWaterMark: 1 << 20 })) {
    const buf = Buffer.concat([tail, chunk as Buffer]);
    if (exact(buf)) return true;
    if (folded && folded(foldBytes(buf))) return true;
    tail = buf.subarray(Math.max(0, buf.length - overlap));
  }
  return false;
}

