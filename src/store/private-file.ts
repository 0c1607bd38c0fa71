import { statSync, type Stats } from 'node:fs';

/** What a path is, in the words of an error that says it is not a file. */
export function kindOf(st: Stats): string {
  if (st.isFile()) return 'a regular file';
  if (st.isDirectory()) return 'a directory';
  if (st.isSymbolicLink()) return 'a symbolic link';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isSocket()) return 'a socket';
  return 'not a file';
}

/**
 * What is at `path` (`a FIFO`, `a character device`) when it is there and not a regular file; undefined for a regular
 * file, or nothing (yet), or what cannot be looked at (the open then says why). memory-warden's own SQLite files
 * (the state db) are regular files or not there yet: an empty device (/dev/null, /dev/zero) reads as a new
 * database, so it passed every content check and was then made 0600 as ours; a FIFO would hold the open; a socket
 * or a folder SQLite refuses with a message that names no cause.
 */
export function notRegularFile(path: string): string | undefined {
  let st: Stats;
  try {
    st = statSync(path);
  } catch {
    return undefined;
  }
  return st.isFile() ? undefined : kindOf(st);
}
