import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import YAML from 'yaml';
import { configSchema, DEFAULT_CONFIG_PATH, expandEnv } from '../src/config/config.js';
import { configJsonSchema } from '../src/config/json-schema.js';

/**
 * Defaults are written twice, in the zod schemas (src/config/config.ts, src/*\/config.ts) and in config/default.yaml (which
 * the loader merges under every config). These tests hold the two to each other, and default.yaml to "every option,
 * documented": an option it leaves out, or only shows in a comment, is listed here with the reason.
 */
const TEXT = readFileSync(DEFAULT_CONFIG_PATH, 'utf8');
/** Its uncommented content, `${VAR:-fallback}` read as the fallback (an environment with nothing set). */
const YAML_DEFAULTS = expandEnv(YAML.parse(TEXT), {});
const SCHEMA_DEFAULTS = configSchema.parse({});

/** Schema defaults default.yaml shows only in comments. */
const COMMENTED_ONLY: Record<string, string> = {
  'digest.lookTwice.sources': 'long regular-expression lists: the comment names them, src/digest/config.ts has them in full',
  'digest.lookTwice.instructions': 'as sources',
  'digest.lookTwice.secrets': 'as sources',
};

/** Options without a default (unset unless given): default.yaml shows each as a commented `# key:`. */
const UNSET: Record<string, string> = {
  eraseKeyFile: 'unset: `erase.key` in the state db\'s folder, wherever stateDb is (a fixed default would leave every existing key behind)',
  'review.url': 'the page address is the deployment\'s; without it the digest keeps its shell commands',
  'review.auth.userHeader': 'trusted only when set: no header is believed by default',
  'review.auth.usersFile': 'users mode only',
  'review.auth.clientHeader': 'trusted only when set: a client could otherwise name its own address',
  'review.auth.trustedProxies': 'the deployment\'s proxies; unset means loopback only',
  'worker.host': 'default `worker --host`, MEMORY_WARDEN_HOST, then the machine name: decided at start, not in config',
  'redis.username': 'an ACL user only where the deployment has one',
  'redis.password': 'a secret: from the environment, never a default',
  'redis.tls': 'TLS options only for a rediss:// Redis with its own CA',
  'redis.tls.caFile': 'the deployment\'s CA; else the system CAs',
  'redis.sentinels': 'Sentinel only: the deployment\'s sentinels',
  'redis.name': 'Sentinel only: the master name the sentinels watch',
  'redis.claimReplicas': 'decided by the deployment: 1 with sentinels, else 0',
  'redis.cluster': 'Redis Cluster only',
  'redis.cluster.nodes': 'Redis Cluster only: the deployment\'s nodes',
  smtp: 'only needed to send the digest; host has no default, so the whole section is commented',
};

type Leaf = [path: string, value: unknown];
const isMapping = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Every value under a mapping by its dotted path; lists, scalars and empty mappings are values. */
function leaves(value: unknown, path: string[] = []): Leaf[] {
  if (!isMapping(value) || (Object.keys(value).length === 0 && path.length > 0)) return [[path.join('.'), value]];
  return Object.entries(value).flatMap(([k, v]) => leaves(v, [...path, k]));
}

/**
 * default.yaml shows an option in a comment: `# key:` on a line of its top-level section (the lines after `top:`
 * up to the next line that starts in the first column), or `# top:` in the first column for a whole section.
 */
function commented(path: string): boolean {
  const [top, ...rest] = path.split('.');
  const lines = TEXT.split('\n');
  if (rest.length === 0) return lines.some((l) => new RegExp(`^#\\s*${top}:`).test(l));
  const start = lines.findIndex((l) => l.startsWith(`${top}:`));
  const end = lines.findIndex((l, i) => i > start && /^\S/.test(l));
  return start >= 0 && lines.slice(start + 1, end < 0 ? undefined : end).some((l) => new RegExp(`^\\s+#\\s*${rest.at(-1)}:`).test(l));
}

