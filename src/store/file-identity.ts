import { statSync } from 'node:fs';
import { resolve } from 'node:path';

/**
 * Which file a path names now, as a string that compares equal only for the same file: device, inode and birth
 * time (where the filesystem keeps one: an inode number freed by a deleted file and given to a new one is another
 * file). Not the path: the same relative path from another working directory is another file, and a file renamed
 * over the path (a restore) is another file too; a second path to the same file (a link) is the same file.
 * Undefined when the path names nothing that can be read. (Where the system gives the change time as the birth
 * time, without statx, the identity changes with every write: the digest then checks afresh, slower, never wrong.)
 */
export function fileIdentity(path: string): string | undefined {
  try {
    const st = statSync(path, { bigint: true });
    return `${st.dev}:${st.ino}:${st.birthtimeNs}`;
  } catch {
    return undefined;
  }
}

/** Whether two paths name the same file: the same path once resolved, or the same file through a link. */
export function sameFile(a: string, b: string): boolean {
  if (resolve(a) === resolve(b)) return true;
  const identity = fileIdentity(a);
  return identity !== undefined && fileIdentity(b) === identity;
}
