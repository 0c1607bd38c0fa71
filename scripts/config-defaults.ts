import { chmodSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { DEFAULT_CONFIG_PATH, DEFAULTS_CACHE_PATH, defaultsCacheText } from '../src/config/config.js';

/**
 * `npm run build` parses config/default.yaml once into dist/src/default-config.json, so that a command given no
 * config file starts without the YAML parser (src/config/config.ts readDefaults). Values JSON cannot carry exactly
 * (.inf, .nan) leave no cache: the CLI then parses the YAML as before.
 */
const text = defaultsCacheText(readFileSync(DEFAULT_CONFIG_PATH, 'utf8'));
if (text === undefined) {
  rmSync(DEFAULTS_CACHE_PATH, { force: true });
  process.stdout.write(`${DEFAULT_CONFIG_PATH}: values JSON cannot carry exactly; no defaults cache\n`);
} else {
  writeFileSync(DEFAULTS_CACHE_PATH, text);
  process.stdout.write(`wrote ${DEFAULTS_CACHE_PATH}\n`);
}

// The package's command (package.json "bin"): tsc writes it without the execute bit, and `npx memory-warden` in a
// clone runs it as a file.
chmodSync(new URL('../src/cli.js', import.meta.url), 0o755);
