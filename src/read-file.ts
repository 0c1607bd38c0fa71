import { closeSync, constants, fstatSync, openSync, readFileSync } from 'node:fs';
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

/** `read()`, its failure a config error naming `what` (a key or identity file a snapshot target names). */
export function readKey(read: () => string, what: string): string {
  try {
    return read();
  } catch (err) {
    throw configError(`${what}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}
