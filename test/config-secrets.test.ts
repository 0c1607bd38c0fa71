import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import YAML from 'yaml';
import { loadConfig } from '../src/config/config.js';
import { configJsonSchema } from '../src/config/json-schema.js';
import { SECRET_PATHS, blankUrlPassword, urlPassword } from '../src/config/secret-fields.js';
import { tempDir } from './helpers/store.js';
import { cli } from './helpers/cli.js';

/** Every field config/schema.json marks as a secret, as `a.*.b` / `a.[].b` paths. */
function markedInSchema(): string[] {
  const found = new Set<string>();
  const walk = (node: unknown, at: string[]): void => {
    if (!node || typeof node !== 'object') return;
    const n = node as Record<string, unknown>;
    if (n['x-secret'] !== undefined) found.add(at.join('.'));
    for (const [k, v] of Object.entries((n.properties as Record<string, unknown>) ?? {})) walk(v, [...at, k]);
    if (n.additionalProperties && typeof n.additionalProperties === 'object') walk(n.additionalProperties, [...at, '*']);
    if (n.items) walk(n.items, [...at, '[]']);
    for (const key of ['oneOf', 'anyOf', 'allOf'] as const) for (const v of (n[key] as unknown[]) ?? []) walk(v, at);
  };
  walk(configJsonSchema(), []);
  return [...found].sort();
}

/** A config that is valid with the secret at `path` set to `value`: the least each section needs around it. */
function withSecret(path: readonly string[], value: string): Record<string, unknown> {
  const key = path.at(-1)!;
  switch (path.slice(0, 2).join('.')) {
    case 'redis.url':
      return { redis: { url: value } };
    case 'redis.password':
      return { redis: { password: value } };
    case 'smtp.password':
      return { smtp: { host: 'mail.example.org', user: 'warden', password: value } };
    case 'stores.*':
      if (path[2] === 'postgres') return { stores: { agent: { engine: 'postgres', postgres: { url: value, schema: 'agent' } } } };
      if (path[2] === 'mastra') return { stores: { agent: { engine: 'postgres', layout: 'mastra', postgres: { url: '${MW_SECRET_TEST_PG:-}', schema: 'agent' }, mastra: { pgvector: { url: value } } } } };
      if (path[2] === 'mem0') return { stores: { agent: { layout: 'mem0', db: './memory.db', mem0: { vectorStore: 'pgvector', pgvector: { url: value } } } } };
      return { stores: { agent: { db: './agent.db', qdrant: { url: 'http://127.0.0.1:6333', collections: ['m'], apiKey: value } } } };
    case 'snapshot.targets': {
      const s3 = ['accessKeyId', 'secretAccessKey', 'sessionToken'].includes(key);
      const base = s3
        ? { type: 's3', name: 'off', bucket: 'b' }
        : { type: 'sftp', name: 'off', host: 'backup.example.org', username: 'warden', hostKeySha256: `SHA256:${'A'.repeat(43)}`, path: 'snaps' };
      return { snapshot: { targets: [{ ...base, [key]: value }] } };
    }
  }
  throw new Error(`withSecret: no fixture for ${path.join('.')}: add one`);
}

const shown = (path: readonly string[]) => path.map((k) => (k === '*' ? 'agent' : k === '[]' ? '0' : k)).join('.');

