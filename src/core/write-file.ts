import { createWriteStream } from 'node:fs';
import { once } from 'node:events';
import { pipeline } from 'node:stream/promises';

type Source = NodeJS.ReadableStream | AsyncIterable<Buffer | string>;
type Stage = NodeJS.ReadWriteStream;

/**
 * Stream `source` (through `stages`) into a new file at `path` (flags 'wx': never an existing one). Settles only
 * once nothing more happens to the file: when the source fails first, Node's pipeline rejects while the file's
 * open may still be under way, and the file then appears after the caller went on (a folder being removed
 * reappears non-empty, a download's leftover is made after it was cleaned up); this waits for the stream's close.
 */
export async function streamToNewFile(path: string, opts: { mode: number; flush?: boolean; highWaterMark?: number }, source: Source, ...stages: Stage[]): Promise<void> {
  const out = createWriteStream(path, { flags: 'wx', ...opts });
  try {
    await (pipeline as (...s: unknown[]) => Promise<void>)(source, ...stages, out);
  } catch (err) {
    if (!out.closed) await once(out, 'close').catch(() => {});
    throw err;
  }
}
