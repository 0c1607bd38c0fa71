import { existsSync, readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { dirname, resolve, isAbsolute } from 'node:path';
import { fileURLToPath } from 'node:url';
import { homedir } from 'node:os';
import { isDeepStrictEqual } from 'node:util';
import { z } from 'zod';
import { configError } from './errors.js';
import { rememberSecret } from './secrets.js';
import { storeSchema } from './store/config.js';
import { digestSchema, smtpSchema } from './digest/config.js';
import { verifySchema, resolveVerifyPaths, RULES_CONFIG_PATH } from './verifiers/config.js';
import { workerSchema, redisSchema } from './queue/config.js';
import { checkTargetSecrets, resolveTargetPaths, targetsSchema } from './snapshot/targets/config.js';
import { reviewWebShape } from './review-web/config.js';

/**
 * Config is read in one direction: defaults (config/default.yaml) → the user's YAML → `${ENV}` expansion →
 * validation. A wrong field is one line naming its path and what was expected.
 */
export const configSchema = z.strictObject({
  busyTimeoutMs: z.number().int().nonnegative().default(5000),
  /** memory-warden's own records (job runs, digest deliveries, verdicts, receipts); `~` is the home folder. */
  stateDb: z.string().min(1).default('~/.local/state/memory-warden/state.db'),
  log: z.strictObject({ level: z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info') }).prefault({}),
  prune: z
    .strictObject({
      expired: z.boolean().default(true),
      supersededAfterDays: z.number().nonnegative().default(180),
      batchSize: z.number().int().positive().default(100000),
      batchMs: z.number().positive().default(30),
      quietBatchMs: z.number().positive().default(1000),
      pauseMs: z.number().nonnegative().default(30),
      windowEndsOnCommit: z.boolean().default(true),
    })
    .prefault({}),
  review: z
    .strictObject({
      afterDays: z.number().nonnegative().default(90),
      batch: z.number().int().positive().default(20),
      ...reviewWebShape,
    })
    .prefault({}),
  snapshot: z
    .strictObject({
      root: z.string().min(1).default('./backups'),
      keep: z.number().int().positive().default(7),
      /** Copies off the machine: each completed snapshot is uploaded to each target (src/snapshot/targets). */
      targets: targetsSchema,
    })
    .prefault({}),
  redis: redisSchema.prefault({}),
  worker: workerSchema.prefault({}),
  smtp: smtpSchema.optional(),
  digest: digestSchema.prefault({}),
  verify: verifySchema.prefault({}),
  stores: z.record(z.string().regex(/^[A-Za-z0-9_.-]+$/, 'a store name of letters, digits, _ . -'), storeSchema).default({}),
});

export type Config = z.infer<typeof configSchema>;

/** The package's config/default.yaml, found from src/ (tests) and from dist/src/ (built) alike. */
export const DEFAULT_CONFIG_PATH = ((): string => {
  const here = dirname(fileURLToPath(import.meta.url));
  const candidates = [resolve(here, '../config/default.yaml'), resolve(here, '../../config/default.yaml')];
  return candidates.find((p) => existsSync(p)) ?? candidates[1]!;
})();

/**
 * config/default.yaml as parsed by `npm run build` (scripts/config-defaults.ts), beside this module in dist/src/.
 * Used only while default.yaml still has the sha256 it was parsed from: the YAML parser is ~230 modules, a tenth
 * of a second of every command's start-up, and a command given no config file needs no YAML but the defaults.
 */
export const DEFAULTS_CACHE_PATH = resolve(dirname(fileURLToPath(import.meta.url)), 'default-config.json');

const require = createRequire(import.meta.url);
const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** What scripts/config-defaults.ts writes, or undefined when default.yaml's values do not survive JSON exactly. */
export function defaultsCacheText(yamlText: string): string | undefined {
  const value = parseYaml(yamlText, DEFAULT_CONFIG_PATH);
  if (!isDeepStrictEqual(JSON.parse(JSON.stringify(value)), value)) return undefined;
  return JSON.stringify({ sha256: sha256(yamlText), value });
}

function cachedDefaults(yamlText: string): unknown {
  let cache: { sha256?: unknown; value?: unknown };
  try {
    cache = JSON.parse(readFileSync(DEFAULTS_CACHE_PATH, 'utf8')) as typeof cache;
  } catch {
    return undefined; // not built (tests run the sources), or unreadable: parse the YAML
  }
  return cache.sha256 === sha256(yamlText) ? cache.value : undefined;
}

/** The built-in defaults: from the build's cache while default.yaml is unchanged, else parsed. */
function readDefaults(): unknown {
  const text = readText(DEFAULT_CONFIG_PATH);
  const value = cachedDefaults(text) ?? parseYaml(text, DEFAULT_CONFIG_PATH);
  assertPlainTree(value, DEFAULT_CONFIG_PATH);
  return value;
}

const ENV_REF = /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g;

/**
 * Replace `${VAR}` and `${VAR:-default}` in every string; an unset variable without default names its field. Every
 * value taken from the environment is remembered as a secret (src/secrets.ts): it never reaches a record or an output.
 */
export function expandEnv(value: unknown, env: NodeJS.ProcessEnv, path: string[] = []): unknown {
  if (path.join('.') === RULES_CONFIG_PATH) return value; // `${group}` templates: the rule compiler expands env there
  if (typeof value === 'string') {
    return value.replace(ENV_REF, (_, name: string, fallback: string | undefined) => {
      const v = env[name];
      if (v !== undefined && v !== '') {
        rememberSecret(name, v);
        return v;
      }
      if (fallback !== undefined) return fallback;
      throw configError(`config ${path.join('.') || '(root)'}: environment variable ${name} is not set`);
    });
  }
  if (Array.isArray(value)) return value.map((v, i) => expandEnv(v, env, [...path, String(i)]));
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, expandEnv(v, env, [...path, k])]));
  }
  return value;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Deep merge of plain objects; arrays and scalars from `over` replace those of `base`. */