describe('secrets in the config: one rule, from the environment only', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());
  const load = (doc: unknown, env: Record<string, string> = {}) => {
    const file = join(dir, 'w.yaml');
    writeFileSync(file, YAML.stringify(doc));
    return loadConfig({ file, env: { HOME: dir, ...env } });
  };

  it('the list of secret fields is the schema\'s: every field marked secret, and no other', () => {
    expect(SECRET_PATHS.map((s) => s.path.join('.')).sort()).toEqual(markedInSchema());
    expect(markedInSchema()).toEqual(expect.arrayContaining(['smtp.password', 'stores.*.qdrant.apiKey', 'redis.password', 'redis.url', 'snapshot.targets.[].secretAccessKey']));
  });

  describe.each(SECRET_PATHS.map((s) => [shown(s.path), s] as const))('%s', (_, { path }) => {
    it('written literally: refused, naming the field and not the value', () => {
      const secret = path[0] === 'redis' && path[1] === 'url' ? 'redis://:Lit3ral@Secret@127.0.0.1:6379' : 'Lit3ral@Secret';
      let thrown: Error | undefined;
      try {
        load(withSecret(path, secret));
      } catch (err) {
        thrown = err as Error;
      }
      expect(thrown?.message).toMatch(new RegExp(`^config .*w\\.yaml: ${shown(path).replace(/\./g, '\\.')}: a credential goes in the environment`));
      expect(thrown?.message).not.toContain('Lit3ral');
      // a fallback is text of the file too
      expect(() => load(withSecret(path, path[1] === 'url' ? '${REDIS_URL:-redis://:Lit3ral@127.0.0.1:6379}' : '${SOME_SECRET:-Lit3ral}'))).toThrow(/a credential goes in the environment/);
    });

    it('as a ${VAR} reference: taken from the environment', () => {
      const value = path[1] === 'url' ? 'redis://:Env@Secret@127.0.0.1:6379' : 'Env@Secret';
      const config = load(withSecret(path, '${SOME_SECRET}'), { SOME_SECRET: value }) as unknown as Record<string, unknown>;
      let at: unknown = config;
      for (const k of path) at = (at as Record<string, unknown>)[k === '*' ? 'agent' : k === '[]' ? 0 : k];
      expect(at).toBe(value);
    });
  });

  it('a password inside a URL, in the file: refused in any field; from the environment: taken', () => {
    expect(() => load({ redis: { url: 'redis://:${REDIS_PASSWORD}@127.0.0.1:6379' } }, { REDIS_PASSWORD: 'x@y' })).not.toThrow();
    expect(() => load({ redis: { url: 'redis://warden:${REDIS_PASSWORD:-}@127.0.0.1:6379' } })).not.toThrow();
    expect(() => load({ redis: { url: 'redis://127.0.0.1:6379/2' } })).not.toThrow();
    expect(() => load({ redis: { url: 'redis://user:pw@127.0.0.1:6379' } })).toThrow(/: redis\.url: a credential goes in the environment/);
    expect(() => load({ redis: { url: 'redis://:${REDIS_PASSWORD}tail@127.0.0.1:6379' } }, { REDIS_PASSWORD: 'x' })).toThrow(/redis\.url: a credential/);
    expect(() => load({ stores: { agent: { db: './a.db', qdrant: { url: 'https://u:pw@q.example.org', collections: ['m'] } } } })).toThrow(/: stores\.agent\.qdrant\.url: a credential goes in the environment/);
    expect(() => load({ review: { url: 'https://reader:pw@warden.example.org/review' } })).toThrow(/: review\.url: a credential/);
  });

  it('reads a URL\'s password as the client does: to the last @ of the authority, decoded', () => {
    expect(urlPassword('redis://:Pw@Zq7Secret22x@host:6379')).toBe('Pw@Zq7Secret22x');
    expect(urlPassword('redis://u:a%2Fb%25c@host')).toBe('a/b%c');
    expect(urlPassword('redis://host:6379')).toBeUndefined();
    expect(blankUrlPassword('redis://:Pw@Zq7Secret22x@host:6379/0')).toBe('redis://:[redacted]@host:6379/0');
    expect(blankUrlPassword('rediss://user:p:w@h@host')).toBe('rediss://user:[redacted]@host');
  });
});

