import { existsSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Where this build's files are, found the same way from a module at any depth (src/config/read.ts under tests,
 * dist/src/config/read.js built) and from a bundle chunk in dist/src/ (scripts/bundle.ts): modules move between
 * folders and into chunks, so nothing counts `../` from its own location.
 */

/** The folder of this build's modules: src/ (tests run the source) or dist/src/ (built), the nearest one named src. */
export const SRC_ROOT = ((): string => {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8 && basename(dir) !== 'src'; i++) dir = dirname(dir);
  return dir;
})();

/** The package's own folder: the one holding package.json, config/ and dist/. */
export const PACKAGE_ROOT = basename(dirname(SRC_ROOT)) === 'dist' ? dirname(dirname(SRC_ROOT)) : dirname(SRC_ROOT);

/** The package's config/default.yaml. */
export const DEFAULT_CONFIG_FILE = join(PACKAGE_ROOT, 'config', 'default.yaml');

/** A file of the package, if it is there. */
export const packageFile = (...parts: string[]): string | undefined => {
  const path = join(PACKAGE_ROOT, ...parts);
  return existsSync(path) ? path : undefined;
};
