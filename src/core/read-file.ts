import { closeSync, constants, fstatSync, ftruncateSync, openSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { configError } from './errors.js';

/** A file above this is not a config, users or key file, nor a snapshot's manifest. */
export const SMALL_FILE_BYTES = 16 * 1024 * 1024;

/**
 * The text of a regular file a person named (a config file, a users file, a key file, a snapshot's manifest),
 * without being led into a device or a pipe: a FIFO would hold the process until someone writes to it, and
 * /dev/zero would fill its memory. Throws for anything else, or for a file above `maxBytes`, an error whose `code`
 * is the system's (ENOENT, EACCES, EISDIR) or says what the file is instead (not a regular file, too large): the
 * caller names the file and what it is for.
 */
export function readRegularFile(path: string, maxBytes = SMALL_FILE_BYTES): string {
  const fd = openRegularFile(path);
  try {
    if (fstatSync(fd).size > maxBytes) throw Object.assign(new Error(`${path} is larger than ${maxBytes} bytes`), { code: `larger than ${maxBytes} bytes` });
    return readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
}

/**
 * A descriptor on `path` when it is a regular file (the caller closes it); otherwise it throws, with the code
 * EISDIR for a directory and 'not a regular file' for a pipe, device or socket.
 */
export function openRegularFile(path: string): number {
  // O_NONBLOCK: opening a FIFO does not wait for a writer (the fstat below then refuses it).
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (st.isDirectory()) throw Object.assign(new Error(`${path} is a directory`), { code: 'EISDIR' });
    if (!st.isFile()) throw Object.assign(new Error(`${path} is not a regular file`), { code: 'not a regular file' });
    return fd;
  } catch (err) {
    closeSync(fd);
    throw err;
  }
}

/**
 * Writes `text` to `path`, a regular file or a new one, never into a pipe or a device: a FIFO nobody reads would
 * hold the process for ever, a device would swallow what the person meant to keep. Nothing is truncated before the
 * file is known to be a regular one. Throws as openRegularFile does.
 */
export function writeRegularFile(path: string, text: string): void {
  let fd: number;
  try {
    fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_NONBLOCK, 0o644);
  } catch (err) {
    // A FIFO that nobody reads refuses a non-blocking open for writing.
    if ((err as NodeJS.ErrnoException).code === 'ENXIO') throw Object.assign(new Error(`${path} is not a regular file`), { code: 'not a regular file' });
    throw err;
  }
  try {
    if (!fstatSync(fd).isFile()) throw Object.assign(new Error(`${path} is not a regular file`), { code: 'not a regular file' });
    ftruncateSync(fd, 0);
    writeFileSync(fd, text);
  } finally {
    closeSync(fd);
  }
}

/**
 * Why `path` cannot be written as a regular file, checked before any work whose result goes there (null when it
 * can): not a directory, pipe or device, and in a folder that exists.
 */
export function unwritableFile(path: string): string | null {
  try {
    const st = statSync(path);
    return st.isDirectory() ? 'is a directory' : st.isFile() ? null : 'is not a regular file';
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOTDIR') return 'its folder is not a directory';
    if (code !== 'ENOENT') return code ?? (err as Error).message;
    try {
      return statSync(dirname(path)).isDirectory() ? null : 'its folder is not a directory';
    } catch {
      return 'its folder does not exist';
    }
  }
}

/** `read()`, its failure a config error naming `what` (a key or identity file a snapshot target names). */
export function readKey(read: () => string, what: string): string {
  try {
    return read();
  } catch (err) {
    throw configError(`${what}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}
