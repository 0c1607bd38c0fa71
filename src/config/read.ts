import { readFileSync } from 'node:fs';
import { readRegularFile } from '../core/read-file.js';
import { DEFAULT_CONFIG_FILE, SRC_ROOT } from '../core/places.js';
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { homedir } from 'node:os';
import { isDeepStrictEqual } from 'node:util';
import { configError } from '../core/errors.js';
import { rememberSecret } from '../text/secrets.js';
import { expandTemplate } from './env-template.js';
import { STORE_NAME } from '../store/name.js';

/**
 * Reading config, without validating it: the defaults (config/default.yaml, or the build's parsed copy), YAML
 * files, `${ENV}` expansion, merging. No zod and no YAML parser load here: src/config/config.ts validates, and
 * `quickConfig` below gives a run with no config file its validated config from the build's cache.
 */

/** The package's config/default.yaml. */
export const DEFAULT_CONFIG_PATH = DEFAULT_CONFIG_FILE;

/**
 * config/default.yaml as parsed by `npm run build` (scripts/config-defaults.ts), in dist/src/ beside the modules.
 * Used only while default.yaml still has the sha256 it was parsed from: the YAML parser is ~230 modules, a tenth
 * of a second of every command's start-up, and a command given no config file needs no YAML but the defaults.
 */
export const DEFAULTS_CACHE_PATH = join(SRC_ROOT, 'default-config.json');

/** `verify.rules` keeps its `${group}` templates: the rule compiler expands the environment there. */
export const RULES_CONFIG_PATH = 'verify.rules';

const require = createRequire(import.meta.url);
export const sha256 = (text: string | Buffer) => createHash('sha256').update(text).digest('hex');

/** What scripts/config-defaults.ts writes (src/config/config.ts adds the validated part). */
export interface DefaultsCache {
  sha256: string;
  value: unknown;
  quick?: QuickCache;
}

/**
 * The validated config of a run given no config file, as zod gave it at build time for the defaults expanded with
 * an empty environment (`input` → `output`), and the compiled modules that define the schema with their sha256:
 * the cache stands only while every one of them is unchanged (a schema rebuilt without `npm run build` is not
 * trusted). src/config/config.ts `quickCache` makes it and checks every claim quickConfig relies on.
 */
export interface QuickCache {
  /** The defaults expanded with no environment, without `stores`. */
  input: Record<string, unknown>;
  output: Record<string, unknown>;
  /** A store given only its `db`, validated: `db` stands for any path text (isPathText). */
  store: Record<string, unknown>;
  sources: Record<string, string>;
}

function readCache(yamlText: string): DefaultsCache | undefined {
  let cache: DefaultsCache;
  try {
    cache = JSON.parse(readFileSync(DEFAULTS_CACHE_PATH, 'utf8')) as DefaultsCache;
  } catch {
    return undefined; // not built (tests run the sources), or unreadable: parse the YAML
  }
  return cache.sha256 === sha256(yamlText) ? cache : undefined;
}

/**
 * The state db of a command given no config file (`--db PATH` alone): the defaults' `stateDb` with this environment
 * (`MEMORY_WARDEN_STATE`, else under the home folder), `~` expanded. Undefined when that does not expand.
 */
export function stateDbWithoutConfig(env: NodeJS.ProcessEnv = process.env): string | undefined {
  try {
    const v = expandEnv((readDefaults() as Record<string, unknown>).stateDb, env, ['stateDb']);
    return typeof v === 'string' && isPathText(v) ? resolve(expandHome(v, env)) : undefined;
  } catch {
    return undefined;
  }
}

/** The built-in defaults: from the build's cache while default.yaml is unchanged, else parsed. */
export function readDefaults(): unknown {
  const text = readText(DEFAULT_CONFIG_PATH);
  return defaultsOf(text, readCache(text));
}

function defaultsOf(text: string, cached: DefaultsCache | undefined): unknown {
  const value = cached ? cached.value : parseYaml(text, DEFAULT_CONFIG_PATH);
  assertPlainTree(value, DEFAULT_CONFIG_PATH);
  return value;
}

/**
 * Config fields that name a file or folder (`stateDb`, `stores.a.db`, `snapshot.root`, a target's `path`,
 * `identityFile`, `fileRoots`, `gitRepos`, `cacheDir`, verify `plugins`, mem0's `vectorDb` and `vectorPaths`,
 * `usersFile`): by the last key that is not an index. Read before the schema (expansion comes first), so by name;
 * test/config-paths.test.ts holds it to the fields made with pathField (src/config/path-field.ts), no more and no fewer.
 */
export function isPathField(path: string[]): boolean {
  const key = [...path].reverse().find((k) => !/^\d+$/.test(k)) ?? '';
  return /^(?:db|dir|path|root|plugins)$|(?:Db|Dir|File|Path|Paths|Root|Roots|Repos)$/.test(key);
}

