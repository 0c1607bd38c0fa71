import { describe, expect, it } from 'vitest';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { configJsonSchema, configJsonSchemaText } from '../src/config-schema.js';
import { configReferenceText } from '../src/config-reference.js';
import { validateConfig } from '../src/config.js';

const file = (p: string) => fileURLToPath(new URL(`../${p}`, import.meta.url));
const SHIPPED = file('config/schema.json');

function validator() {
  const ajv = new (Ajv2020 as unknown as typeof Ajv2020.default)({ allErrors: true, strict: false });
  (addFormats as unknown as typeof addFormats.default)(ajv);
  return ajv.compile(JSON.parse(readFileSync(SHIPPED, 'utf8')) as object);
}

/** Every ```yaml block of the README and of docs/, with the file and the heading it sits under. */
function readmeYaml(): { where: string; text: string }[] {
  const out: { where: string; text: string }[] = [];
  const pages = ['README.md', ...readdirSync(file('docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
  for (const page of pages) {
    let heading = '';
    const lines = readFileSync(file(page), 'utf8').split('\n');
    for (let i = 0; i < lines.length; i++) {
      if (/^#{1,4} /.test(lines[i]!)) heading = lines[i]!;
      if (lines[i]!.trim() === '```yaml') {
        const start = i + 1;
        while (!lines[++i]!.startsWith('```'));
        out.push({ where: `${page} line ${start} (${heading})`, text: lines.slice(start, i).join('\n') });
      }
    }
  }
  return out;
}

describe('config JSON Schema', () => {
  it('the shipped config/schema.json is what the validation schema generates now', () => {
    expect(readFileSync(SHIPPED, 'utf8')).toBe(configJsonSchemaText());
  });

  it('the shipped docs/config-reference.md is what the validation schema generates now', () => {
    expect(readFileSync(file('docs/config-reference.md'), 'utf8')).toBe(configReferenceText());
  });

  it('config/default.yaml and every YAML example of the README and docs/ validate against it, and against zod', () => {
    const validate = validator();
    const docs = [{ where: 'config/default.yaml', text: readFileSync(file('config/default.yaml'), 'utf8') }, ...readmeYaml()];
    expect(docs.length).toBeGreaterThanOrEqual(4);
    for (const d of docs) {
      const value = YAML.parse(d.text) as unknown;
      expect(validate(value), `${d.where}: ${JSON.stringify(validate.errors)}`).toBe(true);
      expect(() => validateConfig(value), d.where).not.toThrow();
    }
  });

  it('rejects what validation rejects: unknown keys, wrong types, values outside an enum', () => {
    const validate = validator();
    const wrong = [
      { nope: 1 },
      { prune: { batchSize: 'many' } },
      { review: { auth: { mode: 'open' } } },
      { review: { tokenDays: -1 } },
      { review: { listen: { port: 70000 } } },
      { stores: { 'bad name!': { db: '/x.db' } } },
      { digest: { to: 'ops@example.org', extra: true } },
    ];
    for (const w of wrong) {
      expect(validate(w), JSON.stringify(w)).toBe(false);
      expect(() => validateConfig(w), JSON.stringify(w)).toThrow();
    }
  });

  it('points editors at it from the first line of the YAML files', () => {
    expect(readFileSync(file('config/default.yaml'), 'utf8').split('\n')[0]).toBe('# yaml-language-server: $schema=./schema.json');
    expect(configJsonSchema().type).toBe('object');
    const pkg = JSON.parse(readFileSync(file('package.json'), 'utf8')) as { files: string[] };
    expect(pkg.files).toContain('config');
  });
});
