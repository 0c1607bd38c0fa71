import { basename, extname } from 'node:path';
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

/** `KEY=value` lines: `export` allowed, `#` comments, single quotes literal, double quotes with \n escapes. */
export function parseDotenv(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const m = /^(?:export\s+)?([A-Za-z_][A-Za-z0-9_.-]*)\s*=\s*(.*)$/.exec(line);
    if (!m) continue;
    let value = m[2]!;
    if (value.startsWith("'")) {
      const end = value.indexOf("'", 1);
      value = end > 0 ? value.slice(1, end) : value.slice(1);
    } else if (value.startsWith('"')) {
      const end = value.search(/(?<!\\)"/u) === 0 ? value.slice(1).search(/(?<!\\)"/) + 1 : -1;
      value = (end > 0 ? value.slice(1, end) : value.slice(1)).replace(/\\n/g, '\n').replace(/\\(["\\])/g, '$1');
    } else {
      value = value.replace(/\s+#.*$/, '').trim();
    }
    out[m[1]!] = value;
  }
  return out;
}