/**
 * A whole URL from the environment in a field named `url` (`redis.url: ${REDIS_URL}`, a store's `qdrant.url`):
 * where a service is, whose only secret is the password in it. Those (as written and decoded) are the secrets, so
 * that a log or an error can say where it connected (`redis://:***@10.0.0.5:6379`), not `${REDIS_URL}`. A URL with
 * a query or a fragment (a token can sit there), or one that does not parse, stays a secret as a whole: undefined.
 */
export function urlCredentials(path: string[], value: string): string[] | undefined {
  if (path[path.length - 1] !== 'url' || !/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) return undefined;
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    return undefined;
  }
  if (u.search !== '' || u.hash !== '' || value.includes('?') || value.includes('#')) return undefined;
  if (u.password === '') return [];
  let decoded = u.password;
  try {
    decoded = decodeURIComponent(u.password);
  } catch {
    // kept as written
  }
  return [...new Set([u.password, decoded])];
}

/**
 * Replace `${VAR}` and `${VAR:-default}` in every string (src/config/env-template.ts: a default may hold another
 * placeholder, `$${` is a literal `${`, any other `${` is an error naming its field, as is an unset variable without
 * default), and the config file it is in when `file` is given, as every other config error. Every value taken from
 * the environment is remembered as a secret (src/text/secrets.ts): it never reaches a record or an output.
 */
export function expandEnv(value: unknown, env: NodeJS.ProcessEnv, path: string[] = [], file?: string): unknown {
  if (path.join('.') === RULES_CONFIG_PATH) return value; // `${group}` templates: the rule compiler expands env there
  if (typeof value === 'string') {
    const fail = (problem: string): never => {
      throw configError(`config ${file !== undefined ? `${file}: ` : ''}${path.join('.') || '(root)'}: ${problem}`);
    };
    return expandTemplate(value, env, fail, (name, v) => {
      const credentials = urlCredentials(path, v);
      if (credentials) for (const c of credentials) rememberSecret(name, c);
      else rememberSecret(name, v, isPathField(path));
    });
  }
  if (Array.isArray(value)) return value.map((v, i) => expandEnv(v, env, [...path, String(i)], file));
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, expandEnv(v, env, [...path, k], file)]));
  }
  return value;
}

/**
 * Why text cannot name a file or folder (empty, only spaces, a NUL byte), or undefined when it can: src/config/path-field.ts
 * refuses it in config, and only path text is resolved against the config file or taken by the quick path.
 */
export function pathTextProblem(p: string): string | undefined {
  if (p.trim() === '') return p === '' ? 'a path, not empty text' : 'a path, not only spaces';
  return p.includes('\0') ? 'a path, without a NUL character' : undefined;
}

export const isPathText = (p: string): boolean => pathTextProblem(p) === undefined;

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Deep merge of plain objects; arrays and scalars from `over` replace those of `base`. */
export function merge(base: unknown, over: unknown): unknown {
  if (!isPlainObject(base) || !isPlainObject(over)) return over === undefined ? base : over;
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(over)) out[k] = merge(base[k], v);
  return out;
}

