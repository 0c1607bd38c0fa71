import { expect } from 'vitest';
import { spawnSync } from 'node:child_process';
import { createServer, type Server } from 'node:net';

/** Things at a path that are not regular files, for the tests that memory-warden refuses them at once. */

/**
 * Whether the root-only cases run (mknod, chown to another user need root): as root, and always in CI (`.ci/run`
 * runs as root; were it not, those cases fail there rather than go missing). A developer's non-root `npm test`
 * leaves them out: nothing else can make a device or another user's file.
 */
export const isRoot = process.getuid?.() === 0 || process.env.CI === 'true';

export function fifoAt(path: string): string {
  expect(spawnSync('mkfifo', ['-m', '644', path]).status).toBe(0);
  return path;
}

/** A null device (mknod c 1 3, mode 0666) at `path`: only as root (mknod needs it); never a system file. */
export function nullDeviceAt(path: string): string {
  expect(spawnSync('mknod', ['-m', '666', path, 'c', '1', '3']).status).toBe(0);
  return path;
}

const listening = new Set<Server>();

/** A listening unix socket at `path`, until closeSockets (call it after each test). */
export async function socketAt(path: string): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(path, resolve));
  listening.add(server);
  return path;
}

export async function closeSockets(): Promise<void> {
  await Promise.all([...listening].map((s) => new Promise((resolve) => s.close(resolve))));
  listening.clear();
}
