import { z } from '../vendor/zod.js';
import { configError } from '../core/errors.js';
import { expandTemplate } from './env-template.js';
import { redactSecrets } from '../text/secrets.js';

/**
 * The fields of the config that hold a secret, and the one rule they all follow: a secret comes from the
 * environment, never from the file. A secret field is written as a whole `${VAR}` reference (`${VAR:-}` too: unset
 * means none); a URL that may carry a password (redis.url) is a `${VAR}` reference, or a URL whose password part is
 * one (`redis://:${REDIS_PASSWORD}@host:6379`). A literal secret is a config error naming the field, before anything
 * is expanded or opened. The same list decides what `memory-warden config` blanks: secrets by what they are, not by
 * what their key is called (`tokenDays`, `passwordEnv` are settings).
 *
 * Each field is also marked in the zod schema (secretField), so config/schema.json says the rule to editors;
 * test/config-secrets.test.ts keeps this list and the marks the same.
 */
export type SecretKind = 'value' | 'url';

export interface SecretPath {
  /** Keys from the config's root; `*` is every key of a mapping (a store's name), `[]` every item of a list. */
  path: readonly string[];
  kind: SecretKind;
}

const TARGET_SECRETS = ['accessKeyId', 'secretAccessKey', 'sessionToken', 'privateKey', 'passphrase', 'password'] as const;

export const SECRET_PATHS: readonly SecretPath[] = [
  { path: ['redis', 'url'], kind: 'url' },
  { path: ['redis', 'password'], kind: 'value' },
  { path: ['smtp', 'password'], kind: 'value' },
  { path: ['stores', '*', 'qdrant', 'apiKey'], kind: 'value' },
  { path: ['stores', '*', 'postgres', 'url'], kind: 'value' },
  { path: ['stores', '*', 'mem0', 'pgvector', 'url'], kind: 'value' },
  { path: ['stores', '*', 'mastra', 'pgvector', 'url'], kind: 'value' },
  ...TARGET_SECRETS.map((f) => ({ path: ['snapshot', 'targets', '[]', f], kind: 'value' as const })),
];

/** A field written as one `${VAR}` reference (or `${VAR:-}`): its value can only come from the environment. */
export const WHOLE_ENV_REF = /^\$\{[A-Za-z_][A-Za-z0-9_]*(:-)?\}$/;

const MARK = 'zq0envref0qz';

/** The schema of a secret field: a string, marked so that config/schema.json requires a `${VAR}` reference. */
export function secretField(kind: SecretKind = 'value') {
  return z.string().meta(kind === 'value'
    ? { 'x-secret': kind, pattern: WHOLE_ENV_REF.source }
    : { 'x-secret': kind });
}

/** Every place `path` reaches in `root`: the value there and the dotted name of the field. */
function* reach(root: unknown, path: readonly string[], at: string[] = []): Generator<{ value: unknown; where: string; set: (v: unknown) => void }> {
  const [key, ...rest] = path;
  if (key === undefined || root === null || typeof root !== 'object') return;
  const entries: [string, string][] =
    key === '[]' ? (Array.isArray(root) ? root.map((_, i) => [String(i), String(i)]) : [])
    : key === '*' ? (Array.isArray(root) ? [] : Object.keys(root).map((k) => [k, k]))
    : Array.isArray(root) ? [] : [[key, key]];
  for (const [k, name] of entries) {
    if (!Object.prototype.hasOwnProperty.call(root, k)) continue;
    const value = (root as Record<string, unknown>)[k];
    if (rest.length === 0) yield { value, where: [...at, name].join('.'), set: (v) => ((root as Record<string, unknown>)[k] = v) };
    else yield* reach(value, rest, [...at, name]);
  }
}

/**
 * The password a URL carries, as the client reads it (WHATWG URL, as ioredis parses it: the user information runs
 * to the last `@` of the authority, percent-decoded), or undefined when it carries none or is no URL.
 */
export function urlPassword(text: string): string | undefined {
  let u: URL;
  try {
    u = new URL(text);
  } catch {
    return undefined;
  }
  if (!u.password) return undefined;
  try {
    return decodeURIComponent(u.password);
  } catch {
    return u.password;
  }
}

