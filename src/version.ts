import { existsSync, readFileSync } from 'node:fs';

/** This build's version, from package.json: two levels up from dist/src/, one from src/ (tests run the source). */
function readVersion(): string {
  for (const rel of ['../../package.json', '../package.json']) {
    const url = new URL(rel, import.meta.url);
    if (existsSync(url)) {
      const pkg = JSON.parse(readFileSync(url, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'memory-warden' && pkg.version) return pkg.version;
    }
  }
  return 'unknown';
}

export const VERSION = readVersion();
