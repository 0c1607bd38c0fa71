import { readFileSync } from 'node:fs';
import { packageFile } from './places.js';

/** This build's version, from the package's package.json. */
function readVersion(): string {
  const file = packageFile('package.json');
  if (file === undefined) return 'unknown';
  const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; version?: string };
  return pkg.name === 'memory-warden' && pkg.version ? pkg.version : 'unknown';
}

export const VERSION = readVersion();