export function readText(file: string): string {
  try {
    return readRegularFile(file);
  } catch (err) {
    throw configError(`config ${file}: cannot read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
}

/**
 * A config file's YAML, as plain data, or one line naming the file and what is wrong. Duplicate keys are an error,
 * and aliases are capped (a "billion laughs" file is refused, not expanded). Only the core schema's tags (`!!str`,
 * `!!int` …): the library's "known" ones (`!!binary`, `!!set`, `!!omap`, `!!timestamp`) make values no config
 * holds (a set or map read as an empty section), and a tag it does not know (`!!js/function`, `!custom`) or a
 * directive it does not know (`%FOO`) is an error here, not a warning. The library prints nothing itself
 * (logLevel 'error': warnings are not printed, errors are kept): its warnings went to stderr as Node warnings with
 * a code frame, several lines after the error.
 */
export function parseYaml(text: string, file: string): unknown {
  // Loaded when a file is parsed (readDefaults); the build's one-file copy of the package (scripts/vendor.ts).
  const YAML = require(join(SRC_ROOT, 'vendor', 'yaml.cjs')) as typeof import('yaml');
  const lines = new YAML.LineCounter();
  const fail = (message: string) => configError(`config ${file}: not valid YAML: ${message.split('\n')[0]!.replace(/:$/, '')}`);
  const doc = YAML.parseDocument(text, { uniqueKeys: true, resolveKnownTags: false, logLevel: 'error', lineCounter: lines });
  const problem = doc.errors[0] ?? doc.warnings[0];
  if (problem) throw fail(problem.message);
  // A list or mapping as a key (`? [a]`) would be made a string of it; config keys are names.
  YAML.visit(doc, {
    Pair(_, pair) {
      const key = YAML.isAlias(pair.key) ? pair.key.resolve(doc) : pair.key;
      if (!YAML.isCollection(key)) return;
      const at = lines.linePos((pair.key as { range?: [number] }).range?.[0] ?? 0);
      throw fail(`a key that is a ${YAML.isSeq(key) ? 'list' : 'mapping'} at line ${at.line}, column ${at.col}; config keys are names`);
    },
  });
  try {
    return doc.toJS({ maxAliasCount: 100 }) ?? {};
  } catch (err) {
    throw fail((err as Error).message);
  }
}

export function readYaml(file: string): unknown {
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
export function assertPlainTree(value: unknown, file: string, path: string[] = [], open = new Set<object>()): void {
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

export interface LoadOptions {
  file?: string;
  env?: NodeJS.ProcessEnv;
  /** Applied last, before validation: e.g. `{ stores: { cli: { db } } }` for `--db PATH`. */
  overrides?: unknown;
}

/** Leaves of the defaults that take their value from the environment and that the schema passes through as given. */
export const QUICK_LEAVES = [['stateDb'], ['redis', 'url']] as const;
export { STORE_NAME, STORE_NAME_RULE, storeNameFrom } from '../store/name.js';

/**
 * The validated config of a run given no config file (`--db PATH`, or nothing), without zod: the build's cache
 * (above) holds zod's output for the defaults, and the only parts that can differ at run time are the leaves that
 * come from the environment (QUICK_LEAVES, any path text) and the stores `--db` adds (a name and a path).
 * Anything else, or a value those rules do not cover, returns undefined: src/config/config.ts validates it with zod,
 * which also words the error. test/cli-startup.test.ts compares the two loaders.
 */
export function quickConfig(opts: LoadOptions): Record<string, unknown> | undefined {
  if (opts.file) return undefined;
  const text = readText(DEFAULT_CONFIG_PATH);
  const cached = readCache(text);
  const quick = cached?.quick;
  if (!quick || !sourcesUnchanged(quick.sources)) return undefined;
  const stores = onlyStorePaths(opts.overrides);
  if (stores === undefined) return undefined;
  const defaults = defaultsOf(text, cached);
  // As loadConfig: merged, then expanded (an unset variable is the same error, each secret remembered).
  const expanded = expandEnv(merge(defaults, opts.overrides), opts.env ?? process.env) as Record<string, unknown>;
  const output = structuredClone(quick.output);
  const rest = structuredClone(expanded);
  for (const path of QUICK_LEAVES) {
    const v = get(expanded, path);
    if (typeof v !== 'string' || !isPathText(v)) return undefined; // zod words what is wrong (stateDb is a path)
    set(output, path, v);
    set(rest, path, get(quick.input, path));
  }
  delete rest.stores; // the build's input has none (defaults name no store)
  if (!isDeepStrictEqual(rest, quick.input)) return undefined;
  const validStores: Record<string, unknown> = {};
  for (const name of Object.keys(stores)) {
    const db = (expanded.stores as Record<string, { db: unknown }>)[name]!.db;
    if (!STORE_NAME.test(name) || typeof db !== 'string' || !isPathText(db)) return undefined;
    validStores[name] = { ...quick.store, db };
  }
  output.stores = validStores;
  return output;
}

/** `{ stores: { name: { db } } }` (what `--db` adds) or nothing; undefined for any other override. */
function onlyStorePaths(overrides: unknown): Record<string, unknown> | undefined {
  if (overrides === undefined) return {};
  if (!isPlainObject(overrides) || Object.keys(overrides).join() !== 'stores' || !isPlainObject(overrides.stores)) return undefined;
  for (const s of Object.values(overrides.stores)) if (!isPlainObject(s) || Object.keys(s).join() !== 'db') return undefined;
  return overrides.stores;
}

function sourcesUnchanged(sources: Record<string, string>): boolean {
  const base = dirname(DEFAULTS_CACHE_PATH);
  try {
    return Object.entries(sources).every(([file, hash]) => sha256(readFileSync(resolve(base, file))) === hash);
  } catch {
    return false;
  }
}

const get = (o: Record<string, unknown>, path: readonly string[]): unknown =>
  path.reduce<unknown>((v, k) => (isPlainObject(v) ? v[k] : undefined), o);

function set(o: Record<string, unknown>, path: readonly string[], value: unknown): void {
  const parent = get(o, path.slice(0, -1));
  if (isPlainObject(parent)) parent[path.at(-1)!] = value;
}

/** `~/x` → the home folder's x. */
export function expandHome(path: string, env: NodeJS.ProcessEnv = process.env): string {
  return path === '~' || path.startsWith('~/') ? (env.HOME ?? homedir()) + path.slice(1) : path;
}

/** The store a command works on: `--db PATH` alone needs no config; `--store NAME` picks one from the file. */
export function selectStore<S>(config: { stores: Record<string, S> }, name: string | undefined): { name: string; store: S } {
  const names = Object.keys(config.stores);
  if (name) {
    const store = config.stores[name];
    if (!store) throw configError(`no store named "${name}" in config (stores: ${names.join(', ') || 'none'})`);
    return { name, store };
  }
  if (names.length === 1) return { name: names[0]!, store: config.stores[names[0]!]! };
  throw configError(names.length === 0 ? 'no store given: use --db PATH or --config FILE --store NAME' : `several stores in config: choose one with --store (${names.join(', ')})`);
}
