import { parse, TomlDate, TomlError } from 'smol-toml';

/**
 * A TOML document as a verifier reads it, by smol-toml (TOML 1.0, validating: a key defined twice, a table
 * repeated, a value redefined is an error, as TOML says). Dates and times become ISO 8601 text, as smol-toml writes
 * them (`2026-11-29T06:00:00.000Z`, a local date `2026-11-29`), so that `expect` compares them as text. Errors name
 * the line.
 */
export function parseToml(text: string): Record<string, unknown> {
  try {
    return asText(parse(text)) as Record<string, unknown>;
  } catch (err) {
    if (err instanceof TomlError) {
      const what = err.message.replace(/^Invalid TOML document:\s*/, '').split('\n')[0];
      throw new Error(`TOML line ${err.line}: ${what}`);
    }
    throw err;
  }
}

function asText(value: unknown): unknown {
  if (value instanceof TomlDate) return value.toISOString();
  if (Array.isArray(value)) return value.map(asText);
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) Object.defineProperty(out, k, { value: asText(v), enumerable: true, writable: true, configurable: true });
    return out;
  }
  return value;
}