export function merge(base: unknown, over: unknown): unknown {
  if (!isPlainObject(base) || !isPlainObject(over)) return over === undefined ? base : over;
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(over)) out[k] = merge(base[k], v);
  return out;
}

function readText(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw configError(`config ${file}: cannot read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
}

function parseYaml(text: string, file: string): unknown {
  const YAML = require('yaml') as typeof import('yaml'); // loaded when a file is parsed (readDefaults)
  try {
    // Duplicate keys are an error, and aliases are capped (a "billion laughs" file is refused, not expanded).
    return YAML.parse(text, { uniqueKeys: true, maxAliasCount: 100 }) ?? {};
  } catch (err) {
    throw configError(`config ${file}: not valid YAML: ${(err as Error).message.split('\n')[0]}`);
  }
}

function readYaml(file: string): unknown {
  const value = parseYaml(readText(file), file);
  assertPlainTree(value, file);
  return value;
}

/** Keys that would reach an object's prototype when merged or copied, instead of being config. */
const FORBIDDEN_KEYS = new Set(['__proto__', 'constructor', 'prototype']);

/**
 * What YAML can build but config must never be: an alias that contains itself (a cycle: every walk below would
 * recurse until the stack is gone), and prototype keys. Refused naming the file and the key path.
 */
function assertPlainTree(value: unknown, file: string, path: string[] = [], open = new Set<object>()): void {
  if (typeof value !== 'object' || value === null) return;
  const where = () => path.join('.') || '(root)';
  if (open.has(value)) throw configError(`config ${file}: ${where()}: an alias that contains itself (a cycle)`);
  open.add(value);
  for (const [key, v] of Object.entries(value)) {
    if (FORBIDDEN_KEYS.has(key)) throw configError(`config ${file}: ${[...path, key].join('.')}: key "${key}" refused (it would reach object prototypes)`);
    assertPlainTree(v, file, [...path, key], open);
  }
  open.delete(value);
}

export function validateConfig(raw: unknown, source = 'config'): Config {
  const result = configSchema.safeParse(raw);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    const where = issue.path.map(String).join('.') || '(root)';
    const extra = issue.code === 'unrecognized_keys' ? ` (${issue.keys.join(', ')})` : '';
    throw configError(`${source}: ${where}: ${issue.message}${extra}`);
  }
  return result.data;
}

export interface LoadOptions {
  file?: string;
  env?: NodeJS.ProcessEnv;
  /** Applied last, before validation: e.g. `{ stores: { cli: { db } } }` for `--db PATH`. */
  overrides?: unknown;
}

/** Load, expand and validate. Relative paths in the user's file resolve against that file's folder. */
export function loadConfig(opts: LoadOptions = {}): Config {
  const env = opts.env ?? process.env;
  const defaults = readDefaults();
  let user: unknown = {};
  if (opts.file) {
    user = readYaml(opts.file);
    if (!isPlainObject(user)) throw configError(`config ${opts.file}: expected a mapping at the top level`);
    user = resolveRelativePaths(user, dirname(resolve(opts.file)));
  }
  const merged = merge(merge(defaults, user), opts.overrides);
  checkTargetSecrets(merged, opts.file ? `config ${opts.file}` : 'config');
  const expanded = expandEnv(merged, env);
  return validateConfig(expanded, opts.file ? `config ${opts.file}` : 'config');
}

function resolveRelativePaths(user: Record<string, unknown>, base: string): Record<string, unknown> {
  const abs = (p: unknown) =>
    typeof p === 'string' && !p.includes('${') && !p.startsWith('~') && !isAbsolute(p) ? resolve(base, p) : p;
  const out = { ...user };
  if (isPlainObject(out.stores)) {
    out.stores = Object.fromEntries(
      Object.entries(out.stores).map(([name, s]) => [name, isPlainObject(s) ? { ...s, db: abs(s.db) } : s]),
    );
  }
  if (typeof out.stateDb === 'string') out.stateDb = abs(out.stateDb);
  if (isPlainObject(out.snapshot)) out.snapshot = { ...out.snapshot, root: abs(out.snapshot.root), targets: resolveTargetPaths(out.snapshot.targets, abs) };
  if (isPlainObject(out.verify)) out.verify = resolveVerifyPaths(out.verify, abs);
  const auth = isPlainObject(out.review) && isPlainObject(out.review.auth) ? out.review.auth : undefined;
  if (auth && typeof auth.usersFile === 'string') out.review = { ...(out.review as object), auth: { ...auth, usersFile: abs(auth.usersFile) } };
  return out;
}

/** `~/x` → the home folder's x. */
export function expandHome(path: string, env: NodeJS.ProcessEnv = process.env): string {
  return path === '~' || path.startsWith('~/') ? (env.HOME ?? homedir()) + path.slice(1) : path;
}

/** The store a command works on: `--db PATH` alone needs no config; `--store NAME` picks one from the file. */
export function selectStore(config: Config, name: string | undefined): { name: string; store: Config['stores'][string] } {
  const names = Object.keys(config.stores);
  if (name) {
    const store = config.stores[name];
    if (!store) throw configError(`no store named "${name}" in config (stores: ${names.join(', ') || 'none'})`);
    return { name, store };
  }
  if (names.length === 1) return { name: names[0]!, store: config.stores[names[0]!]! };
  throw configError(names.length === 0 ? 'no store given: use --db PATH or --config FILE --store NAME' : `several stores in config: choose one with --store (${names.join(', ')})`);
}