/** Does the template put literal text of the file into a URL's password (in the value as set, or a fallback)? */
function literalUrlPassword(text: string): boolean {
  // Every variable set: what the file itself writes around them. Every variable unset: what its fallbacks write.
  const allSet = new Proxy({}, { get: () => MARK }) as NodeJS.ProcessEnv;
  const expansions: string[] = [];
  const keep = () => MARK as never;
  try {
    expansions.push(expandTemplate(text, allSet, keep, () => {}), expandTemplate(text, {}, keep, () => {}));
  } catch {
    return false; // a malformed placeholder: expandEnv names it
  }
  return expansions.some((s) => {
    const password = urlPassword(s);
    return password !== undefined && password.split(MARK).join('') !== '';
  });
}

/**
 * Refuse a secret written in the file: run on the merged config before `${VAR}` is expanded. `source` names the
 * config (`config /etc/memory-warden/config.yaml`). Besides the secret fields, a password inside any URL of the
 * config (a Qdrant or review URL, an S3 endpoint) is a secret too and follows the same rule.
 */
export function checkSecrets(raw: unknown, source: string): void {
  for (const { path, kind } of SECRET_PATHS) {
    for (const { value, where } of reach(raw, path)) {
      if (value === undefined || value === null) continue;
      if (typeof value === 'string' && WHOLE_ENV_REF.test(value)) continue;
      if (kind === 'url' && typeof value === 'string' && !literalUrlPassword(value)) continue;
      throw literal(source, where, kind);
    }
  }
  const walk = (value: unknown, at: string[]): void => {
    if (typeof value === 'string') {
      if (value.includes('@') && literalUrlPassword(value)) throw literal(source, at.join('.'), 'url');
    } else if (Array.isArray(value)) value.forEach((v, i) => walk(v, [...at, String(i)]));
    else if (value !== null && typeof value === 'object') for (const [k, v] of Object.entries(value)) walk(v, [...at, k]);
  };
  walk(raw, []);
}

function literal(source: string, where: string, kind: SecretKind) {
  const how = kind === 'url' ? 'write the URL as "${SOME_VAR}", or its password as one (scheme://user:${SOME_VAR}@host)' : 'write "${SOME_VAR}" here';
  return configError(`${source}: ${where}: a credential goes in the environment; ${how}`);
}

const BLANK = '[redacted]';

/** A URL with its password (as the client reads it) replaced by `[redacted]`; the rest is shown. */
export function blankUrlPassword(text: string): string {
  if (urlPassword(text) === undefined) return text;
  const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(text)?.[0];
  if (!scheme) return BLANK;
  const rest = text.slice(scheme.length);
  const authorityEnd = rest.search(/[/?#\\]/);
  const authority = authorityEnd < 0 ? rest : rest.slice(0, authorityEnd);
  const at = authority.lastIndexOf('@');
  const colon = authority.indexOf(':');
  if (at < 0 || colon < 0 || colon > at) return BLANK;
  return `${scheme}${authority.slice(0, colon)}:${BLANK}${rest.slice(at)}`;
}

/** A copy of a validated config with every secret field blanked (a URL keeps all but its password). */
export function blankSecrets<T>(config: T): T {
  const copy = structuredClone(config);
  for (const { path, kind } of SECRET_PATHS) {
    for (const { value, set } of reach(copy, path)) {
      if (typeof value !== 'string' || value === '') continue;
      set(kind === 'url' ? blankUrlPassword(value) : BLANK);
    }
  }
  return copy;
}

/**
 * The config as `memory-warden config` prints it: every value that came from the environment first (wherever it
 * landed, whole or inside a URL: `${REDIS_URL}`), then each secret field by what it is. Settings are shown as they
 * are, whatever their key is called.
 */
export function printableConfig<T>(config: T): T {
  const blankUrls = (value: unknown): unknown => {
    if (typeof value === 'string') return value.includes('@') ? blankUrlPassword(value) : value;
    if (Array.isArray(value)) return value.map(blankUrls);
    if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, blankUrls(v)]));
    return value;
  };
  return blankUrls(blankSecrets(redactSecrets(JSON.parse(JSON.stringify(config)) as T))) as T;
}
