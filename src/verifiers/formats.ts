import { basename, extname } from 'node:path';
import dotenv from 'dotenv';
import YAML from 'yaml';
import { parseToml } from './toml.js';

/** The formats the file and git verifiers understand; `text` is the content as it is. */
export const FORMATS = ['json', 'yaml', 'toml', 'env', 'text'] as const;
export type Format = (typeof FORMATS)[number];

/** From the file name: `.json`, `.yaml`/`.yml`, `.toml`, `.env`/`*.env`/`.env.*`; anything else is text. */
export function formatOf(path: string): Format {
  const name = basename(path).toLowerCase();
  const ext = extname(name);
  if (ext === '.json') return 'json';
  if (ext === '.yaml' || ext === '.yml') return 'yaml';
  if (ext === '.toml') return 'toml';
  if (name === '.env' || name.startsWith('.env.') || ext === '.env') return 'env';
  return 'text';
}

export function parseContent(text: string, format: Format): unknown {
  switch (format) {
    case 'json':
      return JSON.parse(text);
    case 'yaml':
      return YAML.parse(text, { maxAliasCount: 100, logLevel: 'error' }); // its warnings (an unknown tag) would print as Node warnings, several lines
    case 'toml':
      return parseToml(text);
    case 'env':
      return parseDotenv(text);
    case 'text':
      return text;
  }
}

/**
 * A .env file as dotenv reads it (dotenv's own parser): `export` allowed, `#` comments, single quotes literal, double
 * quotes with `\n` escapes, quoted values over several lines.
 */
export function parseDotenv(text: string): Record<string, string> {
  return dotenv.parse(text);
}