/** The input side of every object option, by path, through the JSON Schema generated from the zod schema. */
function objectOptions(schema: Record<string, unknown>, path: string[] = []): { path: string; hasDefault: boolean }[] {
  const properties = schema.properties as Record<string, Record<string, unknown>> | undefined;
  if (!properties) return [];
  return Object.entries(properties).flatMap(([key, sub]) => {
    const here = [...path, key];
    const option = { path: here.join('.'), hasDefault: 'default' in sub };
    // An object whose default is a whole value (`removeOnFail: { count: 1000 }`) is one option, not several.
    if (isMapping(sub.default) && Object.keys(sub.default).length > 0) return [option];
    const inner = (sub.anyOf as Record<string, unknown>[] | undefined)?.find((s) => s.type === 'object') ?? sub;
    return [option, ...objectOptions(inner, here)];
  });
}

describe('config defaults: the schema and config/default.yaml agree', () => {
  it('every option default.yaml sets is the schema\'s default', () => {
    const schema = new Map(leaves(SCHEMA_DEFAULTS));
    for (const [path, value] of leaves(YAML_DEFAULTS)) {
      expect(schema.has(path), `default.yaml sets ${path}, which the schema does not default`).toBe(true);
      expect(value, `default.yaml ${path}`).toEqual(schema.get(path));
    }
  });

  it('every schema default is set in default.yaml, or listed here as shown only in a comment', () => {
    const yaml = new Map(leaves(YAML_DEFAULTS));
    const missing = leaves(SCHEMA_DEFAULTS).map(([p]) => p).filter((p) => !yaml.has(p));
    expect(missing.sort()).toEqual(Object.keys(COMMENTED_ONLY).sort());
    for (const path of missing) expect(commented(path), `# ${path} in default.yaml`).toBe(true);
  });

  it('every option without a default is listed here and shown commented in default.yaml', () => {
    // Entries of `stores`, `verify.rules` and `worker.schedules` (maps and lists) are not walked: the commented
    // examples show their options (the store examples are checked below).
    const options = objectOptions(configJsonSchema());
    // smtp's own fields are shown inside its commented section.
    const unset = options.filter((o) => !o.hasDefault && !o.path.startsWith('smtp.')).map((o) => o.path);
    expect(unset.sort()).toEqual(Object.keys(UNSET).sort());
    for (const path of unset) expect(commented(path), `# ${path}: in default.yaml`).toBe(true);
  });

  it('the commented store examples are valid, and each value the schema would default is that default', () => {
    // The block under `stores: {}`, uncommented: three stores: a warden one with Qdrant, a PostgreSQL one and a mem0 one.
    const lines = TEXT.split('\n');
    const start = lines.indexOf('stores: {}') + 1;
    const end = lines.findIndex((l, i) => i >= start && !/^#\s+\S/.test(l));
    const stores = YAML.parse(lines.slice(start, end).map((l) => l.slice(1)).join('\n')) as Record<string, unknown>;
    expect(Object.keys(stores)).toEqual(['agent', 'fleet', 'assistant']);
    const parse = (s: unknown) => configSchema.safeParse({ stores: { s } });
    for (const [name, store] of Object.entries(stores)) {
      expect(parse(store).error, `stores.${name} example`).toBeUndefined();
      // Leave out one value at a time: where the schema then fills one in, the example must show that one.
      for (const [path, value] of leaves(store)) {
        const without = structuredClone(store) as Record<string, unknown>;
        const keys = path.split('.');
        let at = without;
        for (const k of keys.slice(0, -1)) at = at[k] as Record<string, unknown>;
        delete at[keys.at(-1)!];
        const filled = parse(without).data?.stores.s;
        const byDefault = filled && leaves(filled).find(([p]) => p === path);
        if (!byDefault || (name === 'assistant' && path === 'layout')) continue; // required, unset, or the mem0 example itself
        expect(value, `stores.${name}.${path}`).toEqual(byDefault[1]);
      }
    }
  });
});
