import { describe, expect, it } from 'vitest';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { configJsonSchema, configJsonSchemaText } from '../src/config/json-schema.js';
import { configOptions, configReferenceText } from '../src/config/reference.js';
import { loadConfig, validateConfig } from '../src/config/config.js';

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

  it('every option has a description on its schema field, which the reference shows', () => {
    const options = configOptions();
    expect(options.length).toBeGreaterThan(150);
    expect(options.filter((o) => !o.description?.trim()).map((o) => o.path)).toEqual([]);
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

  it('agrees with config wherever a pattern can say it: review.url, paths, credentials as ${VAR} references', () => {
    const validate = validator();
    // Paths in a folder of the test's own: loadConfig resolves links in them (the snapshot root check), and a test
    // touches nothing outside the repository and the temporary folder.
    const home = mkdtempSync(join(tmpdir(), 'mw-schema-'));
    const env = { HOME: home, S3_SECRET: 'x'.repeat(40), SFTP_PW: 'y'.repeat(12) };
    const accepts = (raw: Record<string, unknown>) => {
      try {
        loadConfig({ overrides: raw, env });
        return true;
      } catch {
        return false;
      }
    };
    const urls = [
      'https://review.example.org/mw', 'http://127.0.0.1:9478', 'HTTP://review.example.org', 'https://[::1]:9478/',
      'javascript:alert(1)', 'JavaScript://x.example/%0aalert(1)', 'ftp://files.example/x', 'file:///etc/passwd', 'data:text/html,x',
      'mailto:ops@example.org', 'ws://x.example', 'httpx://y.example', '//x.example', 'review.example.org', '', 'http://',
    ];
    const paths = [join(home, 'a.db'), 'a.db', ' a.db', '${HOME}/a.db', '', ' ', '   ', '\t', ' \n ', '\u00a0', '\u2003\u3000', '\ufeff', 'a\u0000b', '\u0000', ' \u0000'];
    const s3 = (secretAccessKey: unknown) => ({ snapshot: { targets: [{ type: 's3', name: 'off', bucket: 'b', secretAccessKey }] } });
    const sftp = (field: string, value: unknown) => ({
      snapshot: { targets: [{ type: 'sftp', name: 'nas', host: 'nas.lan', username: 'mw', hostKeySha256: `SHA256:${'A'.repeat(43)}`, [field]: value }] },
    });
    const secrets = ['${S3_SECRET}', '${S3_SECRET:-}', 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', '${S3_SECRET}x', ' ${S3_SECRET}', '$S3_SECRET', '${1BAD}', '${S3 SECRET}', '', 42];
    const cases: Record<string, unknown>[] = [
      ...urls.map((url) => ({ review: { url } })),
      ...paths.flatMap((p) => [{ stores: { agent: { db: p } } }, { snapshot: { root: p } }, { review: { auth: { mode: 'users', usersFile: p } } }]),
      ...secrets.map(s3),
      ...secrets.map((v) => sftp('password', typeof v === 'string' ? v.replace('S3_SECRET', 'SFTP_PW') : v)),
      ...secrets.map((v) => sftp('passphrase', typeof v === 'string' ? v.replace('S3_SECRET', 'SFTP_PW') : v)),
    ];
    const disagree = cases.filter((raw) => validate(raw) !== accepts(raw)).map((raw) => `${JSON.stringify(raw)}: schema ${validate(raw)}, config ${accepts(raw)}`);
    expect(disagree).toEqual([]);
    // Both sides refuse what they should, not only agree.
    for (const bad of [{ review: { url: 'javascript:alert(1)' } }, { review: { url: 'ftp://x.example' } }, { stores: { agent: { db: '   ' } } }, s3('literal-secret-value')]) {
      expect(validate(bad), JSON.stringify(bad)).toBe(false);
    }
  });
});