describe('memory-warden config: no secret printed, every setting shown', () => {
  let dir: string;
  let cleanup: () => void;
  beforeEach(() => ({ dir, cleanup } = tempDir()));
  afterEach(() => cleanup());

  it('blanks the secrets by what they are, wherever they came from, and shows the rest as loaded', () => {
    const file = join(dir, 'w.yaml');
    const env: Record<string, string> = {
      // ioredis reads this URL's password as "Pw@Zq7Secret22x" (WHATWG URL: user information to the last @)
      REDIS_URL: 'redis://:Pw@Zq7Secret22x@127.0.0.1:6379',
      REDIS_PASSWORD: 'r@:/%Zq8',
      SMTP_PASSWORD: 'sm@tp:pa/ss%word9',
      QDRANT_API_KEY: 'qd:rant@key/with%25',
      AWS_ACCESS_KEY_ID: 'AKIAZQ7SECRETKEY123',
      AWS_SECRET_ACCESS_KEY: 'aws/secret:key@with%sign',
      SFTP_PASSWORD: 'x@/', // shorter than any value redaction looks for: blanked as the field it is
      HOME: dir,
    };
    writeFileSync(
      file,
      YAML.stringify({
        redis: { password: '${REDIS_PASSWORD}' },
        smtp: { host: 'mail.example.org', user: 'warden', password: '${SMTP_PASSWORD}' },
        stores: { agent: { db: './agent.db', qdrant: { url: 'http://127.0.0.1:6333', collections: ['m'], apiKey: '${QDRANT_API_KEY}' } } },
        review: { tokenDays: 5, auth: { mode: 'password', passwordEnv: 'MY_REVIEW_PASSWORD' }, secretEnv: 'MY_REVIEW_KEY' },
        snapshot: {
          targets: [
            { type: 's3', name: 'off', bucket: 'b', accessKeyId: '${AWS_ACCESS_KEY_ID}', secretAccessKey: '${AWS_SECRET_ACCESS_KEY}' },
            { type: 'sftp', name: 'box', host: 'backup.example.org', username: 'warden', hostKeySha256: `SHA256:${'A'.repeat(43)}`, path: 'snaps', password: '${SFTP_PASSWORD}' },
          ],
        },
      }),
    );
    const r = cli(['config', '--config', file], env);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const secrets = Object.entries(env).filter(([k]) => k !== 'HOME').map(([, v]) => v);
    for (const s of [...secrets, 'Zq7Secret22x', 'Pw@Zq7', 'Pw%40Zq7']) {
      expect(r.stdout, s).not.toContain(s);
      expect(r.stdout, s).not.toContain(encodeURIComponent(s));
      expect(r.stdout, s).not.toContain(JSON.stringify(s).slice(1, -1));
    }
    const printed = r.json();
    // every setting, as loaded: the whole config but the secret fields
    const loaded = JSON.parse(JSON.stringify(loadConfig({ file, env })));
    const leaves = (v: unknown, at: string[] = []): [string, unknown][] =>
      v !== null && typeof v === 'object' ? Object.entries(v).flatMap(([k, x]) => leaves(x, [...at, k])) : [[at.join('.'), v]];
    const secretLeaf = (p: string) => SECRET_PATHS.some((s) => new RegExp(`^${s.path.map((k) => (k === '*' || k === '[]' ? '[^.]+' : k)).join('\\.')}$`).test(p));
    const settings = leaves(loaded).filter(([p]) => !secretLeaf(p));
    expect(settings.length).toBeGreaterThan(50);
    const printedLeaves = new Map(leaves(printed));
    for (const [p, v] of settings) expect(printedLeaves.get(p), p).toEqual(v);
    expect(printed.review).toMatchObject({ tokenDays: 5, secretEnv: 'MY_REVIEW_KEY', auth: { passwordEnv: 'MY_REVIEW_PASSWORD' } });
    // and each secret field, set, is there but blank
    expect(printed.smtp.password).toBe('[redacted]');
    expect(printed.redis.password).toBe('[redacted]');
    expect(printed.stores.agent.qdrant.apiKey).toBe('[redacted]');
    expect(printed.snapshot.targets[0]).toMatchObject({ accessKeyId: '[redacted]', secretAccessKey: '[redacted]' });
    expect(printed.snapshot.targets[1].password).toBe('[redacted]');
    expect(printed.redis.url).not.toMatch(/Zq7|Pw/);
  });
});
